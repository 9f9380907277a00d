package debezium

import (
	"math/big"
	"strconv"
)

// maxScale bounds decimal scales and JSON exponents so that a hostile record
// cannot make the decoder print megabytes of zeros. PostgreSQL's numeric
// allows at most 16383 fraction digits.
const maxScale = 20000

// appendScaled appends the canonical text of the decimal whose unscaled
// magnitude has the decimal digits mag (no sign; leading zeros allowed) and
// whose scale is scale: "-12.3400" style, never an exponent. Zero has no sign.
func appendScaled(dst []byte, neg bool, mag []byte, scale int) []byte {
	for len(mag) > 1 && mag[0] == '0' {
		mag = mag[1:]
	}
	if len(mag) == 0 || (len(mag) == 1 && mag[0] == '0') {
		mag = []byte{'0'}
		neg = false
	}
	if neg {
		dst = append(dst, '-')
	}
	switch {
	case scale <= 0:
		dst = append(dst, mag...)
		if mag[0] != '0' {
			for ; scale < 0; scale++ {
				dst = append(dst, '0')
			}
		}
	case len(mag) <= scale:
		dst = append(dst, '0', '.')
		for n := scale - len(mag); n > 0; n-- {
			dst = append(dst, '0')
		}
		dst = append(dst, mag...)
	default:
		dst = append(dst, mag[:len(mag)-scale]...)
		dst = append(dst, '.')
		dst = append(dst, mag[len(mag)-scale:]...)
	}
	return dst
}

// appendTwosComplementDecimal appends the canonical text of the decimal whose
// unscaled value is the big-endian two's complement integer b (Kafka
// Connect's Decimal encoding) at the given scale. Up to 8 bytes take an
// allocation-free path; longer values go through math/big.
func appendTwosComplementDecimal(dst, digits []byte, b []byte, scale int) (out, digitsBuf []byte) {
	if len(b) == 0 {
		return appendScaled(dst, false, nil, scale), digits
	}
	neg := b[0]&0x80 != 0
	if len(b) <= 8 {
		var u uint64
		for _, c := range b {
			u = u<<8 | uint64(c)
		}
		if neg {
			if len(b) < 8 {
				u |= ^uint64(0) << (8 * len(b))
			}
			u = ^u + 1 // magnitude; 1<<63 for the minimum value
		}
		digits = strconv.AppendUint(digits[:0], u, 10)
		return appendScaled(dst, neg, digits, scale), digits
	}
	if len(b) <= smallDecimalBytes {
		digits = appendMagnitude(digits[:0], b, neg)
		return appendScaled(dst, neg, digits, scale), digits
	}
	z := new(big.Int).SetBytes(b)
	if neg {
		z.Sub(z, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
		z.Neg(z)
	}
	digits = z.Append(digits[:0], 10)
	return appendScaled(dst, neg, digits, scale), digits
}

// appendPlainNumber appends the canonical plain-decimal text of a JSON number
// literal: the literal's digits and scale are kept ("1.50" stays "1.50"), an
// exponent is folded into the scale ("1.5e3" -> "1500", "25E-3" -> "0.025").
// ok is false when the exponent is beyond ±maxScale.
func appendPlainNumber(dst, digits []byte, lit []byte) (out, digitsBuf []byte, ok bool) {
	neg := false
	if len(lit) > 0 && lit[0] == '-' {
		neg = true
		lit = lit[1:]
	}
	digits = digits[:0]
	scale := 0
	i := 0
	for ; i < len(lit) && lit[i] >= '0' && lit[i] <= '9'; i++ {
		digits = append(digits, lit[i])
	}
	if i < len(lit) && lit[i] == '.' {
		for i++; i < len(lit) && lit[i] >= '0' && lit[i] <= '9'; i++ {
			digits = append(digits, lit[i])
			scale++
		}
	}
	if i < len(lit) && (lit[i] == 'e' || lit[i] == 'E') {
		i++
		eneg := false
		if i < len(lit) && (lit[i] == '+' || lit[i] == '-') {
			eneg = lit[i] == '-'
			i++
		}
		exp := 0
		for ; i < len(lit); i++ {
			exp = exp*10 + int(lit[i]-'0')
			if exp > maxScale {
				return dst, digits, false
			}
		}
		if eneg {
			scale += exp
		} else {
			scale -= exp
		}
		if scale > maxScale || scale < -maxScale {
			return dst, digits, false
		}
	}
	return appendScaled(dst, neg, digits, scale), digits, true
}

// smallDecimalBytes bounds the decimals appendMagnitude converts on the
// stack (155 digits; larger ones go through math/big, which allocates).
const smallDecimalBytes = 64

// appendMagnitude appends the decimal digits of the magnitude of the
// big-endian two's complement integer b (len(b) <= smallDecimalBytes)
// without allocating: repeated division of its 32-bit words by 10^9.
func appendMagnitude(digits, b []byte, neg bool) []byte {
	var mag [smallDecimalBytes]byte
	m := mag[smallDecimalBytes-len(b):]
	copy(m, b)
	if neg {
		carry := 1
		for i := len(m) - 1; i >= 0; i-- {
			v := int(^m[i]) + carry
			m[i], carry = byte(v), v>>8
		}
	}
	var w [smallDecimalBytes / 4]uint32
	nw := (len(m) + 3) / 4
	for i := 0; i < len(m); i++ {
		w[nw-1-i/4] |= uint32(m[len(m)-1-i]) << (8 * (i % 4))
	}
	words := w[:nw]
	var chunks [smallDecimalBytes*8/29 + 1]uint32 // 10^9 > 2^29
	nc := 0
	for {
		for len(words) > 0 && words[0] == 0 {
			words = words[1:]
		}
		if len(words) == 0 {
			break
		}
		var rem uint64
		for i := range words {
			cur := rem<<32 | uint64(words[i])
			words[i], rem = uint32(cur/1e9), cur%1e9
		}
		chunks[nc] = uint32(rem)
		nc++
	}
	if nc == 0 {
		return append(digits, '0')
	}
	digits = strconv.AppendUint(digits, uint64(chunks[nc-1]), 10)
	for i := nc - 2; i >= 0; i-- {
		var nine [9]byte
		c := chunks[i]
		for j := 8; j >= 0; j-- {
			nine[j] = byte('0' + c%10)
			c /= 10
		}
		digits = append(digits, nine[:]...)
	}
	return digits
}

package row

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Key tuples (join keys, child primary keys) use an order-preserving,
// prefix-free encoding: comparing two encoded tuples bytewise orders them like
// their values (integers numerically, strings bytewise), and no encoded tuple is
// a prefix of another, so "all children of join key K" is a plain prefix scan.
//
//	null                  0x01
//	int/date/timestamp/   tag, 8 bytes big-endian with the sign bit flipped
//	time
//	bool                  0x07, 0x00|0x01
//	float                 0x08, 8 bytes (IEEE bits, flipped to sort)
//	string/bytes/decimal/ tag, bytes with 0x00 escaped as 0x00 0xFF, then 0x00 0x01
//	array (its row encoding)
//	unavailable           0x0b
const (
	tagNull        = 0x01
	tagInt         = 0x02
	tagDate        = 0x03
	tagTimestamp   = 0x04
	tagTime        = 0x05
	tagString      = 0x06
	tagBool        = 0x07
	tagFloat       = 0x08
	tagBytes       = 0x09
	tagDecimal     = 0x0a
	tagUnavailable = 0x0b
	tagArray       = 0x0c
)

// ErrCorrupt is returned (wrapped) when stored bytes cannot be decoded.
var ErrCorrupt = errors.New("cdcjoin: corrupt encoding")

// AppendKey appends the order-preserving encoding of the tuple vals to dst.
func AppendKey(dst []byte, vals []Value) []byte {
	for _, v := range vals {
		dst = appendKeyValue(dst, v)
	}
	return dst
}

func appendKeyValue(dst []byte, v Value) []byte {
	switch v.Kind {
	case KindNull:
		return append(dst, tagNull)
	case KindInt:
		return binary.BigEndian.AppendUint64(append(dst, tagInt), uint64(v.Int)^(1<<63))
	case KindDate:
		return binary.BigEndian.AppendUint64(append(dst, tagDate), uint64(v.Int)^(1<<63))
	case KindTimestamp:
		return binary.BigEndian.AppendUint64(append(dst, tagTimestamp), uint64(v.Int)^(1<<63))
	case KindTime:
		return binary.BigEndian.AppendUint64(append(dst, tagTime), uint64(v.Int)^(1<<63))
	case KindBool:
		return append(dst, tagBool, byte(v.Int&1))
	case KindFloat:
		b := math.Float64bits(v.Float)
		if b&(1<<63) != 0 {
			b = ^b
		} else {
			b |= 1 << 63
		}
		return binary.BigEndian.AppendUint64(append(dst, tagFloat), b)
	case KindBytes:
		return appendEscaped(append(dst, tagBytes), v.Str)
	case KindDecimal:
		return appendEscaped(append(dst, tagDecimal), v.Str)
	case KindArray:
		return appendEscaped(append(dst, tagArray), v.Str)
	case KindUnavailable:
		return append(dst, tagUnavailable)
	default:
		return appendEscaped(append(dst, tagString), v.Str)
	}
}

func appendEscaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			dst = append(dst, 0, 0xff)
		} else {
			dst = append(dst, s[i])
		}
	}
	return append(dst, 0, 1)
}

// DecodeKey decodes one encoded tuple of n values from b, appending to dst.
// It returns the values and the number of bytes consumed.
func DecodeKey(dst []Value, b []byte, n int) ([]Value, int, error) {
	pos := 0
	for i := 0; i < n; i++ {
		if pos >= len(b) {
			return dst, pos, fmt.Errorf("%w: key tuple truncated", ErrCorrupt)
		}
		tag := b[pos]
		pos++
		switch tag {
		case tagNull:
			dst = append(dst, Value{})
		case tagUnavailable:
			dst = append(dst, Value{Kind: KindUnavailable})
		case tagInt, tagDate, tagTimestamp, tagTime:
			if pos+8 > len(b) {
				return dst, pos, fmt.Errorf("%w: key int truncated", ErrCorrupt)
			}
			x := int64(binary.BigEndian.Uint64(b[pos:]) ^ (1 << 63))
			pos += 8
			k := KindInt
			switch tag {
			case tagDate:
				k = KindDate
			case tagTimestamp:
				k = KindTimestamp
			case tagTime:
				k = KindTime
			}
			dst = append(dst, Value{Kind: k, Int: x})
		case tagBool:
			if pos >= len(b) {
				return dst, pos, fmt.Errorf("%w: key bool truncated", ErrCorrupt)
			}
			dst = append(dst, Value{Kind: KindBool, Int: int64(b[pos] & 1)})
			pos++
		case tagFloat:
			if pos+8 > len(b) {
				return dst, pos, fmt.Errorf("%w: key float truncated", ErrCorrupt)
			}
			u := binary.BigEndian.Uint64(b[pos:])
			if u&(1<<63) != 0 {
				u &^= 1 << 63
			} else {
				u = ^u
			}
			pos += 8
			dst = append(dst, Value{Kind: KindFloat, Float: math.Float64frombits(u)})
		case tagString, tagBytes, tagDecimal, tagArray:
			s, m, err := unescape(b[pos:])
			if err != nil {
				return dst, pos, err
			}
			pos += m
			k := KindString
			switch tag {
			case tagBytes:
				k = KindBytes
			case tagDecimal:
				k = KindDecimal
			case tagArray:
				k = KindArray
			}
			dst = append(dst, Value{Kind: k, Str: s})
		default:
			return dst, pos, fmt.Errorf("%w: unknown key tag 0x%02x", ErrCorrupt, tag)
		}
	}
	return dst, pos, nil
}

func unescape(b []byte) (string, int, error) {
	// Fast path: no escaped zero bytes.
	for i := 0; i+1 < len(b); i++ {
		if b[i] != 0 {
			continue
		}
		if b[i+1] == 1 {
			return string(b[:i]), i + 2, nil
		}
		// Escaped zero: slow path.
		out := make([]byte, 0, len(b))
		j := 0
		for j+1 < len(b) {
			if b[j] == 0 {
				switch b[j+1] {
				case 1:
					return string(out), j + 2, nil
				case 0xff:
					out = append(out, 0)
					j += 2
					continue
				default:
					return "", j, fmt.Errorf("%w: bad escape in key", ErrCorrupt)
				}
			}
			out = append(out, b[j])
			j++
		}
		break
	}
	return "", len(b), fmt.Errorf("%w: unterminated key string", ErrCorrupt)
}

// Row values (stored rows) use a compact, non-order-preserving encoding: one
// kind byte per value, then zig-zag varints for integer-like kinds, 8 bytes
// for floats, and length-prefixed bytes for strings.

// AppendRow appends the compact encoding of vals to dst.
func AppendRow(dst []byte, vals []Value) []byte {
	for _, v := range vals {
		dst = AppendRowValue(dst, v)
	}
	return dst
}

// AppendRowValue appends the compact encoding of the one value v: a row is
// the concatenation of its values' encodings (an array's elements are
// built this way, one at a time).
func AppendRowValue(dst []byte, v Value) []byte {
	dst = append(dst, byte(v.Kind))
	switch v.Kind {
	case KindNull, KindUnavailable:
	case KindInt, KindBool, KindDate, KindTimestamp, KindTime:
		dst = binary.AppendVarint(dst, v.Int)
	case KindFloat:
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v.Float))
	default:
		dst = binary.AppendUvarint(dst, uint64(len(v.Str)))
		dst = append(dst, v.Str...)
	}
	return dst
}

// DecodeRow decodes a row encoded by AppendRow, appending to dst.
func DecodeRow(dst []Value, b []byte) ([]Value, error) {
	for len(b) > 0 {
		k := Kind(b[0])
		b = b[1:]
		v := Value{Kind: k}
		switch k {
		case KindNull, KindUnavailable:
		case KindInt, KindBool, KindDate, KindTimestamp, KindTime:
			x, n := binary.Varint(b)
			if n <= 0 {
				return dst, fmt.Errorf("%w: bad varint in row", ErrCorrupt)
			}
			v.Int, b = x, b[n:]
		case KindFloat:
			if len(b) < 8 {
				return dst, fmt.Errorf("%w: float truncated", ErrCorrupt)
			}
			v.Float, b = math.Float64frombits(binary.LittleEndian.Uint64(b)), b[8:]
		case KindString, KindBytes, KindDecimal, KindArray:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return dst, fmt.Errorf("%w: string truncated", ErrCorrupt)
			}
			v.Str, b = string(b[n:n+int(l)]), b[n+int(l):]
		default:
			return dst, fmt.Errorf("%w: unknown value kind %d", ErrCorrupt, k)
		}
		dst = append(dst, v)
	}
	return dst, nil
}

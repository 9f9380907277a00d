package expr

import (
	"fmt"
	"math/big"
	"strings"
)

// dec is an exact decimal: unscaled / 10^scale.
type dec struct {
	unscaled big.Int
	scale    int
}

// parseDec parses a decimal in plain notation ("-12.3400", "5", ".5",
// "1e3" is refused: canonical decimal text has no exponent, and
// PostgreSQL's numeric literals with one are floats' territory here).
func parseDec(s string) (*dec, error) {
	t := strings.TrimSpace(s)
	neg := false
	if t != "" && (t[0] == '-' || t[0] == '+') {
		neg = t[0] == '-'
		t = t[1:]
	}
	intPart, frac, _ := strings.Cut(t, ".")
	if intPart == "" && frac == "" {
		return nil, fmt.Errorf("invalid input syntax for type numeric: %q", s)
	}
	for _, p := range []string{intPart, frac} {
		for i := 0; i < len(p); i++ {
			if p[i] < '0' || p[i] > '9' {
				return nil, fmt.Errorf("invalid input syntax for type numeric: %q", s)
			}
		}
	}
	d := &dec{scale: len(frac)}
	digits := intPart + frac
	if digits == "" {
		digits = "0"
	}
	if _, ok := d.unscaled.SetString(digits, 10); !ok {
		return nil, fmt.Errorf("invalid input syntax for type numeric: %q", s)
	}
	if neg {
		d.unscaled.Neg(&d.unscaled)
	}
	return d, nil
}

func decOfInt(x int64) *dec {
	d := &dec{}
	d.unscaled.SetInt64(x)
	return d
}

var ten = big.NewInt(10)

// rescaled returns d's unscaled value at scale s ≥ d.scale.
func (d *dec) rescaled(s int) *big.Int {
	if s == d.scale {
		return &d.unscaled
	}
	m := new(big.Int).Exp(ten, big.NewInt(int64(s-d.scale)), nil)
	return m.Mul(m, &d.unscaled)
}

func (d *dec) cmp(e *dec) int {
	s := max(d.scale, e.scale)
	return d.rescaled(s).Cmp(e.rescaled(s))
}

func (d *dec) add(e *dec, sub bool) *dec {
	s := max(d.scale, e.scale)
	r := &dec{scale: s}
	if sub {
		r.unscaled.Sub(d.rescaled(s), e.rescaled(s))
	} else {
		r.unscaled.Add(d.rescaled(s), e.rescaled(s))
	}
	return r
}

func (d *dec) mul(e *dec) *dec {
	r := &dec{scale: d.scale + e.scale}
	r.unscaled.Mul(&d.unscaled, &e.unscaled)
	return r
}

func (d *dec) float() float64 {
	f, _ := new(big.Rat).SetFrac(&d.unscaled, new(big.Int).Exp(ten, big.NewInt(int64(d.scale)), nil)).Float64()
	return f
}

// String renders d canonically: "-12.3400" (scale kept, no exponent), as
// PostgreSQL prints a numeric.
func (d *dec) String() string {
	neg := d.unscaled.Sign() < 0
	digits := new(big.Int).Abs(&d.unscaled).String()
	for len(digits) <= d.scale {
		digits = "0" + digits
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	b.WriteString(digits[:len(digits)-d.scale])
	if d.scale > 0 {
		b.WriteByte('.')
		b.WriteString(digits[len(digits)-d.scale:])
	}
	return b.String()
}

package expr

import (
	"fmt"
	"math"
	"strings"

	"github.com/cdcjoin/cdcjoin/row"
)

func numeric(k row.Kind) bool {
	return k == row.KindInt || k == row.KindDecimal || k == row.KindFloat
}

func text(k row.Kind) bool { return k == row.KindString }

// compare orders two non-NULL values as PostgreSQL does (see the package
// doc); an error for kinds PostgreSQL cannot compare.
func compare(a, b row.Value) (int, error) {
	switch {
	case a.Kind == b.Kind:
		switch a.Kind {
		case row.KindInt, row.KindBool, row.KindDate, row.KindTimestamp, row.KindTime:
			return cmpInt(a.Int, b.Int), nil
		case row.KindString, row.KindBytes:
			return strings.Compare(a.Str, b.Str), nil
		case row.KindFloat:
			return cmpFloat(a.Float, b.Float), nil
		case row.KindDecimal:
			return cmpDec(a.Str, b.Str)
		}
	case numeric(a.Kind) && numeric(b.Kind):
		if a.Kind == row.KindFloat || b.Kind == row.KindFloat {
			fa, err := toFloat(a)
			if err != nil {
				return 0, err
			}
			fb, err := toFloat(b)
			if err != nil {
				return 0, err
			}
			return cmpFloat(fa, fb), nil
		}
		da, err := toDec(a)
		if err != nil {
			return 0, err
		}
		db, err := toDec(b)
		if err != nil {
			return 0, err
		}
		return da.cmp(db), nil
	case a.Kind == row.KindDate && b.Kind == row.KindTimestamp:
		return cmpInt(a.Int*86400_000_000, b.Int), nil
	case a.Kind == row.KindTimestamp && b.Kind == row.KindDate:
		return cmpInt(a.Int, b.Int*86400_000_000), nil
	}
	return 0, fmt.Errorf("cannot compare %s with %s", KindName(a.Kind), KindName(b.Kind))
}

// KindName is how messages name a kind (PostgreSQL's type families).
func KindName(k row.Kind) string {
	switch k {
	case row.KindInt:
		return "integer"
	case row.KindDecimal:
		return "numeric"
	case row.KindFloat:
		return "double precision"
	case row.KindString:
		return "text"
	case row.KindBytes:
		return "bytea"
	case row.KindBool:
		return "boolean"
	}
	return k.String()
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// cmpFloat is PostgreSQL's float8 order: NaN equals NaN and sorts above
// every other value (-0 equals 0).
func cmpFloat(a, b float64) int {
	an, bn := math.IsNaN(a), math.IsNaN(b)
	switch {
	case an && bn:
		return 0
	case an:
		return 1
	case bn:
		return -1
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpDec(a, b string) (int, error) {
	da, err := parseDec(a)
	if err != nil {
		return 0, err
	}
	db, err := parseDec(b)
	if err != nil {
		return 0, err
	}
	return da.cmp(db), nil
}

func toDec(v row.Value) (*dec, error) {
	if v.Kind == row.KindInt {
		return decOfInt(v.Int), nil
	}
	return parseDec(v.Str)
}

func toFloat(v row.Value) (float64, error) {
	switch v.Kind {
	case row.KindFloat:
		return v.Float, nil
	case row.KindInt:
		return float64(v.Int), nil
	}
	d, err := parseDec(v.Str)
	if err != nil {
		return 0, err
	}
	return d.float(), nil
}

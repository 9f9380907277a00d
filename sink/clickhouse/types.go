package clickhouse

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cdcjoin/cdcjoin/row"
)

// base is a ClickHouse column type the sink can write, without Nullable.
type base uint8

const (
	tInt8 base = iota + 1
	tInt16
	tInt32
	tInt64
	tUInt8
	tUInt16
	tUInt32
	tUInt64
	tFloat32
	tFloat64
	tString
	tDecimal
	tUUID
	tDate
	tDateTime
	tDateTime64
)

var baseNames = map[string]base{
	"Int8": tInt8, "Int16": tInt16, "Int32": tInt32, "Int64": tInt64,
	"UInt8": tUInt8, "UInt16": tUInt16, "UInt32": tUInt32, "UInt64": tUInt64,
	"Bool": tUInt8, "Boolean": tUInt8,
	"Float32": tFloat32, "Float64": tFloat64,
	"String": tString, "UUID": tUUID, "Date": tDate,
	"DateTime": tDateTime, "DateTime64": tDateTime64,
	"Decimal": tDecimal, "Decimal32": tDecimal, "Decimal64": tDecimal, "Decimal128": tDecimal,
}

// colType is a parsed ClickHouse column type.
type colType struct {
	name     string // as ClickHouse spells it, e.g. "Nullable(Decimal(38, 2))"
	base     base
	nullable bool
}

// parseType parses the column types the sink can write: the integer and
// float types, String, UUID, Decimal*(…), Date, DateTime[(tz)],
// DateTime64(p[, tz]), Bool, each optionally inside Nullable(…).
func parseType(s string) (colType, error) {
	t := colType{name: s}
	s = strings.TrimSpace(s)
	if inner, ok := unwrap(s, "Nullable"); ok {
		t.nullable = true
		s = inner
	}
	name := s
	if i := strings.IndexByte(s, '('); i >= 0 {
		name = strings.TrimSpace(s[:i])
		if !strings.HasSuffix(s, ")") {
			return t, fmt.Errorf("cdcjoin: clickhouse: type %q: unbalanced parentheses", t.name)
		}
		switch name {
		case "Decimal", "Decimal32", "Decimal64", "Decimal128", "DateTime", "DateTime64":
		default:
			return t, fmt.Errorf("cdcjoin: clickhouse: type %q is not supported (use an integer, float, String, UUID, Decimal, Date, DateTime or DateTime64 type, optionally Nullable)", t.name)
		}
	}
	b, ok := baseNames[name]
	if !ok {
		return t, fmt.Errorf("cdcjoin: clickhouse: type %q is not supported (use an integer, float, String, UUID, Decimal, Date, DateTime or DateTime64 type, optionally Nullable)", t.name)
	}
	t.base = b
	return t, nil
}

func unwrap(s, fn string) (string, bool) {
	if strings.HasPrefix(s, fn+"(") && strings.HasSuffix(s, ")") {
		return strings.TrimSpace(s[len(fn)+1 : len(s)-1]), true
	}
	return s, false
}

// column buffers one output column of a batch, converting debezium values
// to the Go type the driver appends for the column's ClickHouse type.
type column interface {
	// put writes v at row i (i == len: append). On error nothing changed.
	put(i int, v row.Value) error
	// data returns the slice for driver.BatchColumn.Append; valid until reset.
	data() any
	reset()
}

type typed[T any] struct {
	vals     []T
	nulls    []bool
	nullable bool
	conv     func(row.Value) (T, error)
	ptrs     []*T
}

var errNull = fmt.Errorf("NULL in a non-Nullable column")

func (c *typed[T]) put(i int, v row.Value) error {
	var x T
	null := v.Kind == row.KindNull
	if null {
		if !c.nullable {
			return errNull
		}
	} else {
		var err error
		if x, err = c.conv(v); err != nil {
			return err
		}
	}
	if i == len(c.vals) {
		c.vals = append(c.vals, x)
		if c.nullable {
			c.nulls = append(c.nulls, null)
		}
		return nil
	}
	c.vals[i] = x
	if c.nullable {
		c.nulls[i] = null
	}
	return nil
}

func (c *typed[T]) data() any {
	if !c.nullable {
		return c.vals
	}
	c.ptrs = c.ptrs[:0]
	for i := range c.vals {
		if c.nulls[i] {
			c.ptrs = append(c.ptrs, nil)
		} else {
			c.ptrs = append(c.ptrs, &c.vals[i])
		}
	}
	return c.ptrs
}

func (c *typed[T]) reset() {
	var zero T
	for i := range c.vals { // drop references to strings and times
		c.vals[i] = zero
	}
	c.vals, c.nulls = c.vals[:0], c.nulls[:0]
	clear(c.ptrs)
	c.ptrs = c.ptrs[:0]
}

func newTyped[T any](nullable bool, conv func(row.Value) (T, error)) column {
	return &typed[T]{nullable: nullable, conv: conv}
}

// newColumn returns the buffer for a column of type t.
func newColumn(t colType) column {
	n := t.nullable
	switch t.base {
	case tInt8:
		return newTyped(n, intConv[int8](math.MinInt8, math.MaxInt8))
	case tInt16:
		return newTyped(n, intConv[int16](math.MinInt16, math.MaxInt16))
	case tInt32:
		return newTyped(n, intConv[int32](math.MinInt32, math.MaxInt32))
	case tInt64:
		return newTyped(n, intConv[int64](math.MinInt64, math.MaxInt64))
	case tUInt8:
		return newTyped(n, intConv[uint8](0, math.MaxUint8))
	case tUInt16:
		return newTyped(n, intConv[uint16](0, math.MaxUint16))
	case tUInt32:
		return newTyped(n, intConv[uint32](0, math.MaxUint32))
	case tUInt64:
		return newTyped(n, intConv[uint64](0, math.MaxInt64))
	case tFloat32:
		return newTyped(n, floatConv[float32])
	case tFloat64:
		return newTyped(n, floatConv[float64])
	case tString:
		return newTyped(n, stringConv)
	case tDecimal:
		return newTyped(n, decimalConv)
	case tUUID:
		return newTyped(n, uuidConv)
	default: // tDate, tDateTime, tDateTime64
		return newTyped(n, timeConv)
	}
}

func kindErr(v row.Value) error {
	return fmt.Errorf("cannot store a %s value", v.Kind)
}

// intConv converts integers (and bools, dates as days, timestamps and times
// as microseconds) with a range check.
func intConv[T int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64](lo, hi int64) func(row.Value) (T, error) {
	return func(v row.Value) (T, error) {
		switch v.Kind {
		case row.KindInt, row.KindBool, row.KindDate, row.KindTimestamp, row.KindTime:
			if v.Int < lo || v.Int > hi {
				return 0, fmt.Errorf("%d is out of range", v.Int)
			}
			return T(v.Int), nil
		case row.KindDecimal, row.KindString:
			n, err := strconv.ParseInt(v.Str, 10, 64)
			if err != nil || n < lo || n > hi {
				return 0, fmt.Errorf("%q is not an integer in range", v.Str)
			}
			return T(n), nil
		}
		return 0, kindErr(v)
	}
}

func floatConv[T float32 | float64](v row.Value) (T, error) {
	switch v.Kind {
	case row.KindFloat:
		return T(v.Float), nil
	case row.KindInt:
		return T(v.Int), nil
	case row.KindDecimal:
		f, err := strconv.ParseFloat(v.Str, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a number", v.Str)
		}
		return T(f), nil
	}
	return 0, kindErr(v)
}

func stringConv(v row.Value) (string, error) {
	if v.Kind == row.KindUnavailable {
		return "", kindErr(v)
	}
	return v.Text(), nil
}

func decimalConv(v row.Value) (string, error) {
	switch v.Kind {
	case row.KindDecimal, row.KindString, row.KindInt, row.KindFloat:
		return v.Text(), nil
	}
	return "", kindErr(v)
}

func uuidConv(v row.Value) (string, error) {
	if v.Kind != row.KindString || len(v.Str) != 36 {
		return "", fmt.Errorf("%q is not a UUID", v.Text())
	}
	return v.Str, nil
}

func timeConv(v row.Value) (time.Time, error) {
	switch v.Kind {
	case row.KindDate:
		return time.Unix(v.Int*86400, 0).UTC(), nil
	case row.KindTimestamp:
		return time.UnixMicro(v.Int).UTC(), nil
	}
	return time.Time{}, kindErr(v)
}

// valueSize estimates v's size on the wire, for the batch byte limit.
func valueSize(v *row.Value) int {
	switch v.Kind {
	case row.KindString, row.KindBytes, row.KindDecimal:
		return len(v.Str) + 1
	}
	return 8
}

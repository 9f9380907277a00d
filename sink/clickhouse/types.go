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
	tDate32
	tDateTime
	tDateTime64
	tBool
	tArray
)

var baseNames = map[string]base{
	"Int8": tInt8, "Int16": tInt16, "Int32": tInt32, "Int64": tInt64,
	"UInt8": tUInt8, "UInt16": tUInt16, "UInt32": tUInt32, "UInt64": tUInt64,
	"Bool": tBool, "Boolean": tBool,
	"Float32": tFloat32, "Float64": tFloat64,
	"String": tString, "UUID": tUUID, "Date": tDate, "Date32": tDate32,
	"DateTime": tDateTime, "DateTime64": tDateTime64,
	"Decimal": tDecimal, "Decimal32": tDecimal, "Decimal64": tDecimal, "Decimal128": tDecimal,
	"Array": tArray,
}

// colType is a parsed ClickHouse column type.
type colType struct {
	name     string // as ClickHouse spells it, e.g. "Nullable(Decimal(38, 2))"
	base     base
	nullable bool
	prec     int      // Decimal precision; DateTime64 precision (digits of a second)
	scale    int      // Decimal scale
	elem     *colType // Array: the element type
}

const supported = "use an integer, float, Bool, String, UUID, Decimal, Date, Date32, DateTime or DateTime64 type, optionally Nullable, or an Array of one"

// parseType parses the column types the sink can write: the integer and
// float types, Bool, String, UUID, Decimal*(…), Date, Date32,
// DateTime[(tz)], DateTime64(p[, tz]), each optionally inside Nullable(…),
// and Array(T) of one of them.
func parseType(s string) (colType, error) {
	t := colType{name: s}
	s = strings.TrimSpace(s)
	if inner, ok := unwrap(s, "Nullable"); ok {
		t.nullable = true
		s = inner
	}
	name, args := s, ""
	if i := strings.IndexByte(s, '('); i >= 0 {
		name = strings.TrimSpace(s[:i])
		if !strings.HasSuffix(s, ")") {
			return t, fmt.Errorf("cdcjoin: clickhouse: type %q: unbalanced parentheses", t.name)
		}
		args = s[i+1 : len(s)-1]
		switch name {
		case "Decimal", "Decimal32", "Decimal64", "Decimal128", "DateTime", "DateTime64", "Array":
		default:
			return t, fmt.Errorf("cdcjoin: clickhouse: type %q is not supported (%s)", t.name, supported)
		}
	}
	b, ok := baseNames[name]
	if !ok || (b == tArray && args == "") {
		return t, fmt.Errorf("cdcjoin: clickhouse: type %q is not supported (%s)", t.name, supported)
	}
	t.base = b
	var err error
	switch b {
	case tArray:
		var e colType
		if e, err = parseType(args); err != nil {
			return t, err
		}
		if e.base == tArray || t.nullable {
			return t, fmt.Errorf("cdcjoin: clickhouse: type %q is not supported (nested or Nullable arrays; %s)", t.name, supported)
		}
		t.elem = &e
	case tDecimal:
		t.prec, t.scale, err = decimalArgs(name, args)
	case tDateTime64:
		p, _, _ := strings.Cut(args, ",")
		if t.prec, err = strconv.Atoi(strings.TrimSpace(p)); err != nil || t.prec < 0 || t.prec > 9 {
			err = fmt.Errorf("precision %q is not 0..9", p)
		}
	}
	if err != nil {
		return t, fmt.Errorf("cdcjoin: clickhouse: type %q: %w", t.name, err)
	}
	return t, nil
}

// decimalArgs returns the precision and scale of Decimal(P, S) or
// Decimal32/64/128(S).
func decimalArgs(name, args string) (prec, scale int, err error) {
	fixed := map[string]int{"Decimal32": 9, "Decimal64": 18, "Decimal128": 38}
	parts := strings.Split(args, ",")
	nums := make([]int, len(parts))
	for i, p := range parts {
		if nums[i], err = strconv.Atoi(strings.TrimSpace(p)); err != nil {
			return 0, 0, fmt.Errorf("%q is not a number", p)
		}
	}
	switch {
	case name == "Decimal" && len(nums) == 2:
		prec, scale = nums[0], nums[1]
	case fixed[name] > 0 && len(nums) == 1:
		prec, scale = fixed[name], nums[0]
	default:
		return 0, 0, fmt.Errorf("wrong number of arguments")
	}
	if prec < 1 || prec > 38 || scale < 0 || scale > prec {
		return 0, 0, fmt.Errorf("need 1 <= precision <= 38 and 0 <= scale <= precision")
	}
	return prec, scale, nil
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
	// truncate drops the rows from n on.
	truncate(n int)
	// value returns row i as a row.Value again (to move a batch to a
	// widened column type); ok=false for types that cannot be read back.
	value(i int) (row.Value, bool)
}

type typed[T any] struct {
	vals     []T
	nulls    []bool
	nullable bool
	conv     func(row.Value) (T, error)
	back     func(T) row.Value // nil: not readable back
	ptrs     []*T
}

func (c *typed[T]) truncate(n int) {
	if n < len(c.vals) {
		var zero T
		for i := n; i < len(c.vals); i++ {
			c.vals[i] = zero
		}
		c.vals = c.vals[:n]
		if c.nullable {
			c.nulls = c.nulls[:n]
		}
	}
}

func (c *typed[T]) value(i int) (row.Value, bool) {
	if c.nullable && c.nulls[i] {
		return row.Value{}, true
	}
	if c.back == nil {
		return row.Value{}, false
	}
	return c.back(c.vals[i]), true
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

// arrayOf buffers an Array(T) or Array(Nullable(T)) column. ClickHouse has
// no Nullable arrays: a NULL array is stored as the empty array.
type arrayOf[T any] struct {
	vals     [][]T  // Array(T)
	ptrs     [][]*T // Array(Nullable(T))
	nullable bool   // the elements are
	conv     func(row.Value) (T, error)
	elems    []row.Value
}

func (c *arrayOf[T]) put(i int, v row.Value) error {
	var err error
	switch v.Kind {
	case row.KindNull:
		c.elems = c.elems[:0]
	case row.KindArray:
		if c.elems, err = v.Elems(c.elems[:0]); err != nil {
			return err
		}
	default:
		return kindErr(v)
	}
	var vals []T
	var ptrs []*T
	if len(c.elems) > 0 { // an empty array stays nil: no allocation
		if c.nullable {
			ptrs = make([]*T, len(c.elems))
		} else {
			vals = make([]T, len(c.elems))
		}
	}
	for j, e := range c.elems {
		if e.Kind == row.KindNull {
			if !c.nullable {
				return fmt.Errorf("element %d: %w", j+1, errNull)
			}
			continue
		}
		x, err := c.conv(e)
		if err != nil {
			return fmt.Errorf("element %d: %w", j+1, err)
		}
		if c.nullable {
			ptrs[j] = &x
		} else {
			vals[j] = x
		}
	}
	if c.nullable {
		c.ptrs = setAt(c.ptrs, i, ptrs)
	} else {
		c.vals = setAt(c.vals, i, vals)
	}
	return nil
}

// setAt sets s[i] (i == len(s): appends).
func setAt[E any](s []E, i int, v E) []E {
	if i == len(s) {
		return append(s, v)
	}
	s[i] = v
	return s
}

func (c *arrayOf[T]) truncate(n int) {
	if c.nullable && n < len(c.ptrs) {
		clear(c.ptrs[n:])
		c.ptrs = c.ptrs[:n]
	}
	if !c.nullable && n < len(c.vals) {
		clear(c.vals[n:])
		c.vals = c.vals[:n]
	}
}

func (c *arrayOf[T]) value(int) (row.Value, bool) { return row.Value{}, false }

func (c *arrayOf[T]) data() any {
	if c.nullable {
		return c.ptrs
	}
	return c.vals
}

func (c *arrayOf[T]) reset() {
	clear(c.vals)
	clear(c.ptrs)
	c.vals, c.ptrs = c.vals[:0], c.ptrs[:0]
}

// newColumn returns the buffer for a column of type t.
func newColumn(t colType) column {
	if t.base == tArray {
		return convertFor(*t.elem, true)
	}
	return convertFor(t, false)
}

// convertFor returns the buffer of a column of type t (array: of an Array
// column whose elements are of type t).
func convertFor(t colType, array bool) column {
	switch t.base {
	case tInt8:
		return readable(buffer(t, array, intConv[int8](math.MinInt8, math.MaxInt8)), func(x int8) row.Value { return row.Int(int64(x)) })
	case tInt16:
		return readable(buffer(t, array, intConv[int16](math.MinInt16, math.MaxInt16)), func(x int16) row.Value { return row.Int(int64(x)) })
	case tInt32:
		return readable(buffer(t, array, intConv[int32](math.MinInt32, math.MaxInt32)), func(x int32) row.Value { return row.Int(int64(x)) })
	case tInt64:
		return readable(buffer(t, array, intConv[int64](math.MinInt64, math.MaxInt64)), row.Int)
	case tUInt8:
		return buffer(t, array, intConv[uint8](0, math.MaxUint8))
	case tUInt16:
		return buffer(t, array, intConv[uint16](0, math.MaxUint16))
	case tUInt32:
		return buffer(t, array, intConv[uint32](0, math.MaxUint32))
	case tUInt64:
		return buffer(t, array, intConv[uint64](0, math.MaxInt64))
	case tFloat32:
		return readable(buffer(t, array, float32Conv), func(x float32) row.Value { return row.Float(float64(x)) })
	case tFloat64:
		return readable(buffer(t, array, float64Conv), row.Float)
	case tBool:
		return buffer(t, array, boolConv)
	case tString:
		return readable(buffer(t, array, stringConv), row.String)
	case tDecimal:
		return readable(buffer(t, array, decimalConv(t.prec, t.scale)), row.Decimal)
	case tUUID:
		return buffer(t, array, uuidConv)
	case tDate:
		return buffer(t, array, dateConv(0, math.MaxUint16, "Date", "Date32 (ClickHouse 21.9+), Int32 or String"))
	case tDate32:
		return buffer(t, array, dateConv(date32Min, date32Max, "Date32", "Int32 or String"))
	case tDateTime:
		return buffer(t, array, dateTimeConv)
	default: // tDateTime64
		return buffer(t, array, dateTime64Conv(t.prec))
	}
}

// readable lets a scalar column read its values back (back), for moving a
// batch to a widened type.
func readable[T any](c column, back func(T) row.Value) column {
	if t, ok := c.(*typed[T]); ok {
		t.back = back
	}
	return c
}

func buffer[T any](t colType, array bool, conv func(row.Value) (T, error)) column {
	if array {
		return &arrayOf[T]{nullable: t.nullable, conv: conv}
	}
	return &typed[T]{nullable: t.nullable, conv: conv}
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

// float64Conv converts floats (NaN and ±Inf included), integers and
// decimal text.
func float64Conv(v row.Value) (float64, error) {
	switch v.Kind {
	case row.KindFloat:
		return v.Float, nil
	case row.KindInt:
		return float64(v.Int), nil
	case row.KindDecimal:
		f, err := strconv.ParseFloat(v.Str, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a number", v.Str)
		}
		return f, nil
	}
	return 0, kindErr(v)
}

// float32Conv is float64Conv for Float32 columns: a finite value beyond
// Float32's range is an error, not an infinity.
func float32Conv(v row.Value) (float32, error) {
	f, err := float64Conv(v)
	g := float32(f)
	if err == nil && !math.IsInf(f, 0) && math.IsInf(float64(g), 0) {
		err = fmt.Errorf("%g is out of Float32's range", f)
	}
	return g, err
}

func boolConv(v row.Value) (bool, error) {
	switch {
	case v.Kind == row.KindBool, v.Kind == row.KindInt && (v.Int == 0 || v.Int == 1):
		return v.Int == 1, nil
	}
	return false, kindErr(v)
}

func stringConv(v row.Value) (string, error) {
	if v.Kind == row.KindUnavailable {
		return "", kindErr(v)
	}
	return v.Text(), nil
}

// decimalConv converts decimals, integers, finite floats and decimal text
// for a Decimal(prec, scale) column: a value with more fraction digits than
// the scale, or more integer digits than prec-scale, is an error (the
// driver would round or overflow).
func decimalConv(prec, scale int) func(row.Value) (string, error) {
	return func(v row.Value) (string, error) {
		var s string
		switch v.Kind {
		case row.KindDecimal, row.KindString:
			s = v.Str
		case row.KindInt:
			s = strconv.FormatInt(v.Int, 10)
		case row.KindFloat:
			if math.IsNaN(v.Float) || math.IsInf(v.Float, 0) {
				return "", fmt.Errorf("%v has no Decimal value", v.Float)
			}
			s = strconv.FormatFloat(v.Float, 'f', -1, 64)
		default:
			return "", kindErr(v)
		}
		intDigits, frac, ok := decimalDigits(s)
		switch {
		case !ok:
			return "", fmt.Errorf("%q is not a decimal number", s)
		case frac > scale:
			return "", fmt.Errorf("%s has %d fraction digits, Decimal(%d, %d) holds %d", s, frac, prec, scale, scale)
		case intDigits > prec-scale:
			return "", fmt.Errorf("%s has %d integer digits, Decimal(%d, %d) holds %d", s, intDigits, prec, scale, prec-scale)
		}
		return s, nil
	}
}

// decimalDigits counts the significant integer digits and the fraction
// digits (trailing zeros excepted) of a plain decimal number.
func decimalDigits(s string) (intDigits, frac int, ok bool) {
	s = strings.TrimPrefix(s, "-")
	ip, fp, _ := strings.Cut(s, ".")
	if ip == "" && fp == "" {
		return 0, 0, false
	}
	for _, c := range ip + fp {
		if c < '0' || c > '9' {
			return 0, 0, false
		}
	}
	ip = strings.TrimLeft(ip, "0")
	fp = strings.TrimRight(fp, "0")
	return len(ip), len(fp), true
}

func uuidConv(v row.Value) (string, error) {
	if v.Kind != row.KindString || len(v.Str) != 36 {
		return "", fmt.Errorf("%q is not a UUID", v.Text())
	}
	return v.Str, nil
}

// Ranges of ClickHouse's date and time types, in days and microseconds
// since the epoch. DateTime64's upper bound is the driver's (it converts
// through nanoseconds in an int64), below ClickHouse's 2299-12-31.
const (
	date32Min      = -25567 // 1900-01-01
	date32Max      = 120529 // 2299-12-31
	dateTime64Min  = -2208988800000000
	dateTime64Max  = math.MaxInt64 / 1000 // 2262-04-11 23:47:16.854775
	dateTimeMaxSec = math.MaxUint32       // 2106-02-07 06:28:15
)

// dateConv converts dates within [lo, hi] days for a Date or Date32 column;
// a date outside is an error naming what can hold it, never a wrap.
func dateConv(lo, hi int64, typ, instead string) func(row.Value) (time.Time, error) {
	return func(v row.Value) (time.Time, error) {
		if v.Kind != row.KindDate {
			return time.Time{}, kindErr(v)
		}
		if v.Int < lo || v.Int > hi {
			return time.Time{}, fmt.Errorf("date %s is outside %s's range (%s to %s): use %s for this column",
				v.Text(), typ, row.Date(lo).Text(), row.Date(hi).Text(), instead)
		}
		return time.Unix(v.Int*86400, 0).UTC(), nil
	}
}

// micros returns a date or timestamp as microseconds since the epoch.
func micros(v row.Value) (int64, error) {
	switch v.Kind {
	case row.KindDate:
		const day = 86400 * 1_000_000
		if v.Int > math.MaxInt64/day || v.Int < math.MinInt64/day {
			return 0, fmt.Errorf("date %d is out of range", v.Int)
		}
		return v.Int * day, nil
	case row.KindTimestamp:
		return v.Int, nil
	}
	return 0, kindErr(v)
}

// dateTimeConv converts for DateTime (whole seconds since the epoch, as
// UInt32): fractions of a second and instants outside its range are
// errors.
func dateTimeConv(v row.Value) (time.Time, error) {
	us, err := micros(v)
	switch {
	case err != nil:
		return time.Time{}, err
	case us%1e6 != 0:
		return time.Time{}, fmt.Errorf("%s has fractions of a second: DateTime holds whole seconds (use DateTime64(6, 'UTC'))", v.Text())
	case us < 0 || us/1e6 > dateTimeMaxSec:
		return time.Time{}, fmt.Errorf("%s is outside DateTime's range (1970 to 2106): use DateTime64(6, 'UTC') or Int64", v.Text())
	}
	return time.UnixMicro(us).UTC(), nil
}

// dateTime64Conv converts for DateTime64(prec): digits the precision cannot
// hold, and instants outside the range the driver can send, are errors.
func dateTime64Conv(prec int) func(row.Value) (time.Time, error) {
	unit := int64(1)
	for p := prec; p < 6; p++ {
		unit *= 10
	}
	return func(v row.Value) (time.Time, error) {
		us, err := micros(v)
		switch {
		case err != nil:
			return time.Time{}, err
		case us%unit != 0:
			return time.Time{}, fmt.Errorf("%s has more digits than DateTime64(%d) holds", v.Text(), prec)
		case us < dateTime64Min || us > dateTime64Max:
			return time.Time{}, fmt.Errorf("%s is outside the range DateTime64 can be written in (1900-01-01 to 2262-04-11 23:47:16.854775): use Int64 (microseconds) or String for this column", v.Text())
		}
		return time.UnixMicro(us).UTC(), nil
	}
}

// valueSize estimates v's size on the wire, for the batch byte limit.
func valueSize(v *row.Value) int {
	switch v.Kind {
	case row.KindString, row.KindBytes, row.KindDecimal, row.KindArray:
		return len(v.Str) + 1
	}
	return 8
}

package row

import (
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"
)

// Kind is the type of a decoded column value.
type Kind uint8

// Value kinds. The zero Kind is KindNull.
const (
	// KindNull is SQL NULL (or an absent optional field).
	KindNull Kind = iota
	// KindInt is a signed integer (INT8/16/32/64); the value is in Value.Int.
	KindInt
	// KindFloat is a float32/float64; the value is in Value.Float.
	KindFloat
	// KindBool is a boolean; Value.Int is 0 or 1.
	KindBool
	// KindString is text (also io.debezium.data.Uuid, io.debezium.data.Json,
	// and enums); the value is in Value.Str.
	KindString
	// KindBytes is raw bytes (Kafka Connect BYTES without a logical type); the
	// bytes are in Value.Str.
	KindBytes
	// KindDecimal is an exact decimal number in canonical text form, e.g.
	// "-12.3400" (the scale is kept; no exponent); the text is in Value.Str.
	// It never passes through a float.
	KindDecimal
	// KindDate is a calendar date; Value.Int is days since 1970-01-01.
	KindDate
	// KindTimestamp is an instant; Value.Int is microseconds since the Unix
	// epoch, UTC.
	KindTimestamp
	// KindTime is a time of day; Value.Int is microseconds since midnight.
	KindTime
	// KindUnavailable is Debezium's placeholder for an unchanged TOASTed
	// column (`__debezium_unavailable_value`): the value did not change and was
	// not sent. Consumers must keep the value they stored earlier.
	KindUnavailable
	// KindArray is an array (a PostgreSQL array column); Value.Str holds its
	// elements in the row encoding (AppendRow), so an array is compared,
	// stored and copied like a string. Build one with Array or
	// AppendRowValue, read it with Elems. Elements are never
	// KindUnavailable.
	KindArray
)

// UnavailableValue is the placeholder Debezium's PostgreSQL connector sends
// for unchanged TOASTed columns.
const UnavailableValue = "__debezium_unavailable_value"

var kindNames = [...]string{
	KindNull: "null", KindInt: "int", KindFloat: "float", KindBool: "bool",
	KindString: "string", KindBytes: "bytes", KindDecimal: "decimal",
	KindDate: "date", KindTimestamp: "timestamp", KindTime: "time",
	KindUnavailable: "unavailable", KindArray: "array",
}

// String returns the kind's lower-case name.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Value is one decoded column value. Which field holds the payload depends on
// Kind (see the Kind constants). Values are small and passed by value.
type Value struct {
	Kind  Kind
	Int   int64
	Float float64
	Str   string
}

// Constructors for the common kinds.
func Null() Value              { return Value{} }
func Int(v int64) Value        { return Value{Kind: KindInt, Int: v} }
func String(s string) Value    { return Value{Kind: KindString, Str: s} }
func Decimal(s string) Value   { return Value{Kind: KindDecimal, Str: s} }
func Float(f float64) Value    { return Value{Kind: KindFloat, Float: f} }
func Unavailable() Value       { return Value{Kind: KindUnavailable} }
func Date(days int64) Value    { return Value{Kind: KindDate, Int: days} }
func Timestamp(us int64) Value { return Value{Kind: KindTimestamp, Int: us} }
func Time(us int64) Value      { return Value{Kind: KindTime, Int: us} }
func Bytes(b []byte) Value     { return Value{Kind: KindBytes, Str: string(b)} }
func Bool(b bool) Value {
	if b {
		return Value{Kind: KindBool, Int: 1}
	}
	return Value{Kind: KindBool}
}

// IsNull reports whether v is SQL NULL.
func (v Value) IsNull() bool { return v.Kind == KindNull }

// Equal reports whether a and b are the same value of the same kind.
func (a Value) Equal(b Value) bool {
	if a.Kind != b.Kind {
		return false
	}
	switch a.Kind {
	case KindNull, KindUnavailable:
		return true
	case KindFloat:
		return a.Float == b.Float || (a.Float != a.Float && b.Float != b.Float)
	case KindString, KindBytes, KindDecimal, KindArray:
		return a.Str == b.Str
	default:
		return a.Int == b.Int
	}
}

// Array returns the array value with elements elems.
func Array(elems []Value) Value {
	return Value{Kind: KindArray, Str: string(AppendRow(nil, elems))}
}

// Elems appends the elements of the array v to dst. It fails (wrapping
// ErrCorrupt) when v is not a well-formed array.
func (v Value) Elems(dst []Value) ([]Value, error) {
	if v.Kind != KindArray {
		return dst, fmt.Errorf("%w: a %s value is not an array", ErrCorrupt, v.Kind)
	}
	if v.Str == "" {
		return dst, nil
	}
	return DecodeRow(dst, unsafe.Slice(unsafe.StringData(v.Str), len(v.Str)))
}

// Text renders v for humans and for text-typed sinks: integers in decimal,
// dates as 2006-01-02, timestamps as RFC 3339 with microseconds in UTC, times
// as 15:04:05.000000, arrays as JSON arrays of their elements (AppendJSON),
// NULL as the empty string.
func (v Value) Text() string {
	switch v.Kind {
	case KindNull:
		return ""
	case KindInt:
		return strconv.FormatInt(v.Int, 10)
	case KindFloat:
		return strconv.FormatFloat(v.Float, 'g', -1, 64)
	case KindBool:
		if v.Int != 0 {
			return "true"
		}
		return "false"
	case KindDate:
		return time.Unix(v.Int*86400, 0).UTC().Format("2006-01-02")
	case KindTimestamp:
		return time.UnixMicro(v.Int).UTC().Format("2006-01-02T15:04:05.000000Z")
	case KindTime:
		d := time.Duration(v.Int) * time.Microsecond
		return time.Unix(0, 0).UTC().Add(d).Format("15:04:05.000000")
	case KindUnavailable:
		return UnavailableValue
	case KindArray:
		return string(v.AppendJSON(nil))
	default:
		return v.Str
	}
}

// AppendJSON appends v as a JSON value: integers and floats as numbers
// (non-finite floats as strings), booleans as true/false, NULL and unresolved
// placeholders as null, arrays as JSON arrays, everything else as the string
// Text() returns.
func (v Value) AppendJSON(dst []byte) []byte {
	switch v.Kind {
	case KindNull, KindUnavailable:
		return append(dst, "null"...)
	case KindInt:
		return strconv.AppendInt(dst, v.Int, 10)
	case KindBool:
		if v.Int != 0 {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case KindFloat:
		if math.IsInf(v.Float, 0) || math.IsNaN(v.Float) {
			return AppendJSONString(dst, v.Text())
		}
		return strconv.AppendFloat(dst, v.Float, 'g', -1, 64)
	case KindString, KindDecimal, KindBytes:
		return AppendJSONString(dst, v.Str)
	case KindArray:
		var buf [8]Value
		elems, err := v.Elems(buf[:0])
		if err != nil {
			return append(dst, "null"...)
		}
		return appendJSONArray(dst, elems)
	default:
		return AppendJSONString(dst, v.Text())
	}
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as a JSON string literal. Invalid UTF-8 bytes are
// replaced by U+FFFD, as encoding/json does.
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\ufffd"...)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

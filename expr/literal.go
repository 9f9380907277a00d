package expr

import (
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cdcjoin/cdcjoin/row"
)

// coerce converts the text of an unknown-typed literal to a value of kind
// k, as PostgreSQL's input functions read it. Errors say what PostgreSQL
// would say ("invalid input syntax for type …").
func coerce(text string, k row.Kind) (row.Value, error) {
	t := strings.TrimSpace(text)
	switch k {
	case row.KindString:
		return row.String(text), nil
	case row.KindInt:
		x, err := strconv.ParseInt(t, 10, 64)
		if err != nil {
			return row.Value{}, fmt.Errorf("invalid input syntax for type bigint: %q", text)
		}
		return row.Int(x), nil
	case row.KindDecimal:
		d, err := parseDec(t)
		if err != nil {
			return row.Value{}, err
		}
		return row.Decimal(d.String()), nil
	case row.KindFloat:
		f, err := parseFloat(t)
		if err != nil {
			return row.Value{}, err
		}
		return row.Float(f), nil
	case row.KindBool:
		switch strings.ToLower(t) {
		case "t", "true", "y", "yes", "on", "1":
			return row.Bool(true), nil
		case "f", "false", "n", "no", "off", "0":
			return row.Bool(false), nil
		}
		return row.Value{}, fmt.Errorf("invalid input syntax for type boolean: %q", text)
	case row.KindDate:
		d, err := time.Parse("2006-01-02", t)
		if err != nil {
			return row.Value{}, fmt.Errorf("invalid input syntax for type date: %q", text)
		}
		return row.Date(floorDiv(d.Unix(), 86400)), nil
	case row.KindTimestamp:
		ts, err := parseTimestamp(t)
		if err != nil {
			return row.Value{}, fmt.Errorf("invalid input syntax for type timestamp: %q", text)
		}
		return row.Timestamp(ts.UnixMicro()), nil
	case row.KindTime:
		for _, layout := range []string{"15:04:05.999999", "15:04"} {
			if tm, err := time.Parse(layout, t); err == nil {
				return row.Time(int64(tm.Hour())*3600e6 + int64(tm.Minute())*60e6 + int64(tm.Second())*1e6 + int64(tm.Nanosecond()/1000)), nil
			}
		}
		return row.Value{}, fmt.Errorf("invalid input syntax for type time: %q", text)
	case row.KindBytes:
		if strings.HasPrefix(t, `\x`) {
			b, err := hex.DecodeString(t[2:])
			if err != nil {
				return row.Value{}, fmt.Errorf("invalid hexadecimal data for type bytea: %q", text)
			}
			return row.Bytes(b), nil
		}
		return row.Value{Kind: row.KindBytes, Str: text}, nil
	}
	return row.Value{}, fmt.Errorf("a literal cannot be compared with a %s value", k)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// parseFloat reads PostgreSQL's float8 input: numbers, NaN, [-]Infinity.
func parseFloat(t string) (float64, error) {
	switch strings.ToLower(t) {
	case "nan":
		return math.NaN(), nil
	case "infinity", "+infinity", "inf", "+inf":
		return math.Inf(1), nil
	case "-infinity", "-inf":
		return math.Inf(-1), nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid input syntax for type double precision: %q", t)
	}
	return f, nil
}

// parseTimestamp reads the ISO 8601 forms PostgreSQL accepts for
// timestamp and timestamptz input: a date, optionally a time (separated by
// a space or T) with fractional seconds, optionally a zone (Z, ±hh,
// ±hh:mm, ±hhmm). Without a zone the value is taken as UTC (the
// project's servers run in UTC; Debezium sends timestamps in UTC).
func parseTimestamp(t string) (time.Time, error) {
	layouts := []string{
		"2006-01-02 15:04:05.999999999Z07:00", "2006-01-02T15:04:05.999999999Z07:00",
		"2006-01-02 15:04:05.999999999Z07", "2006-01-02T15:04:05.999999999Z07",
		"2006-01-02 15:04:05.999999999Z0700", "2006-01-02T15:04:05.999999999Z0700",
		"2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999",
		"2006-01-02 15:04Z07:00", "2006-01-02 15:04", "2006-01-02T15:04",
		"2006-01-02",
	}
	s := t
	if strings.HasSuffix(s, " UTC") || strings.HasSuffix(s, " utc") {
		s = s[:len(s)-4] + "Z"
	}
	s = strings.Replace(s, " +", "+", 1)
	s = strings.Replace(s, " -", "-", 1)
	for _, l := range layouts {
		if ts, err := time.Parse(l, s); err == nil {
			return ts, nil
		}
	}
	return time.Time{}, fmt.Errorf("bad timestamp %q", t)
}

package e2e

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The typed phase compares the join of deploy/local/types.sql's tables
// (type_parents ⟕ type_children, every column selected) column by column.
// PostgreSQL and ClickHouse spell values differently (t/true/1, NaN/nan,
// '{1,NULL}'/[1,NULL], dates as text or as days), so each column has a
// class, and both sides' text is brought to the class's canonical form
// before Diff compares them:
//
//	class      canonical form                         PostgreSQL text from   ClickHouse text from
//	int        decimal integer                        x::text                toString
//	decimal    shortest decimal (no trailing zeros)   x::text                toString (Decimal or String)
//	float32/64 Go's shortest 'g' of the float32/64;   x::text                toString (Float32/64)
//	           NaN, +Inf, -Inf
//	bool       true / false                           x::text (t/f)          Bool, UInt8 (0/1)
//	text       the text itself (json, enum, uuid too) x::text                toString
//	bytes      lower-case hex                         encode(x, 'hex')       the String's bytes
//	date       YYYY-MM-DD                             x::text                Date32, Int32 days
//	time       microseconds since midnight            x::text                Int64
//	timestamp  microseconds since the epoch (UTC)     extract(epoch)·10⁶     DateTime64(6), Int64
//	interval   microseconds, months as 30.4375 days   fields, as Debezium's  Int64
//	           (Debezium's MicroDuration)             MicroDuration
//	array(c)   JSON array of class c canonical forms; array_to_json           toString ([…] syntax)
//	           NULL arrays as [] (ClickHouse has no
//	           Nullable arrays)
type class uint8

const (
	cInt class = iota + 1
	cDecimal
	cFloat32
	cFloat64
	cBool
	cText
	cBytes
	cDate
	cTime
	cTimestamp
	cInterval
	cArray // elements of class elem
)

// typedColumn is one output column of the typed join.
type typedColumn struct {
	name, table, col string
	class, elem      class
}

// TypedColumns are the typed configs' select list (deploy/local/e2e-types-*.yaml).
var TypedColumns = []typedColumn{
	{"id", "u", "id", cInt, 0}, {"i2", "u", "i2", cInt, 0}, {"i4", "u", "i4", cInt, 0}, {"i8", "u", "i8", cInt, 0},
	{"num", "u", "num", cDecimal, 0}, {"num_free", "u", "num_free", cDecimal, 0},
	{"f4", "u", "f4", cFloat32, 0}, {"f8", "u", "f8", cFloat64, 0}, {"ok", "u", "ok", cBool, 0},
	{"txt", "u", "txt", cText, 0}, {"vc", "u", "vc", cText, 0},
	{"d", "u", "d", cDate, 0}, {"t", "u", "t", cTime, 0}, {"ts", "u", "ts", cTimestamp, 0}, {"tstz", "u", "tstz", cTimestamp, 0},
	{"iv", "u", "iv", cInterval, 0}, {"u", "u", "u", cText, 0}, {"j", "u", "j", cText, 0}, {"jb", "u", "jb", cText, 0},
	{"b", "u", "b", cBytes, 0}, {"m", "u", "m", cText, 0}, {"ai", "u", "ai", cArray, cInt}, {"at", "u", "at", cArray, cText},
	{"region", "d", "region", cText, 0}, {"no", "d", "no", cInt, 0}, {"parent_id", "d", "parent_id", cInt, 0},
	{"amount", "d", "amount", cDecimal, 0}, {"born", "d", "born", cDate, 0}, {"tags", "d", "tags", cArray, cText},
	{"blob", "d", "blob", cBytes, 0}, {"ids", "d", "ids", cArray, cText}, {"days", "d", "days", cArray, cDate},
}

// TypedMarker changes the typed tables' note column (selected by no join)
// in rows that exist from types.sql on and that types-dml.sql keeps: the
// typed phase's end marker, and its nudges.
func TypedMarker(n int) Tx {
	note := fmt.Sprintf("marker-%d", n)
	return Tx{Name: "typed end marker", Stmts: []Stmt{
		{`UPDATE type_parents SET note = $1 WHERE id = 4`, []any{note}},
		{`UPDATE type_children SET note = $1 WHERE region = 'us' AND no = 1`, []any{note}},
	}}
}

// TypedColumnNames returns the names of TypedColumns.
func TypedColumnNames() []string {
	out := make([]string, len(TypedColumns))
	for i, c := range TypedColumns {
		out[i] = c.name
	}
	return out
}

// pgExpr is the PostgreSQL expression giving column c's text.
func (c typedColumn) pgExpr() string {
	x := c.table + "." + c.col
	switch c.class {
	case cBytes:
		return "encode(" + x + ", 'hex')"
	case cTimestamp:
		return "(extract(epoch from " + x + ") * 1000000)::bigint::text"
	case cInterval:
		return "((((extract(year from " + x + ") * 12 + extract(month from " + x + ")) * 30.4375 + extract(day from " + x + ")) * 86400" +
			" + extract(hour from " + x + ") * 3600 + extract(minute from " + x + ") * 60 + extract(second from " + x + ")) * 1000000)::bigint::text"
	case cArray:
		return "array_to_json(" + x + ")::text"
	}
	return x + "::text"
}

// TypedJoinSQL is the oracle of the typed phase.
func TypedJoinSQL(left bool) string {
	kind := "JOIN"
	if left {
		kind = "LEFT JOIN"
	}
	sel := make([]string, len(TypedColumns))
	for i, c := range TypedColumns {
		sel[i] = c.pgExpr()
	}
	return "SELECT " + strings.Join(sel, ", ") + " FROM type_parents u " + kind + " type_children d ON d.parent_id = u.id"
}

// TypedJoin reads the typed oracle from PostgreSQL, in canonical form.
func (p *Postgres) TypedJoin(ctx context.Context, left bool) ([]Row, error) {
	rows, err := p.query(ctx, TypedJoinSQL(left), len(TypedColumns))
	if err != nil {
		return nil, err
	}
	return canonicalRows(rows, pgSide)
}

// TypedRows reads the typed join from ClickHouse (db.view), in canonical
// form.
func (c *ClickHouse) TypedRows(ctx context.Context, db, view string) ([]Row, error) {
	rows, err := c.RowsOf(ctx, db, view, TypedColumnNames())
	if err != nil {
		return nil, err
	}
	return canonicalRows(rows, chSide)
}

type side bool

const (
	pgSide side = false
	chSide side = true
)

func canonicalRows(rows []Row, s side) ([]Row, error) {
	for _, r := range rows {
		for i, col := range TypedColumns {
			if r[i].Null {
				if col.class == cArray { // NULL array ≡ [] (ClickHouse has no Nullable arrays)
					r[i] = Cell{Text: "[]"}
				}
				continue
			}
			t, err := canonical(col.class, col.elem, r[i].Text, s)
			if err != nil {
				return nil, fmt.Errorf("cdcjoin: e2e: %s column %s: %q: %w", map[side]string{pgSide: "PostgreSQL", chSide: "ClickHouse"}[s], col.name, short(r[i].Text), err)
			}
			r[i].Text = t
		}
	}
	SortRows(rows)
	return rows, nil
}

func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// canonical returns the canonical form of the text v of class c (array
// elements of class elem), read from side s.
func canonical(c, elem class, v string, s side) (string, error) {
	switch c {
	case cInt, cText:
		return v, nil
	case cDecimal:
		return canonicalDecimal(v)
	case cFloat32, cFloat64:
		bits := 64
		if c == cFloat32 {
			bits = 32
		}
		switch strings.ToLower(v) {
		case "nan":
			return "NaN", nil
		case "inf", "infinity", "+inf":
			return "+Inf", nil
		case "-inf", "-infinity":
			return "-Inf", nil
		}
		f, err := strconv.ParseFloat(v, bits)
		if err != nil {
			return "", err
		}
		return strconv.FormatFloat(f, 'g', -1, bits), nil
	case cBool:
		switch v {
		case "t", "true", "1":
			return "true", nil
		case "f", "false", "0":
			return "false", nil
		}
		return "", fmt.Errorf("not a boolean")
	case cBytes:
		if s == pgSide {
			return v, nil
		}
		return hex.EncodeToString([]byte(v)), nil
	case cDate:
		if days, err := strconv.ParseInt(v, 10, 64); err == nil { // Int32 days (servers without Date32)
			return time.Unix(days*86400, 0).UTC().Format("2006-01-02"), nil
		}
		d, err := time.Parse("2006-01-02", v)
		if err != nil {
			return "", err
		}
		return d.Format("2006-01-02"), nil
	case cTime:
		if s == chSide {
			return v, nil // Int64 microseconds since midnight
		}
		t, err := time.Parse("15:04:05.999999", v)
		if err != nil {
			return "", err
		}
		return strconv.FormatInt(int64(t.Hour())*3600e6+int64(t.Minute())*60e6+int64(t.Second())*1e6+int64(t.Nanosecond()/1000), 10), nil
	case cTimestamp, cInterval:
		if _, err := strconv.ParseInt(v, 10, 64); err == nil { // microseconds
			return v, nil
		}
		t, err := time.Parse("2006-01-02 15:04:05.999999", v) // DateTime64(6, 'UTC')
		if err != nil {
			return "", err
		}
		return strconv.FormatInt(t.UnixMicro(), 10), nil
	case cArray:
		var elems []*string
		var err error
		if s == pgSide {
			elems, err = parseJSONArray(v)
		} else {
			elems, err = parseCHArray(v)
		}
		if err != nil {
			return "", err
		}
		out := make([]*string, len(elems))
		for i, e := range elems {
			if e == nil {
				continue
			}
			t, err := canonical(elem, 0, *e, s)
			if err != nil {
				return "", fmt.Errorf("element %d: %w", i+1, err)
			}
			out[i] = &t
		}
		b, err := json.Marshal(out)
		return string(b), err
	}
	return "", fmt.Errorf("unknown class %d", c)
}

// canonicalDecimal strips a decimal's trailing fraction zeros (and a
// trailing point); "-0" becomes "0".
func canonicalDecimal(v string) (string, error) {
	if _, err := strconv.ParseFloat(v, 64); err != nil && !strings.Contains(err.Error(), "range") {
		return "", fmt.Errorf("not a decimal")
	}
	if strings.Contains(v, ".") {
		v = strings.TrimSuffix(strings.TrimRight(v, "0"), ".")
	}
	if v == "-0" {
		v = "0"
	}
	return v, nil
}

// parseJSONArray reads PostgreSQL's array_to_json: elements as text
// (strings unquoted, numbers as spelled), NULL as nil.
func parseJSONArray(v string) ([]*string, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, err
	}
	out := make([]*string, len(raw))
	for i, r := range raw {
		switch {
		case string(r) == "null":
		case len(r) > 0 && r[0] == '"':
			var s string
			if err := json.Unmarshal(r, &s); err != nil {
				return nil, err
			}
			out[i] = &s
		default:
			s := string(r)
			out[i] = &s
		}
	}
	return out, nil
}

// parseCHArray reads ClickHouse's text of an array ([1,NULL,'a\'b']):
// quoted elements unescaped, NULL as nil.
func parseCHArray(v string) ([]*string, error) {
	if len(v) < 2 || v[0] != '[' || v[len(v)-1] != ']' {
		return nil, fmt.Errorf("not an array")
	}
	v = v[1 : len(v)-1]
	var out []*string
	for len(v) > 0 {
		var e string
		if v[0] == '\'' {
			var b strings.Builder
			i := 1
			for ; i < len(v) && v[i] != '\''; i++ {
				if v[i] == '\\' && i+1 < len(v) {
					i++
					switch v[i] {
					case 'n':
						b.WriteByte('\n')
					case 't':
						b.WriteByte('\t')
					case 'r':
						b.WriteByte('\r')
					case '0':
						b.WriteByte(0)
					case 'b':
						b.WriteByte('\b')
					case 'f':
						b.WriteByte('\f')
					default:
						b.WriteByte(v[i])
					}
					continue
				}
				b.WriteByte(v[i])
			}
			if i >= len(v) {
				return nil, fmt.Errorf("unterminated string")
			}
			e, v = b.String(), v[i+1:]
			out = append(out, &e)
		} else {
			end := strings.IndexByte(v, ',')
			if end < 0 {
				end = len(v)
			}
			e, v = v[:end], v[end:]
			if e == "NULL" {
				out = append(out, nil)
			} else {
				out = append(out, &e)
			}
		}
		if len(v) > 0 {
			if v[0] != ',' {
				return nil, fmt.Errorf("expected ','")
			}
			v = v[1:]
		}
	}
	return out, nil
}

// Package pgschema says which Kafka Connect schema Debezium's PostgreSQL
// connector gives a column of a PostgreSQL type, under the connector's
// handling modes (decimal.handling.mode, time.precision.mode,
// binary.handling.mode, interval.handling.mode): what a record with a
// schema would say about the column. The configuration declares column
// types with it, so that records without a schema decode exactly as with
// one (debezium.Options.Types), and tables are typed before any record
// arrives. It imports nothing of cdcjoin but row.
package pgschema

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/cdcjoin/cdcjoin/row"
)

// Modes are the Debezium PostgreSQL connector's settings that decide how a
// column is encoded: decimal.handling.mode, time.precision.mode,
// binary.handling.mode and interval.handling.mode. Empty fields mean
// Debezium's defaults (precise, adaptive, bytes, numeric).
type Modes struct {
	Decimal  string // precise | string | double
	Time     string // adaptive | adaptive_time_microseconds | connect | isostring
	Binary   string // bytes | base64 | base64-url-safe | hex
	Interval string // numeric | string
}

// Problems lists the settings that are not one of Debezium's values.
func (m Modes) Problems() []string {
	var out []string
	check := func(name, v string, allowed ...string) {
		if v == "" {
			return
		}
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		out = append(out, fmt.Sprintf("%s %q: use %s", name, v, strings.Join(allowed, ", ")))
	}
	check("decimal.handling.mode", m.Decimal, "precise", "string", "double")
	check("time.precision.mode", m.Time, "adaptive", "adaptive_time_microseconds", "connect", "isostring")
	check("binary.handling.mode", m.Binary, "bytes", "base64", "base64-url-safe", "hex")
	check("interval.handling.mode", m.Interval, "numeric", "string")
	return out
}

// Kafka Connect and Debezium logical names (the schema's "name").
const (
	logicalDecimal        = "org.apache.kafka.connect.data.Decimal"
	logicalConnectDate    = "org.apache.kafka.connect.data.Date"
	logicalConnectTime    = "org.apache.kafka.connect.data.Time"
	logicalConnectTs      = "org.apache.kafka.connect.data.Timestamp"
	logicalVarDecimal     = "io.debezium.data.VariableScaleDecimal"
	logicalDate           = "io.debezium.time.Date"
	logicalTime           = "io.debezium.time.Time"
	logicalMicroTime      = "io.debezium.time.MicroTime"
	logicalTimestamp      = "io.debezium.time.Timestamp"
	logicalMicroTimestamp = "io.debezium.time.MicroTimestamp"
	logicalZonedTimestamp = "io.debezium.time.ZonedTimestamp"
	logicalUuid           = "io.debezium.data.Uuid"
	logicalJSON           = "io.debezium.data.Json"
	logicalXML            = "io.debezium.data.Xml"
	logicalEnum           = "io.debezium.data.Enum"
	logicalBits           = "io.debezium.data.Bits"
	logicalLtree          = "io.debezium.data.Ltree"
	logicalZonedTime      = "io.debezium.time.ZonedTime"
	logicalDuration       = "io.debezium.time.MicroDuration"
	logicalInterval       = "io.debezium.time.Interval"
	logicalIsoDate        = "io.debezium.time.IsoDate"
	logicalIsoTime        = "io.debezium.time.IsoTime"
	logicalIsoTs          = "io.debezium.time.IsoTimestamp"
)

var declRE = regexp.MustCompile(`^([a-z][a-z0-9_ ]*?)\s*(?:\(\s*([0-9]+)\s*(?:,\s*(-?[0-9]+)\s*)?\))?\s*((?:with|without) time zone)?$`)

// Column returns the Kafka Connect schema that Debezium's PostgreSQL
// connector gives a column declared as decl under modes m, with the Kind
// its values decode to: what a record with a schema would say about the
// column. decl is a
// PostgreSQL type as in CREATE TABLE ("bigint", "numeric(12,2)",
// "timestamp(3)", "timestamp with time zone", "text[]"), or "enum" for any
// enum type, optionally followed by "not null". Columns are Optional
// unless "not null".
func Column(decl string, m Modes) (row.ColumnType, error) {
	s := strings.Join(strings.Fields(strings.ToLower(decl)), " ")
	notNull := strings.HasSuffix(s, " not null")
	s = strings.TrimSuffix(s, " not null")
	dims := 0
	for strings.HasSuffix(s, "[]") {
		s, dims = strings.TrimSpace(strings.TrimSuffix(s, "[]")), dims+1
	}
	m = m.withDefaults()
	ct, err := postgresScalar(s, m)
	if err != nil {
		return ct, fmt.Errorf("cdcjoin: type %q: %w", decl, err)
	}
	for ; dims > 0; dims-- {
		e := ct
		e.Optional = true // PostgreSQL array elements may be NULL
		ct = row.ColumnType{Connect: "array", Kind: row.KindArray, Elem: &e}
	}
	ct.Optional = !notNull
	return ct, nil
}

func (m Modes) withDefaults() Modes {
	if m.Decimal == "" {
		m.Decimal = "precise"
	}
	if m.Time == "" {
		m.Time = "adaptive"
	}
	if m.Binary == "" {
		m.Binary = "bytes"
	}
	if m.Interval == "" {
		m.Interval = "numeric"
	}
	return m
}

// postgresScalar maps a non-array type (lower case, single spaces).
func postgresScalar(s string, m Modes) (row.ColumnType, error) {
	g := declRE.FindStringSubmatch(s)
	if g == nil {
		return row.ColumnType{}, fmt.Errorf("not a PostgreSQL type")
	}
	name, tz := g[1], g[4] == "with time zone"
	hasP := g[2] != ""
	p, _ := strconv.Atoi(g[2])
	sc, _ := strconv.Atoi(g[3])
	if g[4] != "" && name != "time" && name != "timestamp" {
		return row.ColumnType{}, fmt.Errorf("%q cannot have a time zone", name)
	}
	t := func(connect, logical string) (row.ColumnType, error) {
		return row.ColumnType{Connect: connect, Logical: logical, Kind: kindOf(connect, logical)}, nil
	}
	switch name {
	case "smallint", "int2", "smallserial", "serial2":
		return t("int16", "")
	case "integer", "int", "int4", "serial", "serial4":
		return t("int32", "")
	case "bigint", "int8", "bigserial", "serial8", "oid":
		return t("int64", "")
	case "real", "float4":
		return t("float32", "")
	case "double precision", "float8":
		return t("float64", "")
	case "float":
		if hasP && p <= 24 {
			return t("float32", "")
		}
		return t("float64", "")
	case "boolean", "bool":
		return t("boolean", "")
	case "numeric", "decimal":
		switch m.Decimal {
		case "string":
			return t("string", "")
		case "double":
			return t("float64", "")
		}
		if !hasP {
			return row.ColumnType{Connect: "struct", Logical: logicalVarDecimal, Scale: -1, Kind: row.KindDecimal}, nil
		}
		if sc < 0 || sc > p || p > 1000 {
			return row.ColumnType{}, fmt.Errorf("numeric(%d, %d): need 0 <= scale <= precision <= 1000", p, sc)
		}
		return row.ColumnType{Connect: "bytes", Logical: logicalDecimal, Scale: sc, Precision: p, Kind: row.KindDecimal}, nil
	case "money":
		switch m.Decimal {
		case "string":
			return t("string", "")
		case "double":
			return t("float64", "")
		}
		return row.ColumnType{Connect: "bytes", Logical: logicalDecimal, Scale: 2, Kind: row.KindDecimal}, nil
	case "text", "varchar", "character varying", "char", "character", "bpchar", "name", "citext",
		"inet", "cidr", "macaddr", "macaddr8", "tsvector", "tsquery", "hstore":
		if name == "hstore" {
			return t("string", logicalJSON) // hstore.handling.mode=json, the default
		}
		return t("string", "")
	case "uuid":
		return t("string", logicalUuid)
	case "json", "jsonb":
		return t("string", logicalJSON)
	case "xml":
		return t("string", logicalXML)
	case "ltree":
		return t("string", logicalLtree)
	case "enum":
		return t("string", logicalEnum)
	case "bytea":
		if m.Binary == "bytes" {
			return t("bytes", "")
		}
		return t("string", "") // base64 or hex text
	case "bit":
		if !hasP || p == 1 {
			return t("boolean", "")
		}
		return t("bytes", logicalBits)
	case "bit varying", "varbit":
		return t("bytes", logicalBits)
	case "date":
		switch m.Time {
		case "connect":
			return t("int32", logicalConnectDate)
		case "isostring":
			return t("string", logicalIsoDate)
		}
		return t("int32", logicalDate)
	case "time", "timetz":
		if tz || name == "timetz" {
			return t("string", logicalZonedTime)
		}
		switch {
		case m.Time == "connect":
			return t("int32", logicalConnectTime)
		case m.Time == "isostring":
			return t("string", logicalIsoTime)
		case m.Time == "adaptive" && hasP && p <= 3:
			return t("int32", logicalTime)
		}
		return t("int64", logicalMicroTime)
	case "timestamp", "timestamptz":
		if tz || name == "timestamptz" {
			return t("string", logicalZonedTimestamp)
		}
		switch {
		case m.Time == "connect":
			return t("int64", logicalConnectTs)
		case m.Time == "isostring":
			return t("string", logicalIsoTs)
		case hasP && p <= 3:
			return t("int64", logicalTimestamp)
		}
		return t("int64", logicalMicroTimestamp)
	case "interval":
		if m.Interval == "string" {
			return t("string", logicalInterval)
		}
		return t("int64", logicalDuration)
	}
	return row.ColumnType{}, fmt.Errorf("unknown PostgreSQL type %q (declare enums as \"enum\")", name)
}

// kindOf is the Kind a value of a scalar Connect type with logical name
// decodes to (package debezium's decoder agrees: see its tests).
func kindOf(connect, logical string) row.Kind {
	switch logical {
	case logicalDate, logicalConnectDate:
		return row.KindDate
	case logicalTime, logicalMicroTime, logicalConnectTime:
		return row.KindTime
	case logicalTimestamp, logicalMicroTimestamp, logicalConnectTs, logicalZonedTimestamp:
		return row.KindTimestamp
	}
	switch connect {
	case "int16", "int32", "int64":
		return row.KindInt
	case "float32", "float64":
		return row.KindFloat
	case "boolean":
		return row.KindBool
	case "bytes":
		return row.KindBytes
	}
	return row.KindString
}

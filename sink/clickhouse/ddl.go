package clickhouse

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/row"
)

// Server is the ClickHouse server version the DDL and the inserts are
// written for (feature detection).
type Server struct {
	Major, Minor int
}

// LatestServer stands for a current server, for printing DDL without one.
func LatestServer() Server { return Server{Major: 99} }

func (s Server) atLeast(major, minor int) bool {
	return s.Major > major || (s.Major == major && s.Minor >= minor)
}

func (s Server) String() string { return strconv.Itoa(s.Major) + "." + strconv.Itoa(s.Minor) }

// HasDateTime64 reports DateTime64 support (20.1+). Older servers store
// timestamps as Int64 microseconds since the Unix epoch (UTC).
func (s Server) HasDateTime64() bool { return s.atLeast(20, 1) }

// HasDate32 reports Date32 support (21.9+: 1900-01-01 to 2299-12-31). Older
// servers store dates as Int32 days since 1970-01-01: their Date holds no
// date before 1970.
func (s Server) HasDate32() bool { return s.atLeast(21, 9) }

// HasBool reports the Bool type (21.12+). Older servers store booleans as
// UInt8 (0, 1).
func (s Server) HasBool() bool { return s.atLeast(21, 12) }

// HasIsDeleted reports ReplacingMergeTree(ver, is_deleted) support (23.2+).
func (s Server) HasIsDeleted() bool { return s.atLeast(23, 2) }

// HasDedupToken reports insert_deduplication_token support together with
// non_replicated_deduplication_window for MergeTree tables (22.2+).
func (s Server) HasDedupToken() bool { return s.atLeast(22, 2) }

// dedupWindow is the number of recent insert tokens a table remembers.
const dedupWindow = 1000

// Hidden column names.
const (
	colPK      = "_pk"
	colCK      = "_ck"
	colVersion = "_version"
	colDeleted = "_deleted"
	colSign    = "_sign"
)

// ColumnTypes returns the ClickHouse type of each select output column:
// cfg.ClickHouse.Columns overrides, else the type from types[i] (the
// Debezium schema of the column's source, or its declared type; nil or a
// zero entry when unknown), else the column's type declared in the
// configuration, else inferred from sample (a row of values, e.g. the first
// change's; may be nil), else Nullable(String).
//
// Mapping (servers without a type get the fallback after "/"): int8..int64
// → Int8..Int64; float32/64 → Float32/64; boolean → Bool / UInt8; string →
// String (io.debezium.data.Uuid → UUID); bytes → String; Decimal(p, s) →
// Decimal(p, s), p = 38 when the schema does not state it, String when the
// scale is variable or p > 38; Date → Date32 / Int32 days since 1970-01-01;
// timestamps → DateTime64(6, 'UTC') / Int64 microseconds since the epoch;
// time of day → Int64 microseconds since midnight; arrays →
// Array(Nullable(T)) with T mapped like a column (String for arrays of
// arrays). Optional columns, and every child column of a LEFT join (padded
// rows), are Nullable, except arrays (ClickHouse has no Nullable arrays: a
// NULL array is stored empty). Types inferred from values (schemaless input
// without declared types) are all Nullable.
func ColumnTypes(cfg *config.Config, types []row.ColumnType, sample []row.Value, srv Server) []string {
	out := make([]string, len(cfg.Select))
	declared := cfg.DeclaredOutputTypes()
	for i, s := range cfg.Select {
		if cfg.ClickHouse != nil {
			if t, ok := cfg.ClickHouse.Columns[s.Name]; ok {
				out[i] = strings.TrimSpace(t)
				continue
			}
		}
		forceNull := cfg.Padded(s.Side)
		var ct row.ColumnType
		switch {
		case i < len(types) && types[i].Known():
			ct = types[i]
		case declared[i].Known():
			ct = declared[i]
		case i < len(sample) && sample[i].Kind != row.KindNull:
			ct = inferType(sample[i])
			ct.Optional = true
		default:
			out[i] = "Nullable(String)"
			continue
		}
		t := typeFor(ct, srv)
		if (ct.Optional || forceNull) && !strings.HasPrefix(t, "Array(") {
			t = "Nullable(" + t + ")"
		}
		out[i] = t
	}
	return out
}

// inferType is the type of a value of a column without schema or declared
// type: its kind (decimals of variable scale; arrays typed by their first
// non-NULL element).
func inferType(v row.Value) row.ColumnType {
	ct := row.ColumnType{Kind: v.Kind, Scale: -1}
	if v.Kind == row.KindArray {
		elems, _ := v.Elems(nil)
		e := row.ColumnType{Kind: row.KindString, Scale: -1}
		for _, x := range elems {
			if x.Kind != row.KindNull {
				e = inferType(x)
				break
			}
		}
		ct.Elem = &e
	}
	return ct
}

func typeFor(ct row.ColumnType, srv Server) string {
	switch ct.Kind {
	case row.KindInt:
		switch ct.Connect {
		case "int8":
			return "Int8"
		case "int16":
			return "Int16"
		case "int32":
			return "Int32"
		}
		return "Int64"
	case row.KindFloat:
		if ct.Connect == "float32" {
			return "Float32"
		}
		return "Float64"
	case row.KindBool:
		if srv.HasBool() {
			return "Bool"
		}
		return "UInt8"
	case row.KindString:
		if ct.Logical == "io.debezium.data.Uuid" {
			return "UUID"
		}
		return "String"
	case row.KindDecimal:
		p := ct.Precision
		if p == 0 {
			p = 38
		}
		if ct.Scale < 0 || p > 38 || ct.Scale > p {
			return "String"
		}
		return fmt.Sprintf("Decimal(%d, %d)", p, ct.Scale)
	case row.KindDate:
		if srv.HasDate32() {
			return "Date32"
		}
		return "Int32"
	case row.KindTimestamp:
		if srv.HasDateTime64() {
			return "DateTime64(6, 'UTC')"
		}
		return "Int64"
	case row.KindTime:
		return "Int64"
	case row.KindArray:
		if ct.Elem == nil || ct.Elem.Kind == row.KindArray {
			return "String"
		}
		return "Array(Nullable(" + typeFor(*ct.Elem, srv) + "))"
	}
	return "String"
}

// quoteIdent quotes a ClickHouse identifier with backticks.
func quoteIdent(s string) string {
	return "`" + strings.ReplaceAll(strings.ReplaceAll(s, "\\", "\\\\"), "`", "\\`") + "`"
}

func tableName(ch *config.ClickHouse) string {
	return quoteIdent(ch.Database) + "." + quoteIdent(ch.Table)
}

// ViewName is the name of the upsert mode's live view: <table>_current.
func ViewName(ch *config.ClickHouse) string { return ch.Table + "_current" }

// DDL returns the statements that create the output database, table and (in
// upsert mode) the <table>_current view for cfg, with column types from
// ColumnTypes(cfg, types, nil, srv). The statements use IF NOT EXISTS; run
// them in order. cfg.ClickHouse must be set.
func DDL(cfg *config.Config, types []row.ColumnType, srv Server) ([]string, error) {
	if cfg.ClickHouse == nil {
		return nil, fmt.Errorf("cdcjoin: clickhouse: the configuration has no clickhouse section")
	}
	return ddlFor(cfg, ColumnTypes(cfg, types, nil, srv), srv)
}

func ddlFor(cfg *config.Config, colTypes []string, srv Server) ([]string, error) {
	ch := cfg.ClickHouse
	names := cfg.OutputNames()
	for i, t := range colTypes {
		if _, err := parseType(t); err != nil {
			return nil, fmt.Errorf("cdcjoin: clickhouse: column %s: %w", names[i], err)
		}
	}
	if ch.Mode == config.ModeInsert {
		return []string{"CREATE DATABASE IF NOT EXISTS " + quoteIdent(ch.Database), insertDDL(cfg, names, colTypes, srv)}, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s\n(\n", tableName(ch))
	for i, n := range names {
		fmt.Fprintf(&b, "    %s %s,\n", quoteIdent(n), colTypes[i])
	}
	fmt.Fprintf(&b, "    %s String,\n    %s String,\n    %s UInt64,\n", colPK, colCK, colVersion)
	var engine string
	var settings []string
	if ch.Mode == config.ModeChangelog {
		fmt.Fprintf(&b, "    %s Int8\n", colSign)
		engine = fmt.Sprintf("VersionedCollapsingMergeTree(%s, %s)", colSign, colVersion)
		if srv.HasDedupToken() {
			settings = append(settings, fmt.Sprintf("non_replicated_deduplication_window = %d", dedupWindow))
		}
	} else {
		fmt.Fprintf(&b, "    %s UInt8\n", colDeleted)
		if srv.HasIsDeleted() {
			engine = fmt.Sprintf("ReplacingMergeTree(%s, %s)", colVersion, colDeleted)
		} else {
			engine = fmt.Sprintf("ReplacingMergeTree(%s)", colVersion)
		}
	}
	fmt.Fprintf(&b, ")\nENGINE = %s\nORDER BY (%s, %s)", engine, colPK, colCK)
	if len(settings) > 0 {
		fmt.Fprintf(&b, "\nSETTINGS %s", strings.Join(settings, ", "))
	}
	stmts := []string{
		"CREATE DATABASE IF NOT EXISTS " + quoteIdent(ch.Database),
		b.String(),
	}
	if ch.Mode != config.ModeChangelog {
		cols := make([]string, len(names))
		for i, n := range names {
			cols[i] = quoteIdent(n)
		}
		stmts = append(stmts, fmt.Sprintf("CREATE VIEW IF NOT EXISTS %s.%s AS\nSELECT %s\nFROM %s FINAL\nWHERE %s = 0",
			quoteIdent(ch.Database), quoteIdent(ViewName(ch)), strings.Join(cols, ", "), tableName(ch), colDeleted))
	}
	return stmts, nil
}

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

// HasCleanup reports the table setting
// allow_experimental_replacing_merge_with_cleanup, which lets OPTIMIZE …
// FINAL CLEANUP purge the rows whose latest version is a deletion (23.12+).
func (s Server) HasCleanup() bool { return s.atLeast(23, 12) }

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
	names := cfg.OutputNames()
	out := make([]string, len(names))
	declared := cfg.DeclaredOutputTypes()
	padded := cfg.OutputPadded()
	for i, name := range names {
		if cfg.ClickHouse != nil {
			if t, ok := cfg.ClickHouse.Columns[name]; ok {
				out[i] = strings.TrimSpace(t)
				continue
			}
		}
		forceNull := padded[i]
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

// UntypedError is a table that cannot be created yet: no type is known for
// Columns (no schema, no declared type or clickhouse.columns override, and
// every value seen so far was NULL). A NULL does not decide a column's
// type: a driver waits for values (`run` samples the topics again) or the
// user declares the types.
type UntypedError struct {
	Table   string
	Columns []string
}

func (e *UntypedError) Error() string {
	return fmt.Sprintf("cdcjoin: clickhouse: cannot create table %s yet: no type is known for column(s) %s (no schema, no declared type, and every value seen so far is NULL; a NULL does not decide a column's type): declare them (parent.types / child.types with PostgreSQL types, or clickhouse.columns)",
		e.Table, strings.Join(e.Columns, ", "))
}

// untyped returns the select names whose ClickHouse type ColumnTypes would
// only guess (nothing known about them but NULLs).
func untyped(cfg *config.Config, types []row.ColumnType, sample []row.Value) []string {
	declared := cfg.DeclaredOutputTypes()
	var out []string
	for i, s := range cfg.Select {
		if cfg.ClickHouse != nil {
			if _, ok := cfg.ClickHouse.Columns[s.Name]; ok {
				continue
			}
		}
		if i < len(types) && types[i].Known() || declared[i].Known() || i < len(sample) && sample[i].Kind != row.KindNull {
			continue
		}
		out = append(out, s.Name)
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
	on := onCluster(ch)
	if ch.Mode == config.ModeInsert {
		return []string{"CREATE DATABASE IF NOT EXISTS " + quoteIdent(ch.Database) + on, insertDDL(cfg, names, colTypes, srv)}, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s%s\n(\n", tableName(ch), on)
	for i, n := range names {
		fmt.Fprintf(&b, "    %s %s,\n", quoteIdent(n), colTypes[i])
	}
	fmt.Fprintf(&b, "    %s String,\n    %s String,\n    %s UInt64,\n", colPK, colCK, colVersion)
	engine, settings := engineFor(ch, srv)
	if ch.Mode == config.ModeChangelog {
		fmt.Fprintf(&b, "    %s Int8\n", colSign)
	} else {
		fmt.Fprintf(&b, "    %s UInt8\n", colDeleted)
	}
	fmt.Fprintf(&b, ")\nENGINE = %s\nORDER BY (%s, %s)", engine, colPK, colCK)
	if len(settings) > 0 {
		fmt.Fprintf(&b, "\nSETTINGS %s", strings.Join(settings, ", "))
	}
	stmts := []string{
		"CREATE DATABASE IF NOT EXISTS " + quoteIdent(ch.Database) + on,
		b.String(),
	}
	if ch.Mode != config.ModeChangelog {
		stmts = append(stmts, fmt.Sprintf("CREATE VIEW IF NOT EXISTS %s.%s%s AS\n%s",
			quoteIdent(ch.Database), quoteIdent(ViewName(ch)), on, liveSelect(cfg)))
	}
	return stmts, nil
}

// liveSelect is the query of an upsert table's live view: the latest
// version of every row, deletions left out. The filter is redundant where
// the engine has the is_deleted parameter (FINAL drops deletions there) and
// needed on older servers, or for a table created by one before an upgrade.
func liveSelect(cfg *config.Config) string {
	names := cfg.OutputNames()
	cols := make([]string, len(names))
	for i, n := range names {
		cols[i] = quoteIdent(n)
	}
	return fmt.Sprintf("SELECT %s\nFROM %s FINAL\nWHERE %s = 0", strings.Join(cols, ", "), tableName(cfg.ClickHouse), colDeleted)
}

// onCluster is the ON CLUSTER clause of the DDL ("" without a cluster).
func onCluster(ch *config.ClickHouse) string {
	if ch.Cluster == "" {
		return ""
	}
	return " ON CLUSTER " + quoteIdent(ch.Cluster)
}

// engineFor returns the table engine for ch's mode on srv and the table
// settings:
//
//   - upsert: ReplacingMergeTree(_version, _deleted) on 23.2+, so that FINAL
//     drops rows whose latest version is a deletion and merges with CLEANUP
//     can purge them (allowed by the table setting on 23.12+);
//     ReplacingMergeTree(_version) before (deletions are rows with
//     _deleted = 1 that the view filters).
//   - changelog: VersionedCollapsingMergeTree(_sign, _version), with a
//     deduplication window for insert_deduplication_token on 22.2+.
//   - insert (time joins): MergeTree, with the same window.
//
// With a cluster the engine is the Replicated* one, at ch.ReplicaPath with
// the {replica} macro as the replica's name.
func engineFor(ch *config.ClickHouse, srv Server) (string, []string) {
	var name string
	var params, settings []string
	if ch.Mode == config.ModeInsert {
		name = "MergeTree"
		if srv.HasDedupToken() {
			window := "non_replicated_deduplication_window"
			if ch.Cluster != "" {
				window = "replicated_deduplication_window"
			}
			settings = append(settings, fmt.Sprintf("%s = %d", window, dedupWindow))
		}
	} else if ch.Mode == config.ModeChangelog {
		name, params = "VersionedCollapsingMergeTree", []string{colSign, colVersion}
		if srv.HasDedupToken() {
			window := "non_replicated_deduplication_window"
			if ch.Cluster != "" {
				window = "replicated_deduplication_window"
			}
			settings = append(settings, fmt.Sprintf("%s = %d", window, dedupWindow))
		}
	} else {
		name, params = "ReplacingMergeTree", []string{colVersion}
		if srv.HasIsDeleted() {
			params = append(params, colDeleted)
		}
		if srv.HasCleanup() {
			settings = append(settings, "allow_experimental_replacing_merge_with_cleanup = 1")
		}
	}
	if ch.Cluster != "" {
		name = "Replicated" + name
		params = append([]string{quoteString(ch.ReplicaPath), quoteString("{replica}")}, params...)
	}
	return name + "(" + strings.Join(params, ", ") + ")", settings
}

// quoteString is a ClickHouse string literal.
func quoteString(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, "\\", "\\\\"), "'", "\\'") + "'"
}

// Purge returns the statements that remove, for good, the rows of an
// upsert table whose latest version is a deletion (FINAL already hides
// them): on a cluster SYSTEM SYNC REPLICA on every replica first (the merge
// must see every INSERT the replicas accepted), then OPTIMIZE TABLE … FINAL
// CLEANUP (one replica assigns the merge, the others replay it). It needs
// 23.12+ (the table setting allow_experimental_replacing_merge_with_cleanup,
// which the DDL sets there); older servers keep deletions as rows with
// _deleted = 1. When it is safe to run is the caller's schedule; see the
// package documentation (Purging deletions).
func Purge(ch *config.ClickHouse, srv Server) ([]string, error) {
	if ch.Mode == config.ModeChangelog {
		return nil, fmt.Errorf("cdcjoin: clickhouse: purge is for upsert tables; a changelog table collapses its -1/+1 pairs as it merges")
	}
	if !srv.HasCleanup() {
		return nil, fmt.Errorf("cdcjoin: clickhouse: ClickHouse %s has no OPTIMIZE … FINAL CLEANUP (23.12+): deletions stay as rows with %s = 1, which the %s view filters", srv, colDeleted, ViewName(ch))
	}
	var stmts []string
	if ch.Cluster != "" {
		stmts = append(stmts, "SYSTEM SYNC REPLICA ON CLUSTER "+quoteIdent(ch.Cluster)+" "+tableName(ch))
	}
	return append(stmts, "OPTIMIZE TABLE "+tableName(ch)+" FINAL CLEANUP"), nil
}

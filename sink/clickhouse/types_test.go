package clickhouse

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	chproto "github.com/ClickHouse/ch-go/proto"
	chcolumn "github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/row"
)

// The type fixtures: real Debezium records of a table of every common
// PostgreSQL type (debezium/testdata/real/README.md), read with the e2e's
// configurations (schemas on: types from the records; off: declared).
var typeFixtures = []struct{ mode, config, records, prefix string }{
	{"on", "../../deploy/local/e2e-types-on.yaml", "../../debezium/testdata/real/types-on.jsonl", "dbserver1"},
	{"off", "../../deploy/local/e2e-types-off.yaml", "../../debezium/testdata/real/types-off.jsonl", "dbserver2"},
}

// fixtureJoin replays records (of topics prefix.public.*) through the
// engine and returns the configuration, the output column types the engine
// learned and the final join as upserts (versions 1, 2, …).
func fixtureJoin(t *testing.T, cfgPath, records, prefix string) (*config.Config, []row.ColumnType, []row.Change) {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg.State.Dir = t.TempDir()
	cfg.Parent.Topic, cfg.Child.Topic = prefix+".public.type_parents", prefix+".public.type_children"
	eng, err := engine.Open(cfg, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	f, err := os.Open(records)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	if err := engine.ReadJSONL(f, records, func(r *engine.Record) error { return eng.Process(ctx, r) }); err != nil {
		t.Fatal(err)
	}
	if err := eng.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var changes []row.Change
	err = eng.Final(func(pk, ck, vals []row.Value) error {
		c := row.Change{Op: row.Upsert, Version: uint64(len(changes) + 1),
			ParentKey: append([]row.Value(nil), pk...), Values: append([]row.Value(nil), vals...)}
		if ck != nil {
			c.ChildKey = append([]row.Value(nil), ck...)
		}
		changes = append(changes, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) < 5 {
		t.Fatalf("%s: only %d joined rows", records, len(changes))
	}
	return cfg, eng.OutputTypes(), changes
}

// readBackSQL selects every output column of table as text (toString) with
// a NULL flag, in row key order; hexed wraps each text in hex() for output
// formats that must stay printable.
func readBackSQL(cfg *config.Config, table string, hexed bool) string {
	var sel []string
	for _, n := range cfg.OutputNames() {
		txt := fmt.Sprintf("ifNull(toString(%s), '')", quoteIdent(n))
		if hexed {
			txt = "hex(" + txt + ")"
		}
		sel = append(sel, txt, fmt.Sprintf("isNull(%s)", quoteIdent(n)))
	}
	return fmt.Sprintf("SELECT %s FROM %s.%s FINAL WHERE %s = 0 ORDER BY %s, %s",
		strings.Join(sel, ", "), quoteIdent(cfg.ClickHouse.Database), quoteIdent(table), colDeleted, colPK, colCK)
}

// renderRows prints rows of (text, null flag) cells read back, one line per
// row, "name=NULL" or name="text" (Go-quoted), after a header of the
// column types.
func renderRows(names, types []string, rows [][]string) string {
	var b strings.Builder
	for i, n := range names {
		fmt.Fprintf(&b, "# %s %s\n", n, types[i])
	}
	for _, r := range rows {
		for i, n := range names {
			if i > 0 {
				b.WriteByte(' ')
			}
			switch v := r[2*i]; {
			case r[2*i+1] == "1":
				b.WriteString(n + "=NULL")
			case len(v) > 120: // long (TOASTed) values: their start, length and hash
				fmt.Fprintf(&b, "%s=%s…(%d bytes, sha256 %x)", n, strconv.Quote(v[:60]), len(v), sha256.Sum256([]byte(v)))
			default:
				b.WriteString(n + "=" + strconv.Quote(v))
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// TestTypesRoundTrip (integration, the server of CDCJOIN_CLICKHOUSE_ADDR:
// 18.16 here): the joined rows of the type fixtures, schemas on and off,
// go through the real sink into a table it creates; what ClickHouse shows
// back (toString of every column) is identical for both modes and equals
// testdata/types-<server>.golden, reviewed value by value against
// PostgreSQL (see the README's type table). On 18.16 that exercises the
// fallbacks: Int32 days for dates (1955-11-05 stays before 1970), Int64
// microseconds for timestamps, UInt8 booleans; and Float32/Float64 with
// NaN and ±Inf, Decimal, UUID and Array(Nullable(T)) columns.
func TestTypesRoundTrip(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var got []string
	var srv Server
	for _, fx := range typeFixtures {
		cfg, types, changes := fixtureJoin(t, fx.config, fx.records, fx.prefix)
		ch, err := cfg.WithClickHouse(addr)
		if err != nil {
			t.Fatal(err)
		}
		ch.ClickHouse.Database = testDB
		ch.ClickHouse.Table = fmt.Sprintf("types_%s_%d", fx.mode, time.Now().UnixNano()%1e9)
		s, err := Open(ctx, ch, Options{Types: types, Recreate: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Write(ctx, changes); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		srv = s.Server()
		colTypes := make([]string, len(s.types))
		for i, ct := range s.types {
			colTypes[i] = ct.name
		}
		s.Close()
		rows := queryText(t, addr, readBackSQL(ch, ch.ClickHouse.Table, false), 2*len(colTypes))
		got = append(got, renderRows(ch.OutputNames(), colTypes, rows))
		if len(rows) != len(changes) {
			t.Errorf("%s: %d rows read back, %d written", fx.mode, len(rows), len(changes))
		}
	}
	if got[0] != got[1] {
		t.Errorf("schemas on and off differ:\n%s\nvs\n%s", got[0], got[1])
	}
	checkGolden(t, fmt.Sprintf("testdata/types-%d.%d.golden", srv.Major, srv.Minor), got[0])
}

// queryText runs q (whose columns are all strings or UInt8) on addr.
func queryText(t *testing.T, addr, q string, ncols int) [][]string {
	t.Helper()
	conn := rawConn(t, addr)
	rs, err := conn.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("%v\n%s", err, q)
	}
	defer rs.Close()
	var out [][]string
	for rs.Next() {
		cells := make([]any, ncols)
		texts := make([]string, ncols/2)
		flags := make([]uint8, ncols/2)
		for i := range texts {
			cells[2*i], cells[2*i+1] = &texts[i], &flags[i]
		}
		if err := rs.Scan(cells...); err != nil {
			t.Fatal(err)
		}
		r := make([]string, ncols)
		for i := range texts {
			r[2*i], r[2*i+1] = texts[i], strconv.Itoa(int(flags[i]))
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// chdbScript runs the statements given on stdin (a JSON list) in one chdb
// session (PyPI's chdb: a current ClickHouse in-process) in the directory
// argv[1] and prints the last one's output.
const chdbScript = `
import json, sys
import chdb.session as cs
s = cs.Session(sys.argv[1])
out = ""
for q in json.load(sys.stdin):
    out = s.query(q, "TabSeparatedRaw")
sys.stdout.write(str(out))
`

// TestTypesModernServer checks what 18.16 cannot show, on a current
// ClickHouse (chdb, in-process): the DDL of `cdcjoin ddl` for a current
// server (Date32, DateTime64(6, 'UTC'), Bool, UUID, Decimal(P, S),
// Array(Nullable(T))) creates the table, the joined rows of the type
// fixtures (schemas on and off), converted by the sink's column buffers
// and encoded by the driver exactly as an INSERT sends them (Native
// format), load into it, and what the server shows back is identical for
// both modes and equals testdata/types-modern.golden.
func TestTypesModernServer(t *testing.T) {
	python := testenv.Require(t, testenv.ChdbEnv, "chdb (current ClickHouse)")
	var got []string
	for _, fx := range typeFixtures {
		cfg, types, changes := fixtureJoin(t, fx.config, fx.records, fx.prefix)
		cfg, err := cfg.WithClickHouse("127.0.0.1:9000") // not contacted
		if err != nil {
			t.Fatal(err)
		}
		srv := LatestServer()
		stmts, err := DDL(cfg, types, srv)
		if err != nil {
			t.Fatal(err)
		}
		colTypes := ColumnTypes(cfg, types, nil, srv)
		native := nativeInsert(t, cfg, colTypes, changes)
		dir := t.TempDir()
		file := filepath.Join(dir, "rows.native")
		if err := os.WriteFile(file, native, 0o644); err != nil {
			t.Fatal(err)
		}
		table := tableName(cfg.ClickHouse)
		stmts = append(stmts,
			fmt.Sprintf("INSERT INTO %s SELECT * FROM file('%s', Native)", table, file),
			readBackSQL(cfg, cfg.ClickHouse.Table, true))
		out := runChdb(t, python, filepath.Join(dir, "db"), stmts)
		var rows [][]string
		for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			cells := strings.Split(line, "\t")
			if len(cells) != 2*len(colTypes) {
				t.Fatalf("%s: line with %d cells: %q", fx.mode, len(cells), line)
			}
			for i := 0; i < len(cells); i += 2 {
				b, err := hex.DecodeString(cells[i])
				if err != nil {
					t.Fatal(err)
				}
				cells[i] = string(b)
			}
			rows = append(rows, cells)
		}
		if len(rows) != len(changes) {
			t.Errorf("%s: %d rows read back, %d written", fx.mode, len(rows), len(changes))
		}
		got = append(got, renderRows(cfg.OutputNames(), colTypes, rows))
	}
	if got[0] != got[1] {
		t.Errorf("schemas on and off differ:\n%s\nvs\n%s", got[0], got[1])
	}
	checkGolden(t, "testdata/types-modern.golden", got[0])
}

// nativeInsert converts changes with the sink's column buffers (as Write
// does) and encodes them with the driver's block encoder in the column
// order of the sink's INSERT (select columns, _pk, _ck, _version,
// _deleted): the Native format.
func nativeInsert(t *testing.T, cfg *config.Config, colTypes []string, changes []row.Change) []byte {
	t.Helper()
	s := &Sink{chc: cfg.ClickHouse, names: cfg.OutputNames()}
	for _, ct := range colTypes {
		p, err := parseType(ct)
		if err != nil {
			t.Fatal(err)
		}
		s.types = append(s.types, p)
	}
	b := s.newBatch()
	for i := range changes {
		if err := b.add(s, &changes[i]); err != nil {
			t.Fatal(err)
		}
	}
	blk := proto.NewBlock()
	data := make([]any, 0, len(colTypes)+4)
	types := append(append([]string(nil), colTypes...), "String", "String", "UInt64", "UInt8")
	names := append(cfg.OutputNames(), colPK, colCK, colVersion, colDeleted)
	for _, c := range b.cols {
		data = append(data, c.data())
	}
	data = append(data, b.pk, b.ck, b.ver, b.deleted)
	for i, n := range names {
		if err := blk.AddColumn(n, chcolumn.Type(types[i])); err != nil {
			t.Fatal(err)
		}
		if _, err := blk.Columns[i].Append(data[i]); err != nil {
			t.Fatalf("column %s %s: %v", n, types[i], err)
		}
	}
	var buf chproto.Buffer
	if err := blk.Encode(&buf, 0); err != nil {
		t.Fatal(err)
	}
	return buf.Buf
}

func runChdb(t *testing.T, python, dir string, stmts []string) string {
	t.Helper()
	in, err := json.Marshal(stmts)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-c", chdbScript, dir)
	cmd.Stdin = strings.NewReader(string(in))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chdb: %v\n%s\nstatements:\n%s", err, stderr.String(), strings.Join(stmts, ";\n"))
	}
	return string(out)
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if string(want) != got {
		wl, gl := strings.Split(string(want), "\n"), strings.Split(got, "\n")
		for i := range max(len(wl), len(gl)) {
			if i >= len(wl) || i >= len(gl) || wl[i] != gl[i] {
				t.Fatalf("%s differs at line %d:\n got: %s\nwant: %s\n(go test -run %s -update rewrites it)",
					path, i+1, at(gl, i), at(wl, i), t.Name())
			}
		}
	}
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(end)"
}

// TestTypeConversions: values that a column type cannot hold are errors
// naming what can, never a silent wrap, rounding or overflow.
func TestTypeConversions(t *testing.T) {
	for _, tc := range []struct {
		typ  string
		v    row.Value
		want string // error substring; "" for success
	}{
		{"Date", row.Date(-5171), "use Date32"},
		{"Date", row.Date(65535), ""},
		{"Date", row.Date(65536), "outside Date's range"},
		{"Date32", row.Date(-5171), ""},
		{"Date32", row.Date(-25568), "outside Date32's range (1900-01-01 to 2299-12-31)"},
		{"Date32", row.Date(120530), "outside Date32's range"},
		{"Int32", row.Date(-5171), ""},
		{"DateTime64(6, 'UTC')", row.Timestamp(-2208988800000000), ""},
		{"DateTime64(6, 'UTC')", row.Timestamp(-2208988800000001), "outside the range"},
		{"DateTime64(6, 'UTC')", row.Timestamp(10413791999999999), "outside the range"}, // 2299-12-31 23:59:59.999999
		{"DateTime64(6, 'UTC')", row.Timestamp(9223372036854775), ""},
		{"DateTime64(3)", row.Timestamp(1001), "more digits than DateTime64(3)"},
		{"DateTime64(3)", row.Timestamp(1000), ""},
		{"DateTime64(6)", row.Date(-1), ""},
		{"DateTime", row.Timestamp(1_500_000), "fractions of a second"},
		{"DateTime", row.Timestamp(-1_000_000), "outside DateTime's range"},
		{"DateTime", row.Timestamp(1_000_000), ""},
		{"Float32", row.Float(math.NaN()), ""},
		{"Float32", row.Float(math.Inf(-1)), ""},
		{"Float32", row.Float(1e300), "out of Float32's range"},
		{"Float64", row.Float(math.Inf(1)), ""},
		{"Decimal(12, 4)", row.Decimal("-99999999.9999"), ""},
		{"Decimal(12, 4)", row.Decimal("1.23456"), "5 fraction digits"},
		{"Decimal(12, 4)", row.Decimal("123456789.0"), "9 integer digits"},
		{"Decimal(12, 4)", row.Float(math.NaN()), "no Decimal value"},
		{"Decimal(12, 4)", row.Decimal("1.50000"), ""},
		{"Decimal64(2)", row.Int(5), ""},
		{"Bool", row.Bool(true), ""},
		{"Bool", row.Int(2), "cannot store"},
		{"UUID", row.String("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), ""},
		{"Array(Nullable(Int32))", row.Array([]row.Value{row.Int(1), row.Null()}), ""},
		{"Array(Nullable(Int32))", row.Null(), ""},
		{"Array(Int32)", row.Array([]row.Value{row.Null()}), "element 1: NULL"},
		{"Array(Nullable(Int16))", row.Array([]row.Value{row.Int(1 << 20)}), "element 1"},
		{"Array(Nullable(Date32))", row.Array([]row.Value{row.Date(-5171)}), ""},
		{"Array(Nullable(Int32))", row.Int(1), "cannot store a int value"},
		{"String", row.Array([]row.Value{row.Int(1), row.Null()}), ""},
	} {
		ct, err := parseType(tc.typ)
		if err != nil {
			t.Fatal(err)
		}
		err = newColumn(ct).put(0, tc.v)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s ← %s: %v", tc.typ, tc.v.Text(), err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s ← %s: err %v, want %q", tc.typ, tc.v.Text(), err, tc.want)
		}
	}
	// What the buffers hand to the driver.
	c := newColumn(colType{base: tArray, elem: &colType{base: tInt32, nullable: true}})
	for i, v := range []row.Value{row.Array([]row.Value{row.Int(1), row.Null(), row.Int(-3)}), row.Null()} {
		if err := c.put(i, v); err != nil {
			t.Fatal(err)
		}
	}
	got := c.data().([][]*int32)
	if len(got) != 2 || len(got[0]) != 3 || *got[0][0] != 1 || got[0][1] != nil || *got[0][2] != -3 || len(got[1]) != 0 {
		t.Errorf("array data %v", got)
	}
	d := newColumn(colType{base: tDate32})
	if err := d.put(0, row.Date(-5171)); err != nil {
		t.Fatal(err)
	}
	if day := d.data().([]time.Time)[0]; day.Format("2006-01-02") != "1955-11-05" || day.Location() != time.UTC {
		t.Errorf("Date32 1955-11-05 → %v", day)
	}
}

// TestColumnTypesServers: the same types on 18.16 and on a current server.
func TestColumnTypesServers(t *testing.T) {
	cfg, types, _ := fixtureJoin(t, typeFixtures[0].config, typeFixtures[0].records, typeFixtures[0].prefix)
	for name, srv := range map[string]Server{"18.16": {18, 16}, "current": LatestServer()} {
		got := strings.Join(ColumnTypes(cfg, types, nil, srv), "\n") + "\n"
		checkGolden(t, "testdata/columns-"+name+".golden", got)
	}
}

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

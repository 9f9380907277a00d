package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/row"
)

const testDB = "cdcjoin_test"

var tableSeq atomic.Int64

// testConfig returns a validated configuration writing to a fresh table.
func testConfig(t testing.TB, addr, mode, join string, extra string) *config.Config {
	t.Helper()
	table := fmt.Sprintf("t_%s_%d_%d", mode, time.Now().UnixNano()%1e9, tableSeq.Add(1))
	y := fmt.Sprintf(`
name: test
join: %s
parent: {topic: users, key: id}
child: {topic: domains, key: id, parent_key: user_id}
select: parent.id AS user_id, parent.name AS user_name, child.id AS domain_id, child.domain AS domain, child.amount AS amount, child.created AS created
state: {dir: /tmp/unused}
clickhouse:
  addr: [%q]
  database: %s
  table: %s
  mode: %s
  batch: {rows: 37, interval: 20ms}
  retry: {initial: 20ms, max: 500ms, max_elapsed: 2m}
%s`, join, addr, testDB, table, mode, extra)
	cfg, err := config.Parse([]byte(y), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// testTypes are the Debezium types of testConfig's select list.
func testTypes() []row.ColumnType {
	return []row.ColumnType{
		{Kind: row.KindInt, Connect: "int64"},
		{Kind: row.KindString, Connect: "string", Optional: true},
		{Kind: row.KindInt, Connect: "int32"},
		{Kind: row.KindString, Connect: "string"},
		{Kind: row.KindDecimal, Connect: "bytes", Logical: "org.apache.kafka.connect.data.Decimal", Scale: 2, Precision: 10, Optional: true},
		{Kind: row.KindTimestamp, Connect: "int64", Logical: "io.debezium.time.MicroTimestamp", Optional: true},
	}
}

func rawConn(t testing.TB, addr string) driver.Conn {
	t.Helper()
	conn, err := ch.Open(&ch.Options{Addr: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// model is the oracle: the live rows of the join by row key.
type model struct {
	rows    map[rowKey]mrow
	version uint64
}

type mrow struct {
	pk, ck []row.Value
	vals   []row.Value
	ver    uint64
}

func keyText(k []row.Value) string {
	if k == nil {
		return ""
	}
	return string(appendKey(nil, k))
}

// gen makes n random changes: upserts of new rows, updates (Prev filled),
// retractions, over a small key space so that rows are hit repeatedly;
// LEFT joins also produce padded rows (nil child key).
func (m *model) gen(r *rand.Rand, n int, left bool) []row.Change {
	out := make([]row.Change, 0, n)
	for len(out) < n {
		p := int64(r.IntN(20))
		var ck []row.Value
		if !left || r.IntN(5) != 0 {
			ck = []row.Value{row.Int(int64(r.IntN(15)))}
		}
		pk := []row.Value{row.Int(p)}
		k := rowKey{keyText(pk), keyText(ck)}
		m.version++
		old, live := m.rows[k]
		vals := m.values(r, p, ck)
		switch {
		case live && r.IntN(3) == 0:
			out = append(out, row.Change{Op: row.Retract, Version: m.version, ParentKey: pk, ChildKey: ck, Values: old.vals, PrevVersion: old.ver})
			delete(m.rows, k)
		case live:
			out = append(out, row.Change{Op: row.Upsert, Version: m.version, ParentKey: pk, ChildKey: ck, Values: vals, Prev: old.vals, PrevVersion: old.ver})
			m.rows[k] = mrow{pk, ck, vals, m.version}
		default:
			out = append(out, row.Change{Op: row.Upsert, Version: m.version, ParentKey: pk, ChildKey: ck, Values: vals})
			m.rows[k] = mrow{pk, ck, vals, m.version}
		}
	}
	return out
}

func (m *model) values(r *rand.Rand, p int64, ck []row.Value) []row.Value {
	name := row.String("user" + strconv.FormatInt(p, 10) + "_" + strconv.Itoa(r.IntN(100)))
	if r.IntN(7) == 0 {
		name = row.Null()
	}
	if ck == nil {
		return []row.Value{row.Int(p), name, row.Null(), row.Null(), row.Null(), row.Null()}
	}
	amount := row.Decimal(fmt.Sprintf("%d.%02d", r.IntN(100000)-50000, r.IntN(100)))
	if strings.HasPrefix(amount.Str, "-0.") {
		amount.Str = amount.Str[1:]
	}
	if r.IntN(6) == 0 {
		amount = row.Null()
	}
	created := row.Timestamp(1700000000000000 + int64(r.IntN(1<<30)))
	if r.IntN(6) == 0 {
		created = row.Null()
	}
	dom := []string{"", "a.com", "b'q.org", `back\slash.net`, "x"}[r.IntN(5)] + strconv.Itoa(r.IntN(9))
	return []row.Value{row.Int(p), name, ck[0], row.String(dom), amount, created}
}

// expected renders the model's live rows like selectSQL does.
func (m *model) expected(srv Server) []string {
	var out []string
	for _, r := range m.rows {
		cells := make([]string, len(r.vals))
		for i, v := range r.vals {
			switch {
			case v.IsNull():
				cells[i] = "NULL"
			case v.Kind == row.KindTimestamp:
				cells[i] = strconv.FormatInt(v.Int, 10)
			default:
				cells[i] = v.Text()
			}
		}
		out = append(out, strings.Join(cells, "|"))
	}
	slices.Sort(out)
	return out
}

// selectCols renders the select columns as text, timestamps as microseconds.
func selectCols(srv Server) string {
	created := "created"
	if srv.HasDateTime64() {
		created = "toUnixTimestamp64Micro(created)"
	}
	return "ifNull(toString(user_id), 'NULL'), ifNull(toString(user_name), 'NULL'), ifNull(toString(domain_id), 'NULL'), " +
		"ifNull(toString(domain), 'NULL'), ifNull(toString(amount), 'NULL'), ifNull(toString(" + created + "), 'NULL')"
}

func queryRows(t testing.TB, conn driver.Conn, q string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		cells := make([]string, 6)
		ptrs := make([]any, 6)
		for i := range cells {
			ptrs[i] = &cells[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		out = append(out, strings.Join(cells, "|"))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// actual reads the live join back: the _current view (upsert) or the rows
// whose _sign sums to a positive number (changelog).
func actual(t testing.TB, conn driver.Conn, cfg *config.Config, srv Server) []string {
	c := cfg.ClickHouse
	if c.Mode == config.ModeUpsert {
		return queryRows(t, conn, fmt.Sprintf("SELECT %s FROM %s.%s", selectCols(srv), c.Database, ViewName(c)))
	}
	// Group by the text renderings: 18.16 crashes (SIGSEGV in
	// ColumnDecimal<Decimal128>::deserializeAndInsertFromArena) when grouping
	// by a Nullable(Decimal(38, s)) column.
	q := fmt.Sprintf("SELECT %s FROM %s.%s GROUP BY _pk, _ck, %s HAVING sum(_sign) ", selectCols(srv), c.Database, c.Table, selectCols(srv))
	if bad := queryRows(t, conn, q+"NOT IN (0, 1)"); len(bad) > 0 {
		t.Errorf("changelog rows whose _sign sums to neither 0 nor 1: %q", bad)
	}
	return queryRows(t, conn, q+"> 0")
}

func compare(t testing.TB, seed uint64, got, want []string) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	var diff []string
	for _, w := range want {
		if !slices.Contains(got, w) {
			diff = append(diff, "missing "+w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			diff = append(diff, "extra   "+g)
		}
	}
	if len(diff) > 20 {
		diff = diff[:20]
	}
	t.Fatalf("seed %d: ClickHouse has %d live rows, the model %d:\n%s", seed, len(got), len(want), strings.Join(diff, "\n"))
}

func seed(t testing.TB) uint64 {
	if s := os.Getenv("CDCJOIN_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

func openSink(t testing.TB, cfg *config.Config, types []row.ColumnType) *Sink {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, cfg, Options{Types: types})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func writeAll(t testing.TB, s *Sink, r *rand.Rand, changes []row.Change) {
	t.Helper()
	ctx := context.Background()
	for len(changes) > 0 {
		n := min(1+r.IntN(60), len(changes))
		if err := s.Write(ctx, changes[:n]); err != nil {
			t.Fatal(err)
		}
		changes = changes[n:]
		if r.IntN(20) == 0 {
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestOracle(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	for _, mode := range []string{config.ModeUpsert, config.ModeChangelog} {
		for _, join := range []string{"inner", "left"} {
			for _, schemaless := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/schemaless=%v", mode, join, schemaless), func(t *testing.T) {
					sd := seed(t)
					t.Logf("seed %d (rerun with CDCJOIN_SEED=%d)", sd, sd)
					r := rand.New(rand.NewPCG(sd, 0))
					extra := ""
					types := testTypes()
					if schemaless {
						// no schema: amount and created must be typed by hand to compare
						extra = "  columns: {amount: \"Nullable(Decimal(38, 2))\", created: \"Nullable(Int64)\"}\n"
						types = nil
					}
					cfg := testConfig(t, addr, mode, join, extra)
					s := openSink(t, cfg, types)
					m := &model{rows: map[rowKey]mrow{}}
					var all []row.Change
					for range 5 {
						cs := m.gen(r, 400, join == "left")
						all = append(all, cs...)
						writeAll(t, s, r, cs)
						compare(t, sd, actual(t, rawConn(t, addr), cfg, s.Server()), m.expected(s.Server()))
					}
					st := s.Stats()
					t.Logf("stats: %+v", st)
					if st.Rows == 0 || st.Batches == 0 {
						t.Fatalf("no rows counted: %+v", st)
					}
					if mode == config.ModeUpsert {
						// Replay everything through a new sink: nothing changes.
						s2 := openSink(t, cfg, types)
						writeAll(t, s2, r, all)
						compare(t, sd, actual(t, rawConn(t, addr), cfg, s.Server()), m.expected(s.Server()))
					}
				})
			}
		}
	}
}

func TestDDLOnServer(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	conn := rawConn(t, addr)
	ctx := context.Background()
	for _, mode := range []string{config.ModeUpsert, config.ModeChangelog} {
		cfg := testConfig(t, addr, mode, "left", "")
		s := openSink(t, cfg, testTypes())
		c := cfg.ClickHouse
		var engine string
		if err := conn.QueryRow(ctx, "SELECT engine FROM system.tables WHERE database = ? AND name = ?", c.Database, c.Table).Scan(&engine); err != nil {
			t.Fatal(err)
		}
		want := "ReplacingMergeTree"
		if mode == config.ModeChangelog {
			want = "VersionedCollapsingMergeTree"
		}
		if engine != want {
			t.Errorf("%s: engine %s, want %s", mode, engine, want)
		}
		var views uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name = ?", c.Database, ViewName(c)).Scan(&views); err != nil {
			t.Fatal(err)
		}
		if (views == 1) != (mode == config.ModeUpsert) {
			t.Errorf("%s: %d views named %s", mode, views, ViewName(c))
		}
		var typ string
		if err := conn.QueryRow(ctx, "SELECT type FROM system.columns WHERE database = ? AND table = ? AND name = 'domain'", c.Database, c.Table).Scan(&typ); err != nil {
			t.Fatal(err)
		}
		if typ != "Nullable(String)" { // LEFT join: child columns are padded with NULL
			t.Errorf("domain: type %s, want Nullable(String)", typ)
		}
		stmts, err := DDL(cfg, testTypes(), s.Server())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("DDL on %v:\n%s", s.Server(), strings.Join(stmts, ";\n"))
		s.Close()

		// The same table opened in the other mode is a clear error.
		other := *cfg
		och := *c
		och.Mode = map[string]string{config.ModeUpsert: config.ModeChangelog, config.ModeChangelog: config.ModeUpsert}[mode]
		other.ClickHouse = &och
		_, err = Open(ctx, &other, Options{Types: testTypes()})
		if err == nil || !strings.Contains(err.Error(), "engine is "+want) {
			t.Errorf("opening a %s table in mode %s: err %v, want an engine mismatch", mode, och.Mode, err)
		}
	}

	// A hand-made table missing columns.
	cfg := testConfig(t, addr, config.ModeUpsert, "inner", "  create_table: false\n")
	c := cfg.ClickHouse
	if err := conn.Exec(ctx, fmt.Sprintf("CREATE TABLE %s.%s (user_id Int64, _pk String, _ck String, _version UInt64) ENGINE = ReplacingMergeTree(_version) ORDER BY (_pk, _ck)", c.Database, c.Table)); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctx, cfg, Options{Types: testTypes()})
	for _, want := range []string{"column _deleted is missing", "column user_name (select output) is missing", "column created (select output) is missing"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v, want it to mention %q", err, want)
		}
	}
}

// scriptPath is deploy/local/clickhouse.sh.
func scriptPath(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "local", "clickhouse.sh")
}

func script(t testing.TB, arg string) {
	t.Helper()
	out, err := exec.Command(scriptPath(t), arg).CombinedOutput()
	if err != nil {
		t.Fatalf("clickhouse.sh %s: %v\n%s", arg, err, out)
	}
}

// TestServerRestart stops ClickHouse (deploy/local/clickhouse.sh down) while
// the sink is writing and starts it again: Flush returns only once every
// change is in, and the table equals the model.
func TestServerRestart(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	if err := exec.Command(scriptPath(t), "status").Run(); err != nil {
		testenv.Unavailable(t, "ClickHouse at %s was not started by deploy/local/clickhouse.sh; cannot restart it", addr)
	}
	for _, mode := range []string{config.ModeUpsert, config.ModeChangelog} {
		t.Run(mode, func(t *testing.T) {
			sd := seed(t)
			t.Logf("seed %d", sd)
			r := rand.New(rand.NewPCG(sd, 1))
			cfg := testConfig(t, addr, mode, "left", "")
			s := openSink(t, cfg, testTypes())
			m := &model{rows: map[rowKey]mrow{}}
			writeAll(t, s, r, m.gen(r, 300, true))

			script(t, "down")
			restarted := false
			defer func() {
				if !restarted {
					script(t, "up")
				}
			}()
			// Writes continue while the server is down: batches queue and retry,
			// then Write blocks (back-pressure).
			done := make(chan error, 1)
			more := m.gen(r, 300, true)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				for i := 0; i < len(more); i += 25 {
					if err := s.Write(ctx, more[i:min(i+25, len(more))]); err != nil {
						done <- err
						return
					}
				}
				done <- s.Flush(ctx)
			}()
			time.Sleep(1500 * time.Millisecond)
			script(t, "up")
			restarted = true
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			compare(t, sd, actual(t, rawConn(t, addr), cfg, s.Server()), m.expected(s.Server()))
			if st := s.Stats(); st.Retries == 0 {
				t.Errorf("no retries counted across a restart: %+v", st)
			} else {
				t.Logf("stats: %+v", st)
			}
		})
	}
}

// BenchmarkInsertChangelog1M writes 1M new rows (changelog mode, one row per
// change) per iteration and reports rows/s into ClickHouse.
func BenchmarkInsertChangelog1M(b *testing.B) {
	addr := testenv.Require(b, testenv.ClickHouseEnv, "ClickHouse")
	const n = 1_000_000
	changes := make([]row.Change, n)
	for i := range changes {
		p := int64(i / 10)
		changes[i] = row.Change{
			Op: row.Upsert, Version: uint64(i + 1),
			ParentKey: []row.Value{row.Int(p)},
			ChildKey:  []row.Value{row.Int(int64(i))},
			Values: []row.Value{row.Int(p), row.String("user" + strconv.FormatInt(p, 10)), row.Int(int64(i)),
				row.String("d" + strconv.Itoa(i) + ".example.com"), row.Decimal(strconv.Itoa(i%10000) + ".25"), row.Timestamp(1700000000000000 + int64(i))},
		}
	}
	var total time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		cfg := testConfig(b, addr, config.ModeChangelog, "inner", "")
		cfg.ClickHouse.Batch.Rows = 50000
		cfg.ClickHouse.Batch.Interval = 200 * time.Millisecond
		s := openSink(b, cfg, testTypes())
		b.StartTimer()
		start := time.Now()
		for i := 0; i < n; i += 10000 {
			if err := s.Write(context.Background(), changes[i:i+10000]); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		b.StopTimer()
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "rows/s")
}

// TestCloseStopsGoroutines: Close stops the ticker and the workers (and the
// driver's connections); later calls return ErrClosed.
func TestCloseStopsGoroutines(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	before := runtime.NumGoroutine()
	cfg := testConfig(t, addr, config.ModeUpsert, "inner", "")
	s, err := Open(context.Background(), cfg, Options{Types: testTypes()})
	if err != nil {
		t.Fatal(err)
	}
	m := &model{rows: map[rowKey]mrow{}}
	r := rand.New(rand.NewPCG(1, 2))
	if err := s.Write(context.Background(), m.gen(r, 100, false)); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Write(context.Background(), m.gen(r, 1, false)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	if err := s.Flush(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush after Close: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second) // driver connections close asynchronously
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// TestNullDoesNotType: a table created from values (no schema, no declared
// type) is not created while a column has only NULLs: the sink reports
// which columns wait for a value or a declaration (UntypedError) instead
// of typing them Nullable(String) (before: a NULL in the first row of the
// first batch made a date column text in one run and Int64 in the next).
// Once a value is there, the column gets that value's type.
func TestNullDoesNotType(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	cfg := testConfig(t, addr, config.ModeUpsert, "inner", "")
	ctx := context.Background()
	change := func(created row.Value) row.Change {
		return row.Change{Op: row.Upsert, Version: 1, ParentKey: []row.Value{row.Int(1)}, ChildKey: []row.Value{row.Int(2)},
			Values: []row.Value{row.Int(1), row.String("u"), row.Int(2), row.String("d"), row.Int(7), created}}
	}
	s := openSink(t, cfg, nil)
	err := s.Write(ctx, []row.Change{change(row.Null())})
	var ue *UntypedError
	if !errors.As(err, &ue) || len(ue.Columns) != 1 || ue.Columns[0] != "created" {
		t.Fatalf("a NULL-only column: Write returned %v, want an UntypedError naming created", err)
	}
	t.Logf("%v", err)
	s2 := openSink(t, cfg, nil)
	if err := s2.Write(ctx, []row.Change{change(row.Null()), change(row.Int(19000))}); err != nil {
		t.Fatal(err)
	}
	if err := s2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var typ string
	if err := rawConn(t, addr).QueryRow(ctx, "SELECT type FROM system.columns WHERE database = ? AND table = ? AND name = 'created'", testDB, cfg.ClickHouse.Table).Scan(&typ); err != nil {
		t.Fatal(err)
	}
	if typ != "Nullable(Int64)" {
		t.Errorf("created typed %s, want Nullable(Int64) from its value", typ)
	}
}

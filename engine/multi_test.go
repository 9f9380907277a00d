package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/jackc/pgx/v5"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// The multi-table oracle: seeded histories of four tables (cdcgen
// Schema4: every hard case at every table) replayed through plans of
// three and four tables — chains and stars, INNER/LEFT/RIGHT/FULL at each
// join, conditions in ON and WHERE, a many-to-many self-join on a non-key
// column — with crashes and restarts; the final output (the upsert sink
// model and the state's Final) must equal, as a multiset, what PostgreSQL
// answers to the same query over the final tables.

var multiQueries = testkit.MultiQueries

func multiConfig(t testing.TB, sql string) *config.Config {
	t.Helper()
	cfg := sqlConfig(t, sql)
	if cfg.Plan() == nil {
		t.Fatal("not a plan")
	}
	return cfg
}

// sqlConfig is the job of sql over the Schema4 tables it names.
func sqlConfig(t testing.TB, sql string) *config.Config {
	t.Helper()
	y := testkit.SQLJob("multi", sql) + "state: {dir: /state, batch_events: 100}\n"
	cfg, err := config.Parse([]byte(y), "multi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// multiSink is the upsert sink model: per row key the highest version
// wins; a retraction deletes.
type multiSink struct {
	names   []string
	rows    map[string]multiRow
	crashed bool
	drop    int // negative control: drop every drop-th retraction
	n       int
}

type multiRow struct {
	ver     uint64
	deleted bool
	obj     string
}

func jsonObject(names []string, vals []row.Value) string {
	return string(row.AppendJSONObject(nil, names, vals))
}

func (m *multiSink) emit(c *row.Change) error {
	k := string(row.AppendKey(row.AppendKey(nil, c.ParentKey), c.ChildKey))
	old, ok := m.rows[k]
	if ok && c.Version <= old.ver {
		if c.Version == old.ver || m.crashed {
			return nil // a replay after a crash
		}
		return fmt.Errorf("version regression for a row: v%d after v%d", c.Version, old.ver)
	}
	if c.Op == row.Retract && m.drop > 0 {
		m.n++
		if m.n%m.drop == 0 {
			return nil
		}
	}
	m.rows[k] = multiRow{ver: c.Version, deleted: c.Op == row.Retract, obj: jsonObject(m.names, c.Values)}
	return nil
}

func (m *multiSink) live() []string {
	var out []string
	for _, r := range m.rows {
		if !r.deleted {
			out = append(out, r.obj)
		}
	}
	return canonical(out)
}

// canonical re-encodes JSON objects (PostgreSQL's row_to_json and ours
// escape differently) and sorts them: a multiset.
func canonical(objs []string) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		dec := json.NewDecoder(strings.NewReader(o))
		dec.UseNumber()
		var kv []string
		tok, err := dec.Token()
		if err != nil || tok != json.Delim('{') {
			out = append(out, "BAD "+o)
			continue
		}
		for dec.More() {
			k, _ := dec.Token()
			var v any
			if err := dec.Decode(&v); err != nil {
				kv = append(kv, "BAD")
				break
			}
			b, _ := json.Marshal(v)
			kv = append(kv, fmt.Sprintf("%v=%s", k, b))
		}
		out = append(out, strings.Join(kv, " "))
	}
	sort.Strings(out)
	return out
}

// postgresAnswer loads tables into a fresh schema and returns the query's
// rows as JSON objects.
func postgresAnswer(t *testing.T, conn *pgx.Conn, schema string, tables cdcgen.MultiTables, sql string) []string {
	t.Helper()
	ctx := context.Background()
	stmts := append([]string{"DROP SCHEMA IF EXISTS " + schema + " CASCADE", "CREATE SCHEMA " + schema},
		tables.SQL(cdcgen.Schema4(), schema)...)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("postgres: %s: %v", s[:min(len(s), 80)], err)
		}
	}
	defer conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	if _, err := conn.Exec(ctx, "SET search_path TO "+schema); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, "SELECT row_to_json(q)::text FROM ("+sql+") q")
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	defer rows.Close()
	return canonical(testkit.Strings(t, rows))
}

func multiSeeds(t *testing.T) []int64 {
	ss := seeds(t)
	if testing.Short() && *flagSeed == 0 {
		ss = ss[:1]
	}
	return ss
}

// multiQueryNames returns the names of multiQueries, sorted.
func multiQueryNames() []string {
	names := make([]string, 0, len(multiQueries))
	for n := range multiQueries {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// TestMultiOracle replays seeded four-table histories through every query
// of multiQueries, crashing and restarting at random points, and compares
// the result with PostgreSQL's.
func TestMultiOracle(t *testing.T) {
	dsn := testenv.Require(t, testenv.PostgresEnv, "PostgreSQL oracle")
	for _, name := range multiQueryNames() {
		for _, seed := range multiSeeds(t) {
			t.Run(fmt.Sprintf("%s/seed=%d", name, seed), func(t *testing.T) {
				t.Parallel()
				runMulti(t, dsn, multiQueries[name], seed, true, 0)
			})
		}
	}
}

// TestMultiOracleNegativeControl: a sink that loses a retraction now and
// then must make the comparison fail.
func TestMultiOracleNegativeControl(t *testing.T) {
	dsn := testenv.Require(t, testenv.PostgresEnv, "PostgreSQL oracle")
	ft := &fakeT{T: t}
	runMulti(ft, dsn, multiQueries["chain-full-full"], 1000, false, 25)
	if !ft.failed {
		t.Fatal("losing every 25th retraction went unnoticed")
	}
}

type fakeT struct {
	*testing.T
	failed bool
	msg    string
}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

func runMulti(tt interface {
	Fatalf(string, ...any)
	Helper()
	Logf(string, ...any)
}, dsn, sql string, seed int64, crash bool, drop int) {
	if ft, ok := tt.(*fakeT); ok {
		defer func() {
			if r := recover(); r != nil && r != any(ft) {
				panic(r)
			}
		}()
	}
	t := tt.(interface{ Fatalf(string, ...any) })
	var T *testing.T
	switch x := tt.(type) {
	case *testing.T:
		T = x
	case *fakeT:
		T = x.T
	}
	opts := cdcgen.DefaultMultiOptions(seed)
	if testing.Short() {
		opts.Ops = 1000
	}
	if *flagOps > 0 {
		opts.Ops = *flagOps
	}
	h, err := cdcgen.GenerateMulti(opts)
	if err != nil {
		t.Fatalf("%v", err)
	}
	tt.Logf("seed %d: %s", seed, h.Stats)
	rng := rand.New(rand.NewSource(seed))
	cfg := multiConfig(T, sql)
	cfg.State.BatchEvents = 1 + rng.Intn(200)
	model := &multiSink{names: cfg.OutputNames(), rows: map[string]multiRow{}, drop: drop}
	fs := vfs.NewCrashableMem()
	ctx := context.Background()
	open := func(resume bool) *engine.Engine {
		e, err := engine.Open(cfg, engine.Options{Resume: resume, Sink: sink.Func(model.emit), FS: fs})
		if err != nil {
			t.Fatalf("seed %d: open: %v", seed, err)
		}
		return e
	}
	e := open(false)
	defer func() { e.Close() }()
	topics := map[string]bool{}
	for _, n := range cfg.TableNames() {
		topics[cfg.Tables[n].Topic] = true
	}
	crashAt := map[int]bool{}
	if crash {
		for i := 0; i < 4; i++ {
			crashAt[rng.Intn(len(h.Records))] = true
		}
	}
	for i := 0; i < len(h.Records); i++ {
		if crashAt[i] {
			delete(crashAt, i)
			crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
			e.Close()
			fs = crashed
			model.crashed = true
			e = open(true)
			i = -1
			continue
		}
		r := h.Records[i]
		if !topics[r.Topic] {
			continue // a table the query does not name: the job does not read its topic
		}
		rec := engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
		if err := e.Process(ctx, &rec); err != nil {
			t.Fatalf("seed %d: record %d (%s/%d@%d): %v", seed, i, r.Topic, r.Partition, r.Offset, err)
		}
	}
	if err := e.Commit(ctx); err != nil {
		t.Fatalf("%v", err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	defer conn.Close(ctx)
	schema := fmt.Sprintf("oracle_%d_%x", seed, uint32(fnv32(sql)))
	want := postgresAnswer(T, conn, schema, h.Final, sql)
	if d := testkit.MultisetDiff(want, model.live(), 20); d != "" {
		t.Fatalf("seed %d: the sink model differs from PostgreSQL's answer (- PostgreSQL, + cdcjoin; %d rows expected):\n%s", seed, len(want), d)
	}
	var final []string
	err = e.Final(func(_, _ []row.Value, vals []row.Value) error {
		final = append(final, jsonObject(cfg.OutputNames(), vals))
		return nil
	})
	if err != nil {
		t.Fatalf("%v", err)
	}
	if d := testkit.MultisetDiff(want, canonical(final), 20); d != "" {
		t.Fatalf("seed %d: Final differs from PostgreSQL's answer:\n%s", seed, d)
	}
	tt.Logf("seed %d: %d rows equal PostgreSQL's", seed, len(want))
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

package engine_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

var (
	flagSeeds = flag.Int("seeds", 0, "number of random histories per oracle test (default 30, 2 of 5,000 ops with -short)")
	flagSeed  = flag.Int64("seed", 0, "run only this seed (reproduce a failure)")
	flagOps   = flag.Int("ops", 0, "operations per history (default 20000)")
)

func seeds(t *testing.T) []int64 {
	if *flagSeed != 0 {
		return []int64{*flagSeed}
	}
	n := 30
	if testing.Short() {
		n = 2 // make test runs -short under -race, then all 30 seeds without it
	}
	if s := os.Getenv("CDCJOIN_ORACLE_SEEDS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	if *flagSeeds > 0 {
		n = *flagSeeds
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(1000 + i)
	}
	return out
}

func jobConfig(t testing.TB, join string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`
name: oracle
parent: {topic: `+cdcgen.DefaultParentTopic+`, key: id}
child:  {topic: `+cdcgen.DefaultChildTopic+`, key: id, parent_key: user_id}
join: `+join+`
select: parent.id AS user_id, parent.firstname, parent.lastname, child.id AS domain_id, child.domain_name
state: {dir: /state, batch_events: 100}
`), "oracle.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func text(v row.Value) string {
	if v.IsNull() || v.Kind == row.KindUnavailable {
		return cdcgen.Null
	}
	return v.Text()
}

// sinkModel applies changes to a ReplacingMergeTree model and checks the
// version invariant: per row key, a later emission has a strictly higher
// version, except an identical re-emission after a crash.
type sinkModel struct {
	rmt     *cdcgen.ReplacingMergeTree
	vcmt    *cdcgen.VersionedCollapsingMergeTree // the same changes in changelog mode
	last    map[cdcgen.RowKey]uint64
	crashed bool // a crash happened: replays may re-emit lower versions
	vals    []string
}

func newSinkModel() *sinkModel {
	return &sinkModel{rmt: cdcgen.NewReplacingMergeTree(), vcmt: cdcgen.NewVersionedCollapsingMergeTree(), last: map[cdcgen.RowKey]uint64{}}
}

func rowKey(c *row.Change) cdcgen.RowKey {
	k := cdcgen.RowKey{Parent: text(c.ParentKey[0])}
	if c.ChildKey == nil {
		k.Padded = true
	} else {
		k.Child = text(c.ChildKey[0])
	}
	return k
}

func (m *sinkModel) emit(c *row.Change) error {
	k := rowKey(c)
	if last, ok := m.last[k]; ok && c.Version <= last && !m.crashed {
		return fmt.Errorf("version regression for row %s: v%d after v%d", k, c.Version, last)
	}
	if c.Version > m.last[k] {
		m.last[k] = c.Version
	}
	m.vals = m.vals[:0]
	for _, v := range c.Values {
		m.vals = append(m.vals, text(v))
	}
	// Changelog mode (sink/clickhouse): a retraction cancels the row last
	// emitted; an update cancels the previous row and inserts the new one.
	switch {
	case c.Op == row.Retract:
		m.vcmt.Apply(k, c.PrevVersion, -1, m.vals)
	case c.Prev != nil:
		prev := make([]string, len(c.Prev))
		for i, v := range c.Prev {
			prev[i] = text(v)
		}
		m.vcmt.Apply(k, c.PrevVersion, -1, prev)
		m.vcmt.Apply(k, c.Version, +1, m.vals)
	default:
		m.vcmt.Apply(k, c.Version, +1, m.vals)
	}
	return m.rmt.Apply(k, c.Version, c.Op == row.Retract, append([]string(nil), m.vals...))
}

// changelog returns the live rows of the changelog model.
func (m *sinkModel) changelog(t *testing.T, seed int64) []cdcgen.JoinedRow {
	t.Helper()
	rows, err := m.vcmt.Live()
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	return rows
}

func oracle(t *testing.T, tables cdcgen.Tables, left bool) []cdcgen.JoinedRow {
	return cdcgen.Join(tables.Users, tables.Domains, left)
}

func check(t *testing.T, seed int64, what string, want, got []cdcgen.JoinedRow) {
	t.Helper()
	if d := cdcgen.Diff(want, got, 20); d != "" {
		t.Fatalf("seed %d: %s differs from the SQL join of the tables (-want +got); reproduce with -seed %d:\n%s", seed, what, seed, d)
	}
}

func materialized(t *testing.T, e *engine.Engine) []cdcgen.JoinedRow {
	var rows []cdcgen.JoinedRow
	err := e.Final(func(pk, ck, vals []row.Value) error {
		r := cdcgen.JoinedRow{Key: cdcgen.RowKey{Parent: text(pk[0])}}
		if ck == nil {
			r.Key.Padded = true
		} else {
			r.Key.Child = text(ck[0])
		}
		for _, v := range vals {
			r.Values = append(r.Values, text(v))
		}
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cdcgen.SortRows(rows)
	return rows
}

// TestOracle replays seeded random CDC histories (every hard case of NOTES
// §3, both schema modes, 3 partitions per topic) and compares the changes
// applied to a ReplacingMergeTree model, and the state itself, with the SQL
// join recomputed from the tables: at random checkpoints and at the end.
func TestOracle(t *testing.T) {
	for _, join := range []string{"inner", "left"} {
		for _, seed := range seeds(t) {
			t.Run(fmt.Sprintf("%s/seed=%d", join, seed), func(t *testing.T) {
				t.Parallel()
				runOracle(t, join, seed, false)
			})
		}
	}
}

// TestOracleCrashRestart is TestOracle with crashes: at random points the
// engine is dropped without committing (and the filesystem loses everything
// not synced), reopened with Resume and fed the input again from the start.
// The final result must still equal the oracle, and re-emitted rows must
// repeat the same versions with the same values.
func TestOracleCrashRestart(t *testing.T) {
	ss := seeds(t)
	if len(ss) > 10 {
		ss = ss[:10]
	}
	for _, join := range []string{"inner", "left"} {
		for _, seed := range ss {
			t.Run(fmt.Sprintf("%s/seed=%d", join, seed), func(t *testing.T) {
				t.Parallel()
				runOracle(t, join, seed, true)
			})
		}
	}
}

func runOracle(t *testing.T, join string, seed int64, crash bool) {
	runOracleWith(t, join, seed, crash, nil)
}

// runOracleWith is runOracle with tweak (if set) applied to the history's
// options and the job's configuration.
func runOracleWith(t *testing.T, join string, seed int64, crash bool, tweak func(*cdcgen.Options, *config.Config, *rand.Rand)) engine.Stats {
	opts := cdcgen.DefaultOptions(seed)
	if testing.Short() {
		opts.Ops = 5000
	}
	if *flagOps > 0 {
		opts.Ops = *flagOps
	}
	rng := rand.New(rand.NewSource(seed))
	cfg := jobConfig(t, join)
	if tweak != nil {
		tweak(&opts, cfg, rng)
	}
	h, err := cdcgen.Generate(opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg.State.BatchEvents = 1 + rng.Intn(500)
	left := join == "left"
	model := newSinkModel()
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

	// Checkpoints to compare at: a random sample plus the end.
	checkAt := map[int]int{}
	for i := 0; i < 8 && len(h.Checkpoints) > 0; i++ {
		c := rng.Intn(len(h.Checkpoints))
		checkAt[h.Checkpoints[c].Records] = c
	}
	crashAt := map[int]bool{}
	if crash {
		for i := 0; i < 5; i++ {
			crashAt[rng.Intn(len(h.Records))] = true
		}
	}
	for i := 0; i < len(h.Records); i++ {
		if crashAt[i] {
			delete(crashAt, i)
			// Crash: lose the uncommitted batch and anything unsynced, reopen,
			// and re-read the input from the beginning.
			crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
			e.Close()
			fs = crashed
			model.crashed = true
			e = open(true)
			i = -1
			continue
		}
		r := h.Records[i]
		rec := engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
		if err := e.Process(ctx, &rec); err != nil {
			t.Fatalf("seed %d: record %d (%s/%d@%d): %v", seed, i, r.Topic, r.Partition, r.Offset, err)
		}
		if c, ok := checkAt[i+1]; ok && !crash {
			// The sink sees changes in chunks, all of them by the commit.
			if err := e.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			tables, err := h.TablesAt(c)
			if err != nil {
				t.Fatal(err)
			}
			check(t, seed, fmt.Sprintf("sink model at checkpoint %d (record %d)", c, i+1), oracle(t, tables, left), model.rmt.Live())
			check(t, seed, fmt.Sprintf("changelog model at checkpoint %d (record %d)", c, i+1), oracle(t, tables, left), model.changelog(t, seed))
		}
	}
	if err := e.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want := oracle(t, h.Final, left)
	check(t, seed, "final sink model", want, model.rmt.Live())
	if !crash || cfg.State.Sync {
		// With sync off a crash here is an OS crash: it can lose the
		// state's first commit and with it the version epoch, and the
		// replay then emits other versions, which a changelog table
		// without insert deduplication cannot cancel (see state.sync).
		check(t, seed, "final changelog model", want, model.changelog(t, seed))
	}
	check(t, seed, "final state", want, materialized(t, e))
	if len(want) == 0 {
		t.Fatalf("seed %d: empty join: the test would prove nothing", seed)
	}
	return e.Stats()
}

// TestOraclePipeline runs histories through Engine.Run (decoding on a second
// goroutine) and checks the result against the oracle.
func TestOraclePipeline(t *testing.T) {
	ss := seeds(t)
	if len(ss) > 4 {
		ss = ss[:4]
	}
	for _, seed := range ss {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			h, err := cdcgen.Generate(cdcgen.DefaultOptions(seed))
			if err != nil {
				t.Fatal(err)
			}
			cfg := jobConfig(t, "left")
			model := newSinkModel()
			e, err := engine.Open(cfg, engine.Options{Sink: sink.Func(model.emit), FS: vfs.NewMem()})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			ctx := context.Background()
			err = e.Run(ctx, func(yield func(*engine.Record) error) error {
				var rec engine.Record
				for _, r := range h.Records {
					rec = engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
					if err := yield(&rec); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			want := oracle(t, h.Final, true)
			check(t, seed, "final sink model (pipeline)", want, model.rmt.Live())
			check(t, seed, "final state (pipeline)", want, materialized(t, e))
		})
	}
}

// TestRunStopsOnBadRecord: under policy stop, Run returns the bad record's
// error (naming its position) and both stages stop.
func TestRunStopsOnBadRecord(t *testing.T) {
	cfg := jobConfig(t, "inner")
	e, err := engine.Open(cfg, engine.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	n := 0
	err = e.Run(context.Background(), func(yield func(*engine.Record) error) error {
		for i := 0; i < 10000; i++ {
			rec := engine.Record{Topic: cdcgen.DefaultParentTopic, Partition: 0, Offset: int64(i),
				Value: []byte(`{"op":"c","after":{"id":` + strconv.Itoa(i) + `,"firstname":"a","lastname":"b"}}`)}
			if i == 700 {
				rec.Value = []byte(`{"op":"c","after":{"id":`)
			}
			n++
			if err := yield(&rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), cdcgen.DefaultParentTopic+"/0@700") {
		t.Fatalf("want an error naming %s/0@700, got %v", cdcgen.DefaultParentTopic, err)
	}
	if n == 10000 {
		t.Errorf("the reader was not stopped after the bad record")
	}
}

// TestRestartAfterAnyBatch stops the engine after random committed batches,
// reopens the state and continues with the next record: the final output
// equals the oracle and no row's version ever regresses (no crash, so no
// re-emission either).
func TestRestartAfterAnyBatch(t *testing.T) {
	for _, seed := range seeds(t)[:2] {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			h, err := cdcgen.Generate(cdcgen.DefaultOptions(seed))
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewSource(seed))
			cfg := jobConfig(t, "left")
			cfg.State.BatchEvents = 50
			model := newSinkModel() // crashed stays false: strict versions
			fs := vfs.NewMem()
			ctx := context.Background()
			e, err := engine.Open(cfg, engine.Options{Sink: sink.Func(model.emit), FS: fs})
			if err != nil {
				t.Fatal(err)
			}
			restarts := 0
			for i, r := range h.Records {
				rec := engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
				if err := e.Process(ctx, &rec); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				if (i+1)%cfg.State.BatchEvents == 0 && rng.Intn(20) == 0 {
					// Process just committed a batch: stop and reopen.
					if err := e.Close(); err != nil {
						t.Fatal(err)
					}
					if e, err = engine.Open(cfg, engine.Options{Resume: true, Sink: sink.Func(model.emit), FS: fs}); err != nil {
						t.Fatal(err)
					}
					restarts++
				}
			}
			if err := e.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if restarts == 0 {
				t.Fatal("no restart happened")
			}
			want := oracle(t, h.Final, true)
			check(t, seed, fmt.Sprintf("final sink model after %d restarts", restarts), want, model.rmt.Live())
			check(t, seed, "final state", want, materialized(t, e))
		})
	}
}

// TestOracleNegativeControl proves the oracle comparison can fail: the same
// history with one change event dropped must differ from the SQL join.
func TestOracleNegativeControl(t *testing.T) {
	opts := cdcgen.DefaultOptions(4242)
	opts.Ops = 3000
	opts.Redeliver = 0 // a redelivered copy would mask the dropped event
	h, err := cdcgen.Generate(opts)
	if err != nil {
		t.Fatal(err)
	}
	want := oracle(t, h.Final, false)
	for drop := len(h.Records) - 1; drop >= 0; drop-- {
		r := h.Records[drop]
		if r.Value == nil || r.Topic != cdcgen.DefaultChildTopic {
			continue
		}
		if d := cdcgen.Diff(want, replayDropping(t, h, drop), 3); d != "" {
			t.Logf("dropping record %d (%s/%d@%d) is detected:\n%s", drop, r.Topic, r.Partition, r.Offset, d)
			return
		}
	}
	t.Fatal("no dropped child event was ever detected: the comparison cannot fail")
}

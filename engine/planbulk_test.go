package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	randv2 "math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// A plan's snapshot loaded in bulk (engine/planbulk.go) against the same
// snapshot applied row by row: on seeded four-table histories (every hard
// case of cdcgen, snapshot reruns included) and every query of
// multiQueries (chains, stars, INNER/LEFT/RIGHT/FULL, filters, many to
// many), both must emit the same changes in the same order with the same
// versions, and leave the same pebble state, byte for byte, after the
// snapshot and after the whole history.

// planBulkHistory is a multi-table history whose snapshot is large next to
// its streaming part.
func planBulkHistory(t *testing.T, seed int64) *cdcgen.MultiHistory {
	t.Helper()
	opts := cdcgen.DefaultMultiOptions(seed)
	opts.Rows, opts.Ops = 150, 1500
	if testing.Short() {
		opts.Rows, opts.Ops = 60, 600
	}
	h, err := cdcgen.GenerateMulti(opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// multiSnapshotEnd is the index of the first record after the snapshot.
func multiSnapshotEnd(recs []cdcgen.Record) int {
	for i, r := range recs {
		if r.Op != 'r' && r.Op != 0 {
			return i
		}
	}
	return len(recs)
}

// planRecords returns the records of the tables cfg reads, the snapshot's
// interleaved across topics at random when shuffle (each partition's
// order kept), and where the snapshot ends.
func planRecords(cfg *config.Config, h *cdcgen.MultiHistory, rng *rand.Rand, shuffle bool) ([]engine.Record, int) {
	topics := map[string]bool{}
	for _, n := range cfg.TableNames() {
		topics[cfg.Tables[n].Topic] = true
	}
	var recs []engine.Record
	end := multiSnapshotEnd(h.Records)
	snap := 0
	for i, r := range h.Records {
		if topics[r.Topic] {
			recs = append(recs, engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value})
			if i < end {
				snap++
			}
		}
	}
	if shuffle {
		type tp struct {
			topic string
			part  int32
		}
		queues := map[tp][]engine.Record{}
		var order []tp
		for _, r := range recs[:snap] {
			k := tp{r.Topic, r.Partition}
			if _, ok := queues[k]; !ok {
				order = append(order, k)
			}
			queues[k] = append(queues[k], r)
		}
		out := recs[:0:0]
		for len(order) > 0 {
			i := rng.Intn(len(order))
			q := queues[order[i]]
			out = append(out, q[0])
			if queues[order[i]] = q[1:]; len(q) == 1 {
				order = slices.Delete(order, i, i+1)
			}
		}
		recs = append(out, recs[snap:]...)
	}
	return recs, snap
}

// planTrace is what one run of a plan did.
type planTrace struct {
	lines      []string          // every change, in order
	snapState  map[string]string // the state keyspaces after the snapshot
	finalState map[string]string // ... and after the whole history
	meta       map[string]string // metadata and positions at the end (dumpState)
	snapLines  int               // changes emitted by the snapshot
	bulk       uint64            // records bulk loaded (0: row by row)
	last       map[string]string // the last change of every row key
}

func rowKeyOf(c *row.Change) string {
	return fmt.Sprintf("%x", row.AppendKey(row.AppendKey(nil, c.ParentKey), c.ChildKey))
}

func changeLine(c *row.Change) string {
	b := fmt.Appendf(nil, "%d v%d p%d ", c.Op, c.Version, c.PrevVersion)
	return string(appendValues(appendValues(appendValues(appendValues(b, c.ParentKey), c.ChildKey), c.Values), c.Prev))
}

// dumpState reads the whole pebble state of e: the join state's keyspaces
// (parent, child, child index, parent index) and the rest (metadata,
// positions) but the batch and commit counts and the bulk flag, which
// differ between a bulk load and a row-by-row run by design.
func dumpState(t *testing.T, e *engine.Engine) (state, meta map[string]string) {
	t.Helper()
	it, err := e.Store().DB().NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	state, meta = map[string]string{}, map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		k := string(it.Key())
		switch k[0] {
		case 'P', 'C', 'I', 'J':
			state[k] = string(it.Value())
		default:
			if k != "Mbatches" && k != "Mbulk_load" && k != "Mcommits" {
				meta[k] = string(it.Value())
			}
		}
	}
	return state, meta
}

// planBulkRun options.
type planBulkRun struct {
	bulk  bool
	limit int    // the bulk load's memory limit in bytes (0: state.bulk_load_mb)
	drop  []byte // the negative control: rows the load leaves out
}

var planBulkNow = func() time.Time { return time.Unix(1_700_000_000, 0) }

// tracePlan runs recs (the snapshot recs[:snap]) through a new state.
func tracePlan(t *testing.T, cfg *config.Config, recs []engine.Record, snap int, o planBulkRun) *planTrace {
	t.Helper()
	c := *cfg
	c.State.BulkLoadMB = -1
	if o.bulk {
		c.State.BulkLoadMB = 256
	}
	tr := &planTrace{last: map[string]string{}}
	e, err := engine.Open(&c, engine.Options{FS: vfs.NewMem(), Now: planBulkNow, Sink: sink.Func(func(ch *row.Change) error {
		tr.lines = append(tr.lines, changeLine(ch))
		tr.last[rowKeyOf(ch)] = changeLine(ch)
		return nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Loading() != o.bulk {
		t.Fatalf("loading %v, want %v", e.Loading(), o.bulk)
	}
	engine.SetPlanBulkLimit(e, o.limit)
	if o.drop != nil {
		engine.SetPlanBulkDrop(e, o.drop)
	}
	ctx := context.Background()
	for i := range recs {
		if i == snap {
			if err := e.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			tr.snapState, _ = dumpState(t, e)
			tr.snapLines = len(tr.lines)
			tr.bulk = e.Stats().Bulk.Records
		}
		if err := e.Process(ctx, &recs[i]); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if err := e.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tr.finalState, tr.meta = dumpState(t, e)
	if o.drop != nil && engine.PlanBulkDropped(e) == 0 {
		t.Fatalf("the negative control dropped no rows of %q", o.drop)
	}
	return tr
}

// diffTraces describes the first difference between a row-by-row trace
// and a bulk one ("" if none).
func diffTraces(want, got *planTrace) string {
	if n, x, y, ok := firstLine(want.lines, got.lines); ok {
		return fmt.Sprintf("change %d of %d/%d differs:\n- %s\n+ %s", n, len(want.lines), len(got.lines), x, y)
	}
	for _, s := range []struct {
		name      string
		want, got map[string]string
	}{{"state after the snapshot", want.snapState, got.snapState}, {"final state", want.finalState, got.finalState}, {"metadata", want.meta, got.meta}} {
		if d := testkit.StateDiff(s.want, s.got); d != "" {
			return s.name + ": " + d
		}
	}
	return ""
}

// TestPlanBulkEquivalence: for every query and seed, the snapshot in table
// order and interleaved across topics, loaded in bulk whole and cut short
// by a small memory limit (the rest of it row by row, on the loaded
// state), gives exactly the row-by-row run's changes, versions and state.
func TestPlanBulkEquivalence(t *testing.T) {
	for _, name := range multiQueryNames() {
		for _, seed := range multiSeeds(t) {
			t.Run(fmt.Sprintf("%s/seed=%d", name, seed), func(t *testing.T) {
				t.Parallel()
				h := planBulkHistory(t, seed)
				cfg := multiConfig(t, multiQueries[name])
				rng := rand.New(rand.NewSource(seed))
				cfg.State.BatchEvents = 1 + rng.Intn(200)
				for _, shuffle := range []bool{false, true} {
					recs, snap := planRecords(cfg, h, rng, shuffle)
					want := tracePlan(t, cfg, recs, snap, planBulkRun{})
					if want.bulk != 0 || len(want.lines) == 0 || len(want.snapState) == 0 {
						t.Fatalf("seed %d: the row-by-row run bulk loaded %d records, emitted %d changes, %d state entries", seed, want.bulk, len(want.lines), len(want.snapState))
					}
					for _, o := range []planBulkRun{{bulk: true}, {bulk: true, limit: 1 + rng.Intn(20000)}} {
						got := tracePlan(t, cfg, recs, snap, o)
						if got.bulk == 0 || o.limit > 0 && got.bulk >= uint64(snap) {
							t.Fatalf("seed %d (shuffle %v, limit %d): %d of %d snapshot records bulk loaded", seed, shuffle, o.limit, got.bulk, snap)
						}
						if d := diffTraces(want, got); d != "" {
							t.Fatalf("seed %d (reproduce with -seed %d; shuffle %v, limit %d): bulk load (%d records) differs from row by row: %s",
								seed, seed, shuffle, o.limit, got.bulk, d)
						}
						t.Logf("seed %d (shuffle %v, limit %d): %d snapshot records, %d bulk loaded, %d changes and %d state entries identical",
							seed, shuffle, o.limit, snap, got.bulk, len(got.lines), len(got.finalState))
					}
				}
			})
		}
	}
}

// TestPlanBulkNegativeControl: a bulk load that leaves out one stage's
// rows is caught by the comparison.
func TestPlanBulkNegativeControl(t *testing.T) {
	const seed = 1000
	h := planBulkHistory(t, seed)
	cfg := multiConfig(t, multiQueries["chain-inner-left"])
	recs, snap := planRecords(cfg, h, rand.New(rand.NewSource(seed)), false)
	want := tracePlan(t, cfg, recs, snap, planBulkRun{})
	got := tracePlan(t, cfg, recs, snap, planBulkRun{bulk: true, drop: []byte{'s', 2, 'r'}})
	d := diffTraces(want, got)
	if d == "" {
		t.Fatal("a bulk load without stage 2's rows went unnoticed")
	}
	t.Logf("detected: %s", d)
}

// TestPlanBulkCrash: a bulk load crashed while loading, while handing its
// changes to the sink, and just after it ended, then resumed, converges:
// in changelog mode (every re-created batch compared change by change
// with its first delivery, and the batches in position order are exactly
// the row-by-row run's changes) and into the upsert sink (a replay never
// gives a (row, version) other values; the final rows are the row-by-row
// run's), with the row-by-row run's final state, byte for byte.
func TestPlanBulkCrash(t *testing.T) {
	for _, name := range []string{"chain-inner-left", "chain-full-full", "star-left-full", "chain4-outer", "many-to-many"} {
		for _, seed := range multiSeeds(t) {
			for _, mode := range []string{"changelog", "upsert"} {
				t.Run(fmt.Sprintf("%s/%s/seed=%d", name, mode, seed), func(t *testing.T) {
					t.Parallel()
					runPlanBulkCrash(t, multiQueries[name], mode, seed)
				})
			}
		}
	}
}

func runPlanBulkCrash(t *testing.T, sql, mode string, seed int64) {
	h := planBulkHistory(t, seed)
	cfg := multiConfig(t, sql)
	rng := rand.New(rand.NewSource(seed))
	cfg.State.BatchEvents = 1 + rng.Intn(200)
	recs, snap := planRecords(cfg, h, rng, true)
	want := tracePlan(t, cfg, recs, snap, planBulkRun{})

	bulk := *cfg
	bulk.State.BulkLoadMB = 256
	ps := newPositionedSink()
	pairs := map[string]string{} // row key @ version → line
	upsert := map[string]string{}
	upsertVer := map[string]uint64{}
	var target sink.Sink = ps
	if mode == "upsert" {
		target = sink.Func(func(c *row.Change) error {
			k := rowKeyOf(c)
			kv := fmt.Sprintf("%s@%d", k, c.Version)
			line := changeLine(c)
			if old, ok := pairs[kv]; ok && old != line {
				return fmt.Errorf("row %s at version %d emitted twice with different values:\n%s\n%s", k, c.Version, old, line)
			}
			pairs[kv] = line
			if v, ok := upsertVer[k]; !ok || c.Version >= v {
				upsert[k], upsertVer[k] = line, c.Version
			}
			return nil
		})
	}
	if want.snapLines == 0 {
		t.Fatalf("seed %d: the snapshot emits nothing", seed)
	}
	fail := &failingSink{next: target, n: rng.Intn(want.snapLines)}
	if mode == "changelog" {
		target = &failingPositioned{positionedSink: ps, fail: fail}
	} else {
		target = fail
	}
	fs := vfs.NewCrashableMem()
	ctx := context.Background()
	open := func(resume bool) *engine.Engine {
		e, err := engine.Open(&bulk, engine.Options{Resume: resume, Sink: target, FS: fs, Now: planBulkNow})
		if err != nil {
			t.Fatalf("seed %d: open: %v", seed, err)
		}
		return e
	}
	crash := func(e *engine.Engine, i int) *engine.Engine {
		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.Intn(100), RNG: randv2.New(randv2.NewPCG(uint64(seed), uint64(i)))})
		e.Close()
		fs = crashed
		return open(true)
	}
	e := open(false)
	defer func() { e.Close() }()
	if !e.Loading() {
		t.Fatal("a new plan state does not bulk load")
	}
	crashAt := map[int]bool{rng.Intn(snap): true, snap + 1 + rng.Intn(20): true}
	crashes, loaded := 0, uint64(0)
	for i := 0; i < len(recs); i++ {
		if crashAt[i] {
			delete(crashAt, i)
			e, i, crashes = crash(e, i), -1, crashes+1
			continue
		}
		wasLoading := e.Loading()
		err := e.Process(ctx, &recs[i])
		if errors.Is(err, errInjected) {
			if !wasLoading {
				t.Fatalf("seed %d: the sink failed outside the load", seed)
			}
			e, i, crashes = crash(e, i), -1, crashes+1
			continue
		}
		if err != nil {
			t.Fatalf("seed %d: record %d: %v", seed, i, err)
		}
		if wasLoading && !e.Loading() {
			loaded = e.Stats().Bulk.Records
		}
	}
	if err := e.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if len(crashAt) != 0 || !fail.fired || loaded == 0 {
		t.Fatalf("seed %d: crash points not reached: %v, sink failure %v, %d records bulk loaded", seed, crashAt, fail.fired, loaded)
	}
	state, meta := dumpState(t, e)
	if d := testkit.StateDiff(want.finalState, state); d != "" {
		t.Fatalf("seed %d: final state after crashes: %s", seed, d)
	}
	delete(meta, "Mstream") // a changelog state's stream name (the reference ran without one)
	if d := testkit.StateDiff(want.meta, meta); d != "" {
		t.Fatalf("seed %d: final metadata after crashes: %s", seed, d)
	}
	switch mode {
	case "changelog":
		if ps.diff != "" {
			t.Fatalf("seed %d: %s", seed, ps.diff)
		}
		froms := make([]int64, 0, len(ps.batches))
		for from := range ps.batches {
			froms = append(froms, from)
		}
		slices.Sort(froms)
		var lines []string
		for _, from := range froms {
			lines = append(lines, ps.batches[from].lines...)
		}
		if n, x, y, ok := firstLine(want.lines, lines); ok {
			t.Fatalf("seed %d: the changelog after crashes differs from the row-by-row run's changes at %d:\n- %s\n+ %s", seed, n, x, y)
		}
	case "upsert":
		if d := testkit.StateDiff(want.last, upsert); d != "" {
			t.Fatalf("seed %d: the upsert sink after crashes: %s", seed, d)
		}
	}
	t.Logf("seed %d: %d crashes, %d records bulk loaded, %d changes (%d re-created batches compared); state (%d entries) identical to row by row",
		seed, crashes, loaded, len(want.lines), ps.compared, len(state))
}

// failingPositioned is a positionedSink whose Write fails once (fail).
type failingPositioned struct {
	*positionedSink
	fail *failingSink
}

func (f *failingPositioned) Write(ctx context.Context, cs []row.Change) error {
	return f.fail.Write(ctx, cs)
}

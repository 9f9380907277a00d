package engine_test

import (
	"context"
	"fmt"
	"math/rand"
	randv2 "math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// positionedSink is a changelog destination with delivery markers as the
// engine sees it (sink.Positioned) that never holds anything durably: after
// a crash it reports nothing delivered, so the engine re-creates every
// batch its state lost, and the sink compares each re-created batch with
// the one it was given before, change by change. The delivery markers of
// the ClickHouse changelog sink rest on that: a batch re-created after a
// crash writes the same changes in the same order. Its table is the last
// copy of each batch, in position order.
type positionedSink struct {
	batches map[int64]*deliveredBatch
	cur     *deliveredBatch
	// compared counts re-created batches checked equal; diff is the
	// first difference found.
	compared int
	diff     string
}

type deliveredBatch struct {
	from, to int64
	lines    []string
	changes  []row.Change
}

func newPositionedSink() *positionedSink {
	return &positionedSink{batches: map[int64]*deliveredBatch{}}
}

func (s *positionedSink) Delivered(context.Context) (sink.Delivery, error) {
	return sink.Delivery{Complete: true}, nil
}

func (s *positionedSink) Begin(from int64) error {
	s.cur = &deliveredBatch{from: from}
	return nil
}

func (s *positionedSink) Replaying() bool { return false }

func (s *positionedSink) Write(_ context.Context, cs []row.Change) error {
	if s.cur == nil {
		return fmt.Errorf("a change outside a batch (no Begin)")
	}
	for i := range cs {
		c := cs[i]
		c.ParentKey, c.ChildKey = slices.Clone(c.ParentKey), slices.Clone(c.ChildKey)
		c.Values, c.Prev = slices.Clone(c.Values), slices.Clone(c.Prev)
		var b []byte
		b = fmt.Appendf(b, "%d v%d p%d ", c.Op, c.Version, c.PrevVersion)
		b = appendValues(appendValues(appendValues(appendValues(b, c.ParentKey), c.ChildKey), c.Values), c.Prev)
		s.cur.lines = append(s.cur.lines, string(b))
		s.cur.changes = append(s.cur.changes, c)
	}
	return nil
}

func (s *positionedSink) Flush(context.Context) error { return nil }

func (s *positionedSink) End(_ context.Context, to int64) error {
	b := s.cur
	s.cur = nil
	if b == nil {
		return nil // a batch without changes
	}
	b.to = to
	if old, ok := s.batches[b.from]; ok {
		s.compared++
		if s.diff == "" {
			switch {
			case old.to != b.to:
				s.diff = fmt.Sprintf("batch %d re-created up to %d, first delivered up to %d", b.from, b.to, old.to)
			case !slices.Equal(old.lines, b.lines):
				n, x, y, _ := firstLine(old.lines, b.lines)
				s.diff = fmt.Sprintf("batch %d re-created with other changes: change %d:\n- %s\n+ %s", b.from, n, x, y)
			}
		}
	}
	s.batches[b.from] = b
	return nil
}

func (s *positionedSink) Close() error { return nil }

// firstLine is the first index at which a and b differ, with their lines.
func firstLine(a, b []string) (int, string, string, bool) {
	for i := 0; i < len(a) || i < len(b); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return i, x, y, true
		}
	}
	return 0, "", "", false
}

// table applies the batches in position order to a changelog model
// (strict versions: each batch is applied once).
func (s *positionedSink) table(t *testing.T, seed int64) []cdcgen.JoinedRow {
	t.Helper()
	froms := make([]int64, 0, len(s.batches))
	for from := range s.batches {
		froms = append(froms, from)
	}
	slices.Sort(froms)
	m := newSinkModel()
	for _, from := range froms {
		for i := range s.batches[from].changes {
			if err := m.emit(&s.batches[from].changes[i]); err != nil {
				t.Fatalf("seed %d: batch %d: %v", seed, from, err)
			}
		}
	}
	return m.changelog(t, seed)
}

// changelogKills replays a hot-key history into a positionedSink with
// fair fan-out in chunks of 1..16 rows, crashing at random points (losing
// what was not synced) and resuming on the same input; the resumed runs use
// resumeChunk(chunk_rows). It returns the sink, the fan-outs done in chunks
// and the expected join.
func changelogKills(t *testing.T, join string, seed int64, resumeChunk func(int) int) (*positionedSink, uint64, []cdcgen.JoinedRow) {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	opts := cdcgen.DefaultOptions(seed)
	opts.Ops = 8000
	if testing.Short() {
		opts.Ops = 3000
	}
	cfg := jobConfig(t, join)
	hotHistory(&opts, cfg, rng)
	h, err := cdcgen.Generate(opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg.State.BatchEvents = 1 + rng.Intn(300)
	chunk := cfg.Skew.ChunkRows
	ps := newPositionedSink()
	fs := vfs.NewCrashableMem()
	now := func() time.Time { return time.Unix(1_700_000_000, 0) }
	ctx := context.Background()
	open := func(resume bool) *engine.Engine {
		e, err := engine.Open(cfg, engine.Options{Resume: resume, Sink: ps, FS: fs, Now: now})
		if err != nil {
			t.Fatalf("seed %d: open: %v", seed, err)
		}
		return e
	}
	e := open(false)
	defer func() { e.Close() }()
	crashAt := map[int]bool{}
	for i := 0; i < 6; i++ {
		crashAt[rng.Intn(len(h.Records))] = true
	}
	var chunked uint64
	for i := 0; i < len(h.Records); i++ {
		if crashAt[i] {
			delete(crashAt, i)
			chunked += e.Stats().FanOutsChunked
			crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.Intn(100), RNG: randv2.New(randv2.NewPCG(uint64(seed), uint64(i)))})
			e.Close()
			fs = crashed
			cfg.Skew.ChunkRows = resumeChunk(chunk)
			e = open(true)
			i = -1
			continue
		}
		r := h.Records[i]
		rec := engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
		if err := e.Process(ctx, &rec); err != nil {
			t.Fatalf("seed %d: record %d: %v", seed, i, err)
		}
	}
	if err := e.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	chunked += e.Stats().FanOutsChunked
	return ps, chunked, oracle(t, h.Final, join == "left")
}

// TestChangelogFairFanOutKills: in changelog mode (a sink.Positioned) fair
// fan-out cuts its chunks by input records, so every batch re-created after
// a crash emits exactly the changes it emitted before (compared change by
// change), and the changelog table equals the SQL join. Every seed must
// chunk a fan-out and re-create batches.
func TestChangelogFairFanOutKills(t *testing.T) {
	ss := seeds(t)
	if len(ss) > 8 {
		ss = ss[:8]
	}
	for _, join := range []string{"inner", "left"} {
		for _, seed := range ss {
			t.Run(fmt.Sprintf("%s/seed=%d", join, seed), func(t *testing.T) {
				t.Parallel()
				ps, chunked, want := changelogKills(t, join, seed, func(c int) int { return c })
				if ps.diff != "" {
					t.Fatalf("seed %d (reproduce with -seed %d): %s", seed, seed, ps.diff)
				}
				if chunked == 0 || ps.compared == 0 {
					t.Fatalf("seed %d: %d fan-outs in chunks, %d batches re-created: the test does not exercise chunks in changelog mode", seed, chunked, ps.compared)
				}
				check(t, seed, "changelog table after the crashes", want, ps.table(t, seed))
				t.Logf("seed %d: %d fan-outs in chunks, %d re-created batches identical", seed, chunked, ps.compared)
			})
		}
	}
}

// TestChangelogFairFanOutNegativeControl shows that the comparison of
// re-created batches can fail: resumed with another skew.chunk_rows, a run
// cuts other chunks, and some seed's re-created batches differ.
func TestChangelogFairFanOutNegativeControl(t *testing.T) {
	for _, seed := range []int64{1000, 1001, 1002, 1003, 1004, 1005} {
		ps, _, _ := changelogKills(t, "inner", seed, func(c int) int { return c + 3 })
		if ps.diff != "" {
			t.Logf("seed %d: other chunks are detected: %s", seed, ps.diff)
			return
		}
	}
	t.Fatal("re-created batches with other chunks were never detected: the comparison cannot fail")
}

package kafkarun_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// exactStore stands in for a ClickHouse changelog table with delivery
// markers (sink/clickhouse, exact.go), shared by every instance's sinks:
// per stream (keyed partition) the latest marker, and the changes of a
// batch cut short. A batch's changes land in INSERTs cut every exactCut
// changes and at its end; a batch re-created after a crash (Begin at the
// position of a batch cut short) is compared change by change with what
// landed of it, which is not applied again. Landed changes go to the
// model (once each). Crashes: when armed, the crashAt-th INSERT from then
// on fails right after it landed (the worker stops, its state uncommitted,
// and Run with it), in the middle of a batch or at its end.
type exactStore struct {
	mu       sync.Mutex
	m        *model
	streams  map[string]*exactStream
	compared int    // re-created batches that reached what had landed of them
	diff     string // the first difference of a re-created batch
	crashAt  int
	midOnly  bool // count and fail only INSERTs inside a batch (not a batch's end)
	crashes  int
	midCrash int // crashes inside a batch: each leaves a batch cut short to re-create
}

type exactStream struct {
	d       sink.Delivery
	partial []string // the changes that landed of the batch cut short at d.Pos
}

// exactCut is the store's INSERT size within a batch, in changes.
const exactCut = 5

func newExactStore(m *model) *exactStore {
	return &exactStore{m: m, streams: map[string]*exactStream{}}
}

// arm makes the n-th INSERT from now on fail after landing (0: none).
func (s *exactStore) arm(n int) {
	s.mu.Lock()
	s.crashAt, s.midOnly = n, false
	s.mu.Unlock()
}

// armMid makes the n-th INSERT inside a batch from now on (one a batch's
// end does not make) fail after landing: the batch is cut short, so the
// next owner of its stream re-creates it (0: none).
func (s *exactStore) armMid(n int) {
	s.mu.Lock()
	s.crashAt, s.midOnly = n, true
	s.mu.Unlock()
}

func (s *exactStore) newSink(_ context.Context, p kafkarun.SinkFor) (sink.Sink, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams[p.Stream] == nil {
		s.streams[p.Stream] = &exactStream{d: sink.Delivery{Complete: true}}
	}
	return &exactSink{s: s, st: s.streams[p.Stream]}, nil
}

// exactSink is one partition's sink: a sink.Positioned and a
// sink.Batcher, as the ClickHouse changelog sink.
type exactSink struct {
	s      *exactStore
	st     *exactStream
	from   int64
	began  bool
	lines  []string     // the batch's changes so far
	prefix []string     // what landed of the batch before (re-created)
	pend   []row.Change // changes not landed yet
	cuts   int
}

var _ sink.Positioned = (*exactSink)(nil)
var _ sink.Batcher = (*exactSink)(nil)

func (k *exactSink) Delivered(context.Context) (sink.Delivery, error) {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	return k.st.d, nil
}

func (k *exactSink) Begin(from int64) error {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	if k.began || len(k.pend) > 0 {
		return errors.New("exact model: Begin inside a batch")
	}
	k.from, k.began, k.lines, k.pend, k.prefix, k.cuts = from, true, nil, nil, nil, 0
	if !k.st.d.Complete && k.st.d.Pos == from {
		k.prefix, k.cuts = k.st.partial, k.st.d.Chunks
	}
	return nil
}

func (k *exactSink) Replaying() bool {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	return k.began && len(k.lines) < len(k.prefix)
}

func changeLine(c *row.Change) string {
	return fmt.Sprintf("%v|%v %s v%d %v %v@%d", texts(c.ParentKey), texts(c.ChildKey), c.Op, c.Version, texts(c.Values), texts(c.Prev), c.PrevVersion)
}

func (k *exactSink) Write(_ context.Context, cs []row.Change) error {
	s := k.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !k.began {
		return errors.New("exact model: a change outside a batch")
	}
	for i := range cs {
		line := changeLine(&cs[i])
		n := len(k.lines)
		k.lines = append(k.lines, line)
		if n < len(k.prefix) {
			if line != k.prefix[n] && s.diff == "" {
				s.diff = fmt.Sprintf("batch at %d re-created with other changes: change %d of %d that landed:\n- %s\n+ %s", k.from, n, len(k.prefix), k.prefix[n], line)
			}
			if n+1 == len(k.prefix) {
				s.compared++
			}
			continue
		}
		k.pend = append(k.pend, cloneChange(cs[i]))
		if len(k.lines)%exactCut == 0 {
			k.cuts++
			k.land(sink.Delivery{Pos: k.from, Chunks: k.cuts})
			if s.crash(true) {
				return errInjected
			}
		}
	}
	return nil
}

// land applies the pending changes to the model with the marker d (under
// s.mu).
func (k *exactSink) land(d sink.Delivery) {
	k.s.m.mu.Lock()
	for _, c := range k.pend {
		k.s.m.apply(c)
	}
	k.s.m.mu.Unlock()
	k.pend = nil
	k.st.d = d
	k.st.partial = nil
	if !d.Complete {
		k.st.partial = slices.Clone(k.lines)
	}
}

// crash reports whether the INSERT that just landed fails (under s.mu);
// mid: it is inside a batch, not the batch's end.
func (s *exactStore) crash(mid bool) bool {
	if s.crashAt <= 0 || s.midOnly && !mid {
		return false
	}
	s.crashAt--
	if s.crashAt > 0 {
		return false
	}
	s.crashes++
	if mid {
		s.midCrash++
	}
	return true
}

func (k *exactSink) End(_ context.Context, to int64) error {
	s := k.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(k.lines) < len(k.prefix) {
		return fmt.Errorf("exact model: batch at %d ended after %d changes, %d had landed", k.from, len(k.lines), len(k.prefix))
	}
	k.began = false
	k.land(sink.Delivery{Pos: to, Complete: true})
	if s.crash(false) {
		return errInjected
	}
	return nil
}

func (k *exactSink) Flush(context.Context) error {
	if len(k.pend) > 0 {
		return errors.New("exact model: Flush with changes of a batch")
	}
	return nil
}

func (k *exactSink) Full() bool {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	return len(k.lines) >= 4*exactCut
}

func (k *exactSink) MaxDelay() time.Duration { return 20 * time.Millisecond }
func (k *exactSink) Close() error            { return nil }

// exactRun is the outcome of skewChangelogChunks.
type exactRun struct {
	store            *exactStore
	chunked, steps   float64 // work done in chunks stepped by input; step markers written
	salted           float64
	final, changelog string // differences from the oracle ("": none)
}

// skewChangelogChunks runs a hot-key history in changelog mode through
// instances whose exact sinks crash after random INSERTs (mid-batch and at
// batch ends), on kept and lost state directories, then a last instance to
// the end; paceByTime breaks stepping by input (the negative control).
func skewChangelogChunks(t *testing.T, seed int64, join string, paceByTime bool) exactRun {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(seed), 17))
	h := skewHistory(t, seed, 3000, 3, false)
	c := newCluster(t, 3)
	n := len(h.Records)
	produce(t, c.ListenAddrs(), h.Records[:n/2])
	m := newModel()
	m.ordered = true
	store := newExactStore(m)
	dir := t.TempDir()
	hot, salts, chunk := 4+rng.IntN(6), 2+rng.IntN(3), 1+rng.IntN(3)
	t.Logf("seed %d: hot_children %d, salts %d, chunk_rows %d", seed, hot, salts, chunk)
	var res exactRun
	res.store = store
	run := func(state string) (*instance, *prometheus.Registry) {
		cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: state, keyedParts: 4, join: join,
			batch: 20 + rng.IntN(150), extra: fmt.Sprintf(skewYAML, hot, salts, chunk)})
		ctx, cancel := context.WithCancel(context.Background())
		in := newInstance(cfg, cancel)
		reg := prometheus.NewRegistry()
		lvl := slog.LevelWarn
		if testing.Verbose() {
			lvl = slog.LevelInfo
		}
		opts := kafkarun.Options{NewSink: store.newSink, Registry: reg, Ready: in.ready,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))}
		if paceByTime {
			kafkarun.PaceByTime(&opts)
		}
		go func() {
			defer close(in.done)
			in.err = kafkarun.Run(ctx, cfg, opts)
		}()
		return in, reg
	}
	tally := func(reg *prometheus.Registry) {
		res.chunked += counter(t, reg, "cdcjoin_skew_chunked_total", "steps", "input")
		res.steps += counter(t, reg, "cdcjoin_skew_step_markers_total")
		res.salted += counter(t, reg, "cdcjoin_skew_layout_changes_total", "change", "salted")
	}
	for i := 0; i < 7; i++ {
		if i == 3 {
			produce(t, c.ListenAddrs(), h.Records[n/2:])
		}
		state := dir
		if rng.IntN(4) == 0 {
			state = filepath.Join(dir, fmt.Sprint("lost-", i)) // every partition rebuilt from the keyed topic
		}
		store.arm(1 + rng.IntN(30))
		in, reg := run(state)
		select {
		case <-in.done:
			t.Logf("seed %d: run %d crashed: %v", seed, i, in.err)
		case <-time.After(10 * time.Second):
			if err := in.stop(t); err != nil && !errors.Is(err, errInjected) {
				t.Fatalf("seed %d: stop %d: %v", seed, i, err)
			}
		}
		tally(reg)
	}
	store.arm(0)
	store.mu.Lock()
	caught := store.diff != ""
	store.mu.Unlock()
	if paceByTime && caught {
		return res // the negative control is caught already
	}
	in, reg := run(dir)
	want := oracle(h, join == "left")
	diff, err := m.waitEqual(want, stallLimit, in)
	serr := in.stop(t)
	tally(reg)
	res.final = runDiff(diff, err, serr)
	if got, err := m.changelog(); err != nil {
		res.changelog = err.Error()
	} else {
		res.changelog = cdcgen.Diff(want, got, 10)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	t.Logf("seed %d: %d crashes, %d re-created batches compared, %g chunked by input, %g step markers, %g keys salted",
		seed, store.crashes, store.compared, res.chunked, res.steps, res.salted)
	return res
}

// TestSkewChangelogChunks: in changelog mode (an exact sink: delivery
// markers) fan-outs and salting moves are done in chunks stepped by input
// (skew.chunk_rows rows per record read; step markers when a worker has
// work and no input), across crashes right after an INSERT landed (in the
// middle of a batch and at its end) on kept and lost state directories:
// every batch re-created after a crash emits exactly the changes that
// landed of it (compared change by change), and the changelog and upsert
// tables equal the SQL join. It fails unless work was chunked by input,
// step markers were written, batches were re-created and keys salted.
// Negative control: TestSkewChangelogTimePaced.
func TestSkewChangelogChunks(t *testing.T) {
	for _, join := range []string{"inner", "left"} {
		t.Run(join, func(t *testing.T) {
			// Whether a worker is ever left with work and no input (a step
			// marker) depends on the timing of fetches, not on the seed:
			// up to 4 seeds are run, each checked completely, until one
			// wrote step markers.
			first := testSeed()
			for attempt := int64(0); ; attempt++ {
				seed := first + attempt
				t.Logf("seed %d (rerun with CDCJOIN_SEED=%d)", seed, seed)
				r := skewChangelogChunks(t, seed, join, false)
				if r.store.diff != "" {
					t.Fatalf("seed %d: %s", seed, r.store.diff)
				}
				if r.final != "" || r.changelog != "" {
					t.Fatalf("seed %d: the tables differ from the oracle:\nupsert: %s\nchangelog: %s", seed, r.final, r.changelog)
				}
				if r.chunked == 0 || r.store.compared == 0 || r.salted == 0 {
					t.Fatalf("seed %d: %g chunked by input, %g step markers, %d re-created batches, %g keys salted: the test proves nothing",
						seed, r.chunked, r.steps, r.store.compared, r.salted)
				}
				if r.steps > 0 {
					break
				}
				if attempt == 3 {
					t.Fatalf("seeds %d-%d: no step markers in 4 runs: the step-marker path was never taken", first, seed)
				}
			}
		})
	}
}

// TestSkewChangelogTimePaced is TestSkewChangelogChunks' negative control:
// with the steps paced by time under the same exact sink (as upsert mode
// paces them), some seed's re-created batches must differ from what
// landed of them (or the tables from the oracle).
func TestSkewChangelogTimePaced(t *testing.T) {
	for i := int64(0); i < 3; i++ {
		seed := testSeed() + i
		r := skewChangelogChunks(t, seed, "inner", true)
		if r.store.diff != "" || r.final != "" || r.changelog != "" {
			t.Logf("seed %d: time-paced chunks are caught: %s %s %s", seed, r.store.diff, r.final, r.changelog)
			return
		}
	}
	t.Fatal("time-paced chunks under the delivery markers were never caught: the comparison cannot fail")
}

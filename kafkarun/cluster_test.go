package kafkarun_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcjoin/cdcjoin/cdcgen"
)

// checkFinal stops nothing; it compares the model with the oracle.
func checkFinal(t *testing.T, seed int64, m *model, want []cdcgen.JoinedRow) {
	t.Helper()
	got, err := m.live()
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	if d := cdcgen.Diff(want, got, 10); d != "" {
		t.Fatalf("seed %d: final table differs from the oracle:\n%s", seed, d)
	}
	t.Logf("seed %d: %d rows, %d changes applied, stale %d, repeats %d", seed, len(want), m.changes, m.rmt.Stale, m.rmt.Repeats)
}

// TestRebalance: (b) three instances share the job; one dies mid-stream
// (its sink fails: unflushed work is lost, nothing past it commits) and a
// fourth joins. The output equals the oracle and no instance emits a lower
// version after a higher one for a row.
func TestRebalance(t *testing.T) {
	seed := time.Now().UnixNano() % 1000
	h := smallHistory(t, seed, 4000)
	c := newCluster(t, 3)
	brokers := brokersOf(c)
	half := len(h.Records) / 2
	produce(t, c.ListenAddrs(), h.Records[:half])
	m := newModel()
	root := t.TempDir()
	inst := func(name string) (*instance, *modelSink) {
		cfg := jobConfig(t, jobOpts{brokers: brokers, instance: name, keyedParts: 6, batch: 200,
			stateDir: filepath.Join(root, name)})
		s := m.sink()
		return start(t, cfg, s), s
	}
	a, _ := inst("a")
	b, _ := inst("b")
	cc, sc := inst("c")
	time.Sleep(2 * time.Second)
	m.mu.Lock()
	sc.failAt = sc.flushes + 2 // c dies on its second flush from now
	m.mu.Unlock()
	produce(t, c.ListenAddrs(), h.Records[half:3*half/2])
	select {
	case <-cc.done:
		t.Logf("seed %d: instance c stopped: %v", seed, cc.err)
	case <-time.After(30 * time.Second):
		t.Logf("seed %d: instance c did not fail (no flush); stopping it", seed)
		cc.stop(t)
	}
	d, _ := inst("d")
	produce(t, c.ListenAddrs(), h.Records[3*half/2:])
	want := oracle(h, false)
	diff, err := m.waitEqual(want, 90*time.Second, nil)
	for _, in := range []*instance{a, b, d} {
		if serr := in.stop(t); serr != nil {
			t.Errorf("seed %d: Run: %v", seed, serr)
		}
	}
	if err != nil || diff != "" {
		t.Fatalf("seed %d: %v\n%s", seed, err, diff)
	}
	checkFinal(t, seed, m, want)
}

// TestCrashRestart: (c) the process crashes at random points (sink
// failure before or after the insert, or state lost) and restarts from its
// committed positions; the output equals the oracle.
func TestCrashRestart(t *testing.T) {
	seed := time.Now().UnixNano() % 1000
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	h := smallHistory(t, seed, 4000)
	c := newCluster(t, 3)
	produce(t, c.ListenAddrs(), h.Records)
	m := newModel()
	dir := t.TempDir()
	for i := 0; i < 8; i++ {
		state := dir
		if rng.IntN(4) == 0 {
			state = filepath.Join(dir, fmt.Sprint("lost-", i)) // the disk was lost: rebuild
		}
		cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: state, batch: 50 + rng.IntN(200)})
		s := m.sink()
		if i%2 == 1 {
			// A graceful stop (SIGTERM) at a random moment: Run drains
			// and returns nil.
			in := start(t, cfg, s)
			time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
			if err := in.stop(t); err != nil {
				t.Fatalf("seed %d: graceful stop %d: %v", seed, i, err)
			}
			continue
		}
		s.failAt, s.failApplied = 1+rng.IntN(8), rng.IntN(2) == 0
		in := start(t, cfg, s)
		select {
		case <-in.done:
			t.Logf("seed %d: crash %d (flush %d, applied %v): %v", seed, i, s.failAt, s.failApplied, in.err)
		case <-time.After(5 * time.Second): // caught up before the failing flush
			if err := in.stop(t); err != nil {
				t.Fatalf("seed %d: stop %d: %v", seed, i, err)
			}
		}
	}
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: dir})
	in := start(t, cfg, m.sink())
	want := oracle(h, false)
	diff, err := m.waitEqual(want, 60*time.Second, in)
	if serr := in.stop(t); serr != nil {
		t.Errorf("seed %d: Run: %v", seed, serr)
	}
	if err != nil || diff != "" {
		t.Fatalf("seed %d: %v\n%s", seed, err, diff)
	}
	checkFinal(t, seed, m, want)
}

// TestFaults: (d) kfake injects Fetch, OffsetCommit, TxnOffsetCommit and
// Produce errors and moves partition leaders while the job runs.
func TestFaults(t *testing.T) {
	seed := time.Now().UnixNano() % 1000
	rng := rand.New(rand.NewPCG(uint64(seed), 9))
	h := smallHistory(t, seed, 3000)
	c := newCluster(t, 3)
	produce(t, c.ListenAddrs(), h.Records[:len(h.Records)/3])
	for _, f := range []kfake.Fault{
		{Keys: []kmsg.Key{kmsg.Fetch}, Err: kerr.NotLeaderForPartition, Count: 20},
		{Keys: []kmsg.Key{kmsg.Fetch}, Err: kerr.UnknownServerError, Count: 5},
		{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.CoordinatorNotAvailable, Count: 5},
		{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.CoordinatorLoadInProgress, Count: 3},
		{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotLeaderForPartition, Count: 10},
	} {
		c.Fault(f)
	}
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir(), batch: 100})
	m := newModel()
	in := start(t, cfg, m.sink())
	for _, part := range [][]cdcgen.Record{h.Records[len(h.Records)/3 : 2*len(h.Records)/3], h.Records[2*len(h.Records)/3:]} {
		for i := 0; i < 8; i++ {
			for _, topic := range []string{cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic, cfg.Kafka.KeyedTopic()} {
				p := int32(rng.IntN(3))
				if err := c.MoveTopicPartition(topic, p, int32(rng.IntN(3))); err != nil {
					t.Logf("move %s/%d: %v", topic, p, err)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		produce(t, c.ListenAddrs(), part)
	}
	want := oracle(h, false)
	diff, err := m.waitEqual(want, 90*time.Second, in)
	if serr := in.stop(t); serr != nil {
		t.Errorf("seed %d: Run: %v", seed, serr)
	}
	if err != nil || diff != "" {
		t.Fatalf("seed %d: %v\n%s", seed, err, diff)
	}
	checkFinal(t, seed, m, want)
}

// TestCompactedRebuild: an instance processes a prefix, the keyed topic is
// compacted, and a new instance without local state takes over: it
// rebuilds every partition from the compacted topic, emitting nothing up to
// the committed offsets, and continues; the output equals the oracle.
func TestCompactedRebuild(t *testing.T) {
	seed := time.Now().UnixNano() % 1000
	h := smallHistory(t, seed, 3000)
	cp := h.Checkpoints[len(h.Checkpoints)/2]
	mid, err := h.TablesAt(len(h.Checkpoints) / 2)
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, 3)
	produce(t, c.ListenAddrs(), h.Records[:cp.Records])
	m := newModel()
	root := t.TempDir()
	a := start(t, jobConfig(t, jobOpts{brokers: brokersOf(c), instance: "a", stateDir: filepath.Join(root, "a")}), m.sink())
	diff, err := m.waitEqual(cdcgen.Join(mid.Users, mid.Domains, false), 60*time.Second, a)
	if serr := a.stop(t); serr != nil || err != nil || diff != "" {
		t.Fatalf("seed %d: prefix: run %v, wait %v\n%s", seed, serr, err, diff)
	}
	before := m.changes
	c.Compact()
	b := start(t, jobConfig(t, jobOpts{brokers: brokersOf(c), instance: "b", stateDir: filepath.Join(root, "b")}), m.sink())
	time.Sleep(500 * time.Millisecond)
	m.mu.Lock()
	reemitted := m.changes - before
	m.mu.Unlock()
	if reemitted != 0 {
		t.Errorf("seed %d: the rebuild emitted %d changes for already committed input", seed, reemitted)
	}
	produce(t, c.ListenAddrs(), h.Records[cp.Records:])
	want := oracle(h, false)
	diff, err = m.waitEqual(want, 60*time.Second, b)
	if serr := b.stop(t); serr != nil {
		t.Errorf("seed %d: Run: %v", seed, serr)
	}
	if err != nil || diff != "" {
		t.Fatalf("seed %d: %v\n%s", seed, err, diff)
	}
	checkFinal(t, seed, m, want)
}

// TestSlowSink: a sink much slower than the input fills the workers'
// bounded queues, which pauses fetching; the output still equals the
// oracle.
func TestSlowSink(t *testing.T) {
	h := smallHistory(t, 21, 2000)
	c := newCluster(t, 3)
	produce(t, c.ListenAddrs(), h.Records)
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir(), batch: 20})
	m := newModel()
	s := m.sink()
	s.delay = 5 * time.Millisecond
	in := start(t, cfg, s)
	want := oracle(h, false)
	diff, err := m.waitEqual(want, 120*time.Second, in)
	if serr := in.stop(t); serr != nil {
		t.Errorf("Run: %v", serr)
	}
	if err != nil || diff != "" {
		t.Fatalf("%v\n%s", err, diff)
	}
	checkFinal(t, 21, m, want)
}

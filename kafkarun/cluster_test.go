package kafkarun_test

import (
	"errors"
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
// (its sink fails on its second flush: unflushed work is lost, nothing past
// it commits) and a fourth joins. The output equals the oracle and no
// instance emits a lower version after a higher one for a row. The test
// fails if the injected failure never fired.
func TestRebalance(t *testing.T) {
	seed := clusterSeed(t)
	h := smallHistory(t, seed, 4000)
	c := newCluster(t, 3)
	brokers := brokersOf(c)
	half := len(h.Records) / 2
	produce(t, c.ListenAddrs(), h.Records[:half])
	m := newModel()
	root := t.TempDir()
	inst := func(name string, failAt int) (*instance, *modelSink) {
		cfg := jobConfig(t, jobOpts{brokers: brokers, instance: name, keyedParts: 6, batch: 200,
			stateDir: filepath.Join(root, name)})
		s := m.sink()
		s.failAt, s.failApplied = failAt, true
		return start(t, cfg, s), s
	}
	a, _ := inst("a", 0)
	b, _ := inst("b", 0)
	cc, _ := inst("c", 2) // c dies on its second flush
	group := jobConfig(t, jobOpts{brokers: brokers, stateDir: root}).Kafka.JoinGroup()
	waitFor(t, 5*time.Minute, "three members in the join group", func() bool { return groupMembers(t, c, group) == 3 })
	produce(t, c.ListenAddrs(), h.Records[half:3*half/2])
	select {
	case <-cc.done:
		if !errors.Is(cc.err, errInjected) {
			t.Fatalf("seed %d: instance c stopped with %v, want the injected sink failure", seed, cc.err)
		}
		t.Logf("seed %d: instance c stopped: %v", seed, cc.err)
	case <-time.After(5 * time.Minute): // a wait on the condition: generous for a loaded machine
		cc.stop(t)
		t.Fatalf("seed %d: the injected failure of instance c never fired (it flushed less than twice)", seed)
	}
	d, _ := inst("d", 0)
	produce(t, c.ListenAddrs(), h.Records[3*half/2:])
	want := oracle(h, false)
	diff, err := m.waitEqual(want, stallLimit, nil)
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
// committed positions; the output equals the oracle. The input arrives in
// slices, one before each start, so that every run has work and every
// injected crash fires (the test fails if one does not); graceful stops
// come after a random number of flushes.
func TestCrashRestart(t *testing.T) {
	seed := clusterSeed(t)
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	h := smallHistory(t, seed, 4000)
	c := newCluster(t, 3)
	m := newModel()
	dir := t.TempDir()
	const runs = 8
	per := len(h.Records) / (runs + 1)
	for i := 0; i < runs; i++ {
		produce(t, c.ListenAddrs(), h.Records[i*per:(i+1)*per])
		state := dir
		if rng.IntN(4) == 0 {
			state = filepath.Join(dir, fmt.Sprint("lost-", i)) // the disk was lost: rebuild
		}
		cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: state, batch: 50 + rng.IntN(100)})
		s := m.sink()
		if i%2 == 1 {
			// A graceful stop (SIGTERM) after a random number of flushes:
			// Run drains and returns nil.
			in := start(t, cfg, s)
			n := 1 + rng.IntN(3)
			waitFor(t, 5*time.Minute, fmt.Sprintf("%d flushes", n), func() bool {
				m.mu.Lock()
				defer m.mu.Unlock()
				return s.flushes >= n
			})
			if err := in.stop(t); err != nil {
				t.Fatalf("seed %d: graceful stop %d: %v", seed, i, err)
			}
			continue
		}
		s.failAt, s.failApplied = 1+rng.IntN(3), rng.IntN(2) == 0
		in := start(t, cfg, s)
		select {
		case <-in.done:
			if !errors.Is(in.err, errInjected) {
				t.Fatalf("seed %d: crash %d: Run returned %v, want the injected sink failure", seed, i, in.err)
			}
			t.Logf("seed %d: crash %d (flush %d, applied %v): %v", seed, i, s.failAt, s.failApplied, in.err)
		case <-time.After(5 * time.Minute): // a wait on the condition: generous for a loaded machine
			in.stop(t)
			t.Fatalf("seed %d: crash %d never fired (flush %d)", seed, i, s.failAt)
		}
	}
	produce(t, c.ListenAddrs(), h.Records[runs*per:])
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: dir})
	in := start(t, cfg, m.sink())
	want := oracle(h, false)
	diff, err := m.waitEqual(want, stallLimit, in)
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
	seed := clusterSeed(t)
	rng := rand.New(rand.NewPCG(uint64(seed), 9))
	h := smallHistory(t, seed, 3000)
	c := newCluster(t, 3)
	produce(t, c.ListenAddrs(), h.Records[:len(h.Records)/3])
	var handles []*kfake.FaultHandle
	faults := []kfake.Fault{
		{Keys: []kmsg.Key{kmsg.Fetch}, Err: kerr.NotLeaderForPartition, Count: 20},
		{Keys: []kmsg.Key{kmsg.Fetch}, Err: kerr.UnknownServerError, Count: 5},
		{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.CoordinatorNotAvailable, Count: 5},
		{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.CoordinatorLoadInProgress, Count: 3},
		{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotLeaderForPartition, Count: 10},
	}
	for _, f := range faults {
		handles = append(handles, c.Fault(f))
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
			time.Sleep(100 * time.Millisecond) // pacing of the leader moves, not a wait for anything
		}
		produce(t, c.ListenAddrs(), part)
	}
	want := oracle(h, false)
	diff, err := m.waitEqual(want, stallLimit, in)
	if serr := in.stop(t); serr != nil {
		t.Errorf("seed %d: Run: %v", seed, serr)
	}
	if err != nil || diff != "" {
		t.Fatalf("seed %d: %v\n%s", seed, err, diff)
	}
	for i, h := range handles {
		if h.Hits() == 0 {
			t.Errorf("seed %d: fault %v (%v) never fired", seed, faults[i].Keys, faults[i].Err)
		}
	}
	checkFinal(t, seed, m, want)
}

// TestCompactedRebuild: an instance processes a prefix, the keyed topic is
// compacted, and a new instance without local state takes over: it
// rebuilds every partition from the compacted topic, emitting nothing up to
// the committed offsets, and continues; the output equals the oracle.
func TestCompactedRebuild(t *testing.T) {
	seed := clusterSeed(t)
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
	if m.rmt.Stale+m.rmt.Repeats != 0 {
		t.Fatalf("seed %d: the prefix alone re-emitted changes (stale %d, repeats %d)", seed, m.rmt.Stale, m.rmt.Repeats)
	}
	c.Compact()
	b := start(t, jobConfig(t, jobOpts{brokers: brokersOf(c), instance: "b", stateDir: filepath.Join(root, "b")}), m.sink())
	produce(t, c.ListenAddrs(), h.Records[cp.Records:])
	want := oracle(h, false)
	diff, err = m.waitEqual(want, stallLimit, b)
	if serr := b.stop(t); serr != nil {
		t.Errorf("seed %d: Run: %v", seed, serr)
	}
	if err != nil || diff != "" {
		t.Fatalf("seed %d: %v\n%s", seed, err, diff)
	}
	// A change re-emitted for input a had committed shows as a stale or
	// repeated version in the model (there is no sleep to wait out).
	if m.rmt.Stale+m.rmt.Repeats != 0 {
		t.Errorf("seed %d: the rebuild re-emitted changes for committed input (stale %d, repeats %d)", seed, m.rmt.Stale, m.rmt.Repeats)
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
	diff, err := m.waitEqual(want, stallLimit, in)
	if serr := in.stop(t); serr != nil {
		t.Errorf("Run: %v", serr)
	}
	if err != nil || diff != "" {
		t.Fatalf("%v\n%s", err, diff)
	}
	checkFinal(t, 21, m, want)
}

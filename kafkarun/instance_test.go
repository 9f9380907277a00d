package kafkarun_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInstancesOnOneHost: two instances on one host, each with its own
// state.dir and no kafka.instance_id, share the job: both keep running and
// the output equals the oracle (before: both took the host name as their
// id, fenced each other's transactions, and one died with
// INVALID_PRODUCER_EPOCH).
func TestInstancesOnOneHost(t *testing.T) {
	h := smallHistory(t, 31, 2000)
	c := newCluster(t, 3)
	root := t.TempDir()
	m := newModel()
	var ins []*instance
	for _, name := range []string{"a", "b"} {
		cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), instance: "-", stateDir: filepath.Join(root, name)})
		ins = append(ins, start(t, cfg, m.sink()))
	}
	produce(t, c.ListenAddrs(), h.Records)
	want := oracle(h, false)
	diff, err := m.waitEqual(want, stallLimit, nil)
	for i, in := range ins {
		select {
		case <-in.done:
			t.Errorf("instance %d stopped early: %v", i, in.err)
		default:
		}
	}
	for _, in := range ins {
		if serr := in.stop(t); serr != nil {
			t.Errorf("Run: %v", serr)
		}
	}
	if err != nil || diff != "" {
		t.Fatalf("%v\n%s", err, diff)
	}
}

// TestSharedInstanceID: two live processes configured with the same
// kafka.instance_id fence each other; the one that loses says so plainly,
// naming the setting.
func TestSharedInstanceID(t *testing.T) {
	h := smallHistory(t, 32, 2000)
	c := newCluster(t, 3)
	root := t.TempDir()
	m := newModel()
	a := start(t, jobConfig(t, jobOpts{brokers: brokersOf(c), instance: "same", stateDir: filepath.Join(root, "a")}), m.sink())
	b := start(t, jobConfig(t, jobOpts{brokers: brokersOf(c), instance: "same", stateDir: filepath.Join(root, "b")}), m.sink())
	produce(t, c.ListenAddrs(), h.Records)
	var lost *instance
	deadline := time.After(90 * time.Second)
	for lost == nil {
		select {
		case <-a.done:
			lost = a
		case <-b.done:
			lost = b
		case <-deadline:
			t.Fatal("neither instance noticed that they share kafka.instance_id")
		case <-time.After(100 * time.Millisecond):
			produce(t, c.ListenAddrs(), h.Records[:10]) // redeliveries keep both transacting
		}
	}
	for _, in := range []*instance{a, b} {
		if in != lost {
			in.stop(t)
		}
	}
	if lost.err == nil || !strings.Contains(lost.err.Error(), `kafka.instance_id "same"`) || !strings.Contains(lost.err.Error(), "fenced") {
		t.Fatalf("the fenced instance returned %v, want an error naming kafka.instance_id", lost.err)
	}
	t.Logf("fenced instance: %v", lost.err)
}

// TestSharedStateDir: a second instance on the same state.dir is refused
// at once, naming the directory and the process holding it.
func TestSharedStateDir(t *testing.T) {
	c := newCluster(t, 3)
	dir := t.TempDir()
	m := newModel()
	a := start(t, jobConfig(t, jobOpts{brokers: brokersOf(c), instance: "a", stateDir: dir}), m.sink())
	defer a.stop(t)
	waitFor(t, 30*time.Second, "the first instance to lock state.dir", func() bool {
		return fileExists(filepath.Join(dir, "cdcjoin.lock"))
	})
	b := start(t, jobConfig(t, jobOpts{brokers: brokersOf(c), instance: "b", stateDir: dir}), m.sink())
	select {
	case <-b.done:
	case <-time.After(30 * time.Second):
		b.stop(t)
		t.Fatal("a second instance on the same state.dir was not refused")
	}
	if b.err == nil || !strings.Contains(b.err.Error(), "in use by another running cdcjoin process") {
		t.Fatalf("second instance: %v", b.err)
	}
}

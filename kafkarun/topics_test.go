package kafkarun_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/kafkarun"
)

// recreate deletes the source topics and creates them again (3
// partitions), as an operator resetting Debezium would.
func recreate(t *testing.T, adm *kadm.Client) {
	t.Helper()
	ctx := context.Background()
	if _, err := adm.DeleteTopics(ctx, cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		resp, err := adm.CreateTopics(ctx, 3, 1, nil, cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic)
		if err == nil {
			err = resp.Error()
		}
		if err == nil {
			return
		}
		if i == 50 {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRecreatedTopics: the source topics deleted and created again, with
// a new history in them. A start on the old state refuses at once with
// what to do (before: it keyed the new topics on top of the old state and
// kept the old topics' rows that no new event retracted, silently); a
// running instance stops once it sees the new topic ids (before: after the
// fixed 2-minute error window of UNKNOWN_TOPIC_ID fetch errors).
func TestRecreatedTopics(t *testing.T) {
	h := smallHistory(t, 21, 1000)
	c := newCluster(t, 3)
	adm := kadm.NewClient(mustClient(t, c))
	produce(t, c.ListenAddrs(), h.Records)
	dir := t.TempDir()
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: dir})
	runToOracle(t, cfg, h)

	recreate(t, adm)
	h2 := smallHistory(t, 22, 500)
	produce(t, c.ListenAddrs(), h2.Records)
	in := start(t, cfg, newModel().sink())
	select {
	case <-in.done:
	case <-time.After(60 * time.Second):
		in.stop(t)
		t.Fatal("a start on the state of deleted topics did not stop within 60s")
	}
	var re *kafkarun.RecreatedError
	if !errors.As(in.err, &re) || !strings.Contains(in.err.Error(), "reset the job") {
		t.Fatalf("start after the topics were recreated: Run returned %v, want a RecreatedError saying what to do", in.err)
	}
	t.Logf("at start: %v", in.err)

	// A running instance (a fresh job on the new topics) sees them
	// recreated again.
	cfg2 := jobConfig(t, jobOpts{name: "second", brokers: brokersOf(c), stateDir: t.TempDir()})
	m := newModel()
	in2 := start(t, cfg2, m.sink())
	if diff, err := m.waitEqual(oracle(h2, false), 60*time.Second, in2); err != nil || diff != "" {
		in2.stop(t)
		t.Fatalf("second job: %v\n%s", err, diff)
	}
	recreate(t, adm)
	began := time.Now()
	select {
	case <-in2.done:
	case <-time.After(60 * time.Second):
		in2.stop(t)
		t.Fatal("a running instance did not stop within 60s of its source topics being recreated")
	}
	if !errors.As(in2.err, &re) {
		t.Fatalf("running instance: Run returned %v, want a RecreatedError", in2.err)
	}
	t.Logf("while running, after %v: %v", time.Since(began).Round(time.Millisecond), in2.err)
}

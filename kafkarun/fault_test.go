package kafkarun_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKeyingSessionLost: the keying group's session fails (a heartbeat
// answered UNKNOWN_MEMBER_ID) while a keying transaction is open (its
// first transactional produce held for a few heartbeats). franz-go then
// waits, in GroupTransactSession.End, for a heartbeat of the failed session
// or for the lost callback, which BlockRebalanceOnPoll holds back until the
// keying goroutine returns from End: before the fix, End had no deadline
// (context.WithoutCancel) and the stage waited forever, the process alive
// and the output stale (issue 24: TestChangelogKillsHotKeys under load).
// Now End ends at the transaction's deadline, the stage restarts from what
// it committed, and the output equals the oracle. Fails unless the fault
// fired while the transaction was open.
func TestKeyingSessionLost(t *testing.T) {
	seed := clusterSeed(t)
	h := smallHistory(t, seed, 2000)
	c := newCluster(t, 3)
	produce(t, c.ListenAddrs(), h.Records[:len(h.Records)/2])
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir()})
	cfg.Kafka.TransactionTimeout = 3 * time.Second
	txid := cfg.Kafka.Group + "-keying-" + cfg.Kafka.InstanceID
	var open atomic.Bool
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.ProduceRequest)
		if r.TransactionID == nil || *r.TransactionID != txid {
			c.KeepControl()
			return nil, nil, false
		}
		// The first produce of the first keying transaction: hold it
		// while the heartbeat fault below fails the session.
		open.Store(true)
		c.SleepControl(func() { time.Sleep(2 * time.Second) })
		c.DropControl()
		return nil, nil, false
	})
	lost := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Group: cfg.Kafka.KeyingGroup(), Err: kerr.UnknownMemberID,
		When: func(kmsg.Request) bool { return open.Load() }})
	m := newModel()
	in := start(t, cfg, m.sink())
	produce(t, c.ListenAddrs(), h.Records[len(h.Records)/2:])
	want := oracle(h, false)
	diff, err := m.waitEqual(want, 90*time.Second, in)
	if serr := in.stop(t); serr != nil {
		t.Errorf("seed %d: Run: %v", seed, serr)
	}
	if lost.Hits() == 0 {
		t.Fatalf("seed %d: the heartbeat fault never fired: the test proves nothing", seed)
	}
	if err != nil || diff != "" {
		t.Fatalf("seed %d: %v\n%s", seed, err, diff)
	}
	checkFinal(t, seed, m, want)
}

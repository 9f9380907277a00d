package kafkarun_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/kafkarun"
)

// TestKeyingSessionLost: the keying group's session fails (a heartbeat
// answered UNKNOWN_MEMBER_ID) while a keying transaction is open (its
// first transactional produce held for a few heartbeats). Under
// BlockRebalanceOnPoll, franz-go's GroupTransactSession.End then waits for
// a heartbeat of the failed session, or for the lost callback the block
// holds back until the keying goroutine returns from End: before the fix,
// with no deadline (context.WithoutCancel), forever — the process alive,
// the output stale, Run deaf to its cancel (issue 24: what stopped
// TestChangelogKillsHotKeys under load). Now End runs with rebalances
// allowed: the lost session aborts the transaction, the records are keyed
// again, and the output equals the oracle. Fails unless the fault fired
// while the transaction was open.
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
	diff, err := m.waitEqual(want, stallLimit, in)
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

// TestStatus: a running instance's Status (served on /statusz, printed by
// the tests when a run does not converge) names every owned partition of
// both stages and what each join worker waits on; at rest every worker
// waits for input at the end of its partition.
func TestStatus(t *testing.T) {
	seed := clusterSeed(t)
	h := smallHistory(t, seed, 500)
	c := newCluster(t, 3)
	produce(t, c.ListenAddrs(), h.Records)
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir()})
	m := newModel()
	in := start(t, cfg, m.sink())
	defer in.stop(t)
	want := oracle(h, false)
	if diff, err := m.waitEqual(want, stallLimit, in); err != nil || diff != "" {
		t.Fatalf("seed %d: %v\n%s", seed, err, diff)
	}
	var st kafkarun.Status
	waitFor(t, 30*time.Second, "every worker waiting for input at its partition's end", func() bool {
		st, _ = in.ready.Status().(kafkarun.Status)
		if len(st.Join) != 3 || len(st.Keying.Partitions) != 6 {
			return false
		}
		for _, p := range st.Join {
			if p.Waiting != "input" || !p.CaughtUp || p.Position < 0 || p.End < 0 || p.Position < p.End-1 {
				return false
			}
		}
		return true
	})
	t.Logf("status:\n%s", st)
	if s := st.String(); !strings.Contains(s, "join partition 2: waiting on input") {
		t.Fatalf("status text lacks partition 2:\n%s", s)
	}
}

// holdEndTxn makes the cluster hold the first EndTxn request of a
// transactional id beginning with txid (the broker does not answer it)
// until the test ends; held reports when it began.
func holdEndTxn(t *testing.T, c *kfake.Cluster, txid string) (held <-chan struct{}) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	ch := make(chan struct{})
	var once atomic.Bool
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if r := req.(*kmsg.EndTxnRequest); !strings.HasPrefix(r.TransactionalID, txid) || !once.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		close(ch)
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	return ch
}

// TestKeyingEndTimeout: the broker does not answer the keying stage's
// EndTxn. Before, End waited for it forever (context.WithoutCancel): the
// process alive, the output stale. Now End ends at the transaction's
// deadline (kafka.transaction_timeout + 5 s), the stage restarts from what
// it committed with a new session (whose InitProducerID fences the old
// transaction) and the output equals the oracle; fails unless a restart
// happened.
func TestKeyingEndTimeout(t *testing.T) {
	seed := clusterSeed(t)
	h := smallHistory(t, seed, 2000)
	c := newCluster(t, 3)
	produce(t, c.ListenAddrs(), h.Records[:len(h.Records)/2])
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir()})
	cfg.Kafka.TransactionTimeout = 3 * time.Second
	held := holdEndTxn(t, c, cfg.Kafka.Group+"-keying-"+cfg.Kafka.InstanceID)
	m := newModel()
	in := startSkew(t, cfg, m.sink())
	<-held
	produce(t, c.ListenAddrs(), h.Records[len(h.Records)/2:])
	want := oracle(h, false)
	diff, err := m.waitEqual(want, stallLimit, in.instance)
	restarts := counterValue(t, in.reg, "cdcjoin_errors_total", "kind", "restart")
	if serr := in.stop(t); serr != nil {
		t.Errorf("seed %d: Run: %v", seed, serr)
	}
	if err != nil || diff != "" {
		t.Fatalf("seed %d: %v\n%s", seed, err, diff)
	}
	if restarts == 0 {
		t.Fatalf("seed %d: the keying stage never restarted: the test proves nothing", seed)
	}
	t.Logf("seed %d: %v keying restarts", seed, restarts)
	checkFinal(t, seed, m, want)
}

// TestStopWhileEndHangs: Run is cancelled (SIGTERM) while the keying
// stage's EndTxn gets no answer: it returns within kafka.drain_timeout
// of the cancel, not after the transaction's deadline (before: not at
// all, and with a request timeout of 10 s, 10 s after the cancel).
func TestStopWhileEndHangs(t *testing.T) {
	seed := clusterSeed(t)
	h := smallHistory(t, seed, 500)
	c := newCluster(t, 3)
	produce(t, c.ListenAddrs(), h.Records)
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir()})
	cfg.Kafka.TransactionTimeout = time.Minute
	cfg.Kafka.DrainTimeout = 2 * time.Second
	held := holdEndTxn(t, c, cfg.Kafka.Group+"-keying-"+cfg.Kafka.InstanceID)
	// The client would give up on the request after its own timeout
	// (10 s by default); make that longer than the test waits.
	in := start(t, cfg, newModel().sink(), kgo.RequestTimeoutOverhead(2*time.Minute))
	<-held
	began := time.Now()
	in.cancel()
	select {
	case <-in.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("seed %d: Run did not return within 30s of its cancel while End hung", seed)
	}
	t.Logf("seed %d: Run returned %v after the cancel: %v", seed, time.Since(began).Round(time.Millisecond), in.err)
}

// TestKeyingTxnTimeout: a keying transaction outlives
// kafka.transaction_timeout (its EndTxn is held past it, as a starved
// process under load holds its calls): the broker aborts it at its
// timeout and bumps the producer's epoch, and the held EndTxn is answered
// with an epoch error (INVALID_PRODUCER_EPOCH or PRODUCER_FENCED). That is
// not another live instance with the same kafka.instance_id (which fences
// within the transaction's timeout): the stage restarts from what it
// committed and the output equals the oracle. Before, Run stopped with
// "another live process uses kafka.instance_id … and fenced this one"
// (TestSkewTruncates at load 17, issue 24). Fails unless the broker
// aborted a keying transaction at its timeout and the stage restarted.
func TestKeyingTxnTimeout(t *testing.T) {
	seed := clusterSeed(t)
	h := smallHistory(t, seed, 2000)
	aborts := &timeoutAborts{}
	c := newCluster(t, 3, kfake.WithLogger(aborts))
	produce(t, c.ListenAddrs(), h.Records[:len(h.Records)/2])
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir()})
	cfg.Kafka.TransactionTimeout = 2 * time.Second
	txid := cfg.Kafka.Group + "-keying-" + cfg.Kafka.InstanceID
	var held atomic.Int32
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if r := req.(*kmsg.EndTxnRequest); r.TransactionalID != txid || !held.CompareAndSwap(0, 1) {
			c.KeepControl()
			return nil, nil, false
		}
		// The first EndTxn of the keying stage: held past the
		// transaction's timeout, then answered by the broker (whose
		// timer aborted the transaction meanwhile).
		c.SleepControl(func() { time.Sleep(cfg.Kafka.TransactionTimeout + 1500*time.Millisecond) })
		return nil, nil, false
	})
	m := newModel()
	in := startSkew(t, cfg, m.sink())
	produce(t, c.ListenAddrs(), h.Records[len(h.Records)/2:])
	want := oracle(h, false)
	diff, err := m.waitEqual(want, stallLimit, in.instance)
	restarts := counterValue(t, in.reg, "cdcjoin_errors_total", "kind", "restart")
	if serr := in.stop(t); serr != nil {
		t.Errorf("seed %d: Run: %v", seed, serr)
	}
	if err != nil || diff != "" {
		t.Fatalf("seed %d: %v\n%s", seed, err, diff)
	}
	if held.Load() == 0 || aborts.of(txid) == 0 || restarts == 0 {
		t.Fatalf("seed %d: %d EndTxn held, %d transactions aborted at their timeout, %v keying restarts: the test proves nothing",
			seed, held.Load(), aborts.of(txid), restarts)
	}
	t.Logf("seed %d: %d transactions aborted at their timeout, %v keying restarts", seed, aborts.of(txid), restarts)
	checkFinal(t, seed, m, want)
}

// timeoutAborts is a kfake logger counting the transactions the broker
// aborted at their timeout, per transactional id.
type timeoutAborts struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *timeoutAborts) Logf(_ kfake.LogLevel, msg string, args ...any) {
	if !strings.HasPrefix(msg, "txn timeout abort") || len(args) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == nil {
		a.n = map[string]int{}
	}
	a.n[fmt.Sprint(args[0])]++
}

func (a *timeoutAborts) of(txid string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[txid]
}

// counterValue returns the sum of the counter name in reg over the series
// whose label has value.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelOf(m, label) == value {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// TestForwardEndTimeout: the broker does not answer a join worker's
// forwarding transaction's EndTxn (hot keys are salted, so workers
// forward). Before, the worker waited for it until the stuck limit and
// then Run failed; now the transaction ends at its deadline, the
// partition's worker restarts from its durable state (replicas drop the
// duplicate forwards) and the output equals the oracle in both sink
// models; fails unless a worker restarted.
func TestForwardEndTimeout(t *testing.T) {
	seed := clusterSeed(t)
	h := skewHistory(t, seed, 3000, 3, false)
	c := newCluster(t, 3)
	produce(t, c.ListenAddrs(), h.Records[:len(h.Records)/2])
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir(), keyedParts: 4, extra: fmt.Sprintf(skewYAML, 5, 3, 2)})
	cfg.Kafka.TransactionTimeout = 3 * time.Second
	held := holdEndTxn(t, c, cfg.Kafka.Group+"-join-")
	m := newModel()
	m.ordered = true
	in := startSkew(t, cfg, m.sink())
	produce(t, c.ListenAddrs(), h.Records[len(h.Records)/2:])
	select {
	case <-held:
	case <-time.After(60 * time.Second):
		t.Fatalf("seed %d: no forwarding transaction ended: the test proves nothing", seed)
	}
	want := oracle(h, false)
	diff, err := m.waitEqual(want, stallLimit, in.instance)
	restarts := counterValue(t, in.reg, "cdcjoin_errors_total", "kind", "restart")
	salted, _ := in.salted(t)
	if serr := in.stop(t); serr != nil {
		t.Errorf("seed %d: Run: %v", seed, serr)
	}
	if err != nil || diff != "" {
		t.Fatalf("seed %d: %v\n%s", seed, err, diff)
	}
	if restarts == 0 || salted == 0 {
		t.Fatalf("seed %d: %v restarts, %v keys salted: the test proves nothing", seed, restarts, salted)
	}
	checkFinal(t, seed, m, want)
	got, err := m.changelog()
	if err != nil {
		t.Fatalf("seed %d: changelog: %v", seed, err)
	}
	if d := cdcgen.Diff(want, got, 10); d != "" {
		t.Fatalf("seed %d: changelog model differs from the oracle:\n%s", seed, d)
	}
	t.Logf("seed %d: %v worker restarts, %v keys salted", seed, restarts, salted)
}

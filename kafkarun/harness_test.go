package kafkarun_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/internal/progress"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/metrics"
	"github.com/cdcjoin/cdcjoin/row"
)

const jobYAML = `name: %s
parent: {topic: %s, key: id}
child:  {topic: %s, key: id, parent_key: user_id}
join: %s
select: parent.id AS user_id, parent.firstname, parent.lastname, child.id AS domain_id, child.domain_name
state: {dir: %s, sync: false, batch_events: %d}
errors: {policy: %s%s}
kafka:
  keyed_partitions: %d
  brokers: [%s]
  instance_id: %s
  session_timeout: 6s
  commit_interval: 100ms
  transaction_timeout: 10s
`

type jobOpts struct {
	// instance is kafka.instance_id: "i0" when empty; "-" leaves it unset
	// (the default, derived from the host name and state.dir).
	name, join, policy, dlq, brokers, instance string
	parentTopic, childTopic                    string
	stateDir                                   string
	batch, keyedParts                          int
	extra                                      string // appended YAML (other sections)
}

func jobConfig(t testing.TB, o jobOpts) *config.Config {
	t.Helper()
	if o.name == "" {
		o.name = "user_domains"
	}
	if o.join == "" {
		o.join = "inner"
	}
	if o.policy == "" {
		o.policy = "stop"
	}
	if o.batch == 0 {
		o.batch = 500
	}
	switch o.instance {
	case "":
		o.instance = "i0"
	case "-":
		o.instance = `""`
	}
	if o.parentTopic == "" {
		o.parentTopic, o.childTopic = cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic
	}
	dlq := ""
	if o.dlq != "" {
		dlq = ", dlq_topic: " + o.dlq
	}
	y := fmt.Sprintf(jobYAML, o.name, o.parentTopic, o.childTopic, o.join, o.stateDir, o.batch, o.policy, dlq, o.keyedParts, o.brokers, o.instance) + o.extra
	cfg, err := config.Parse([]byte(y), "test.yaml")
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// newCluster starts kfake with the source topics.
func newCluster(t testing.TB, partitions int32, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	opts = append([]kfake.Opt{
		kfake.NumBrokers(3),
		kfake.SeedTopics(partitions, cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic),
		kfake.GroupMinSessionTimeout(time.Second),
	}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// produce writes records to their topic/partition in order, timestamped
// now (the Kafka record's time; the events' own time, source.ts_ms, is in
// their values). Not with the history's ts_ms: cdcgen's histories are of
// November 2023, past the broker's 7-day retention, so the broker's
// retention check (every 5 minutes) deleted a test's source records when
// it came between their produce and the keying stage's read (the plan
// hot-key tests' missing rows under load, seen in about one whole-package
// run in three: "Deleting segment ... due to log retention time
// 604800000ms breach" in the broker's log right after the produce).
func produce(t testing.TB, brokers []string, recs []cdcgen.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(100000))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	var mu sync.Mutex
	var first error
	for i := range recs {
		r := &recs[i]
		cl.Produce(ctx, &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if first != nil {
		t.Fatalf("produce: %v", first)
	}
}

// model is a ClickHouse ReplacingMergeTree stand-in shared by the sinks of
// all instances: a sink's changes apply when it flushes (writes not
// followed by a flush are lost, like an unacknowledged batch). Safe for
// concurrent use.
type model struct {
	mu      sync.Mutex
	rmt     *cdcgen.ReplacingMergeTree
	vcmt    *cdcgen.VersionedCollapsingMergeTree // the same changes in changelog mode
	err     error
	changes int
	// ordered makes the model check that the distinct changes of a row key
	// reach it (over all instances' sinks) in increasing version order;
	// exact re-emissions after a crash are ignored.
	ordered bool
	seen    map[string]bool
	order   map[cdcgen.RowKey]uint64
	// hist (with ordered) is every change each row key received (its
	// sink's name, the op and the version), for failure reports (history).
	hist map[cdcgen.RowKey][]string
}

func newModel() *model {
	return &model{rmt: cdcgen.NewReplacingMergeTree(), vcmt: cdcgen.NewVersionedCollapsingMergeTree(),
		seen: map[string]bool{}, order: map[cdcgen.RowKey]uint64{}, hist: map[cdcgen.RowKey][]string{}}
}

// history reports, for every row of want that got lacks or shows
// otherwise (at most limit), the changes its row key reached the model
// with: which sink, the op and the version, in arrival order.
func (m *model) history(want, got []cdcgen.JoinedRow, limit int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	n := 0
	cdcgen.EachDifference(want, got, func(w, g *cdcgen.JoinedRow) {
		r := w
		if r == nil {
			r = g
		}
		if n++; n > limit {
			return
		}
		h := m.hist[r.Key]
		if len(h) == 0 {
			h = []string{"never reached the sink"}
		}
		fmt.Fprintf(&b, "%s: %s\n", r.Key, strings.Join(h, ", "))
	})
	return b.String()
}

// modelSink is one instance's connection to the model. It checks that the
// versions it flushes never decrease per row key (with model.ordered:
// those of changes not seen before; exact re-emissions are a redo).
type modelSink struct {
	m       *model
	pending []row.Change
	last    map[cdcgen.RowKey]uint64
	name    string // in history reports ("": unnamed)
	// failAt, when > 0, makes the failAt-th Flush fail: after applying its
	// changes when failApplied (a crash after the insert, before the
	// commit), else before.
	failAt      int
	failApplied bool
	flushes     int
	// delay slows every Flush down (a lagging sink).
	delay time.Duration
}

func (m *model) sink() *modelSink { return &modelSink{m: m, last: map[cdcgen.RowKey]uint64{}} }

var errInjected = errors.New("injected sink failure")

func (s *modelSink) Write(_ context.Context, cs []row.Change) error {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	for _, c := range cs {
		s.pending = append(s.pending, cloneChange(c))
	}
	return nil
}

func (s *modelSink) Flush(context.Context) error {
	time.Sleep(s.delay)
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	cs := s.pending
	s.pending = nil
	s.flushes++
	fail := s.failAt > 0 && s.flushes >= s.failAt
	if fail && !s.failApplied {
		return errInjected
	}
	for _, c := range cs {
		// An exact re-emission (a worker restarted in the instance redoes
		// batches it had flushed, before the state committed them) may
		// come after later versions; with ordered, only new changes must
		// not regress.
		key, fresh := m.apply(c)
		if m.ordered {
			m.hist[key] = append(m.hist[key], fmt.Sprintf("%s %s v%d", s.name, c.Op, c.Version))
		}
		if v, ok := s.last[key]; ok && c.Version < v && fresh && m.err == nil {
			m.err = fmt.Errorf("version regression on row %s: %d after %d from one instance", key, c.Version, v)
		}
		s.last[key] = c.Version
	}
	if fail {
		return errInjected
	}
	return nil
}

func (s *modelSink) Close() error { return nil }

// apply applies c to both table models and reports c's row key and, when
// m.ordered, whether c is a change not seen before (always true without).
func (m *model) apply(c row.Change) (cdcgen.RowKey, bool) {
	m.changes++
	key, err := m.rmt.ApplyChange(&c)
	if err != nil && m.err == nil {
		m.err = err
	}
	vals, prev := texts(c.Values), texts(c.Prev)
	switch {
	case c.Op == row.Retract:
		m.vcmt.Apply(key, c.PrevVersion, -1, vals)
	case c.Prev != nil:
		m.vcmt.Apply(key, c.PrevVersion, -1, prev)
		m.vcmt.Apply(key, c.Version, +1, vals)
	default:
		m.vcmt.Apply(key, c.Version, +1, vals)
	}
	fresh := true
	if m.ordered {
		id := fmt.Sprintf("%s %s v%d %v %v@%d", key, c.Op, c.Version, vals, prev, c.PrevVersion)
		fresh = !m.seen[id]
		if fresh {
			m.seen[id] = true
			if last, ok := m.order[key]; ok && c.Version <= last && m.err == nil {
				m.err = fmt.Errorf("row %s: %s reached the sink after version %d", key, id, last)
			}
			m.order[key] = max(m.order[key], c.Version)
		}
	}
	return key, fresh
}

func texts(vs []row.Value) []string {
	if vs == nil {
		return nil
	}
	out := make([]string, len(vs))
	for i, v := range vs {
		if v.IsNull() {
			out[i] = cdcgen.Null
		} else {
			out[i] = v.Text()
		}
	}
	return out
}

// changelog returns the live rows of the changelog model.
func (m *model) changelog() ([]cdcgen.JoinedRow, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.vcmt.Live()
}

func cloneChange(c row.Change) row.Change {
	cp := c
	cp.ParentKey = append([]row.Value(nil), c.ParentKey...)
	if c.ChildKey != nil {
		cp.ChildKey = append([]row.Value(nil), c.ChildKey...)
	}
	cp.Values = append([]row.Value(nil), c.Values...)
	if c.Prev != nil {
		cp.Prev = append([]row.Value(nil), c.Prev...)
	}
	return cp
}

func (m *model) live() ([]cdcgen.JoinedRow, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rmt.Live(), m.err
}

// convergeLimit bounds a waitEqual that keeps seeing changes without
// reaching the oracle (a livelock): far beyond what a loaded CI machine
// needs for these histories.
const convergeLimit = 10 * time.Minute

// stallLimit is how long the model may see no change before waitEqual
// gives up: generous, because under -race on a loaded 2-core machine
// kfake itself was seen not answering for a minute (i/o timeouts of every
// client, sessions lost and rejoined) before the pipeline went on and
// converged; a healthy run returns as soon as the model equals the oracle.
const stallLimit = 3 * time.Minute

// waitEqual waits until the model shows want and returns the last diff
// ("" when equal). It gives up when no change reached the model for stall
// (the pipeline stopped making progress: the usual failure), or after
// convergeLimit in all (it keeps changing without converging), with a
// report of what is missing per partition and what each worker waits on.
// A wait on progress, not on a speed: a slow, loaded machine only takes
// longer.
func (m *model) waitEqual(want []cdcgen.JoinedRow, stall time.Duration, in *instance) (string, error) {
	var stopped <-chan struct{}
	if in != nil {
		stopped = in.done
	}
	began := time.Now()
	moved := began
	diff := "(not compared yet)"
	last := -1
	for {
		// Compare only once the flow of changes paused: comparing costs
		// more than the pipeline's own work on large tables.
		m.mu.Lock()
		n := m.changes
		m.mu.Unlock()
		if n != last {
			moved = time.Now()
		}
		stalled, tooLong := time.Since(moved) > stall, time.Since(began) > max(stall, convergeLimit)
		if n == last || stalled || tooLong {
			got, err := m.live()
			if err != nil {
				return "", err
			}
			if diff = cdcgen.Diff(want, got, 10); diff == "" {
				return "", nil
			}
			if stalled || tooLong {
				why := fmt.Sprintf("no change for %v", stall)
				if !stalled {
					why = fmt.Sprintf("changing but not converged after %v", time.Since(began).Round(time.Second))
				}
				return diff + "\n" + why + "; " + in.progress(want, got), nil
			}
		}
		last = n
		select {
		case <-stopped:
			return diff, fmt.Errorf("run stopped early: %v", in.err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// progress explains a wait that timed out: the differences per keyed
// partition and the instance's Status (what each worker waits on).
func (in *instance) progress(want, got []cdcgen.JoinedRow) string {
	if in == nil {
		return ""
	}
	s := "progress when the wait gave up:\n" + progress.Report(want, got, in.parts)
	if st := in.ready.Status(); st != nil {
		s += fmt.Sprint(st)
	} else {
		s += "(no status: Run is not running)"
	}
	return s
}

// instance is one running kafkarun.Run.
type instance struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error         // Run's result, once done is closed
	ready  *metrics.Readiness
	parts  int32 // keyed partitions (progress reports)
}

// newInstance returns an instance of a Run of cfg not started yet.
func newInstance(cfg *config.Config, cancel context.CancelFunc) *instance {
	parts := int32(cfg.Kafka.KeyedPartitions)
	if parts == 0 {
		parts = 3 // the clusters' topics
	}
	return &instance{cancel: cancel, done: make(chan struct{}), ready: &metrics.Readiness{}, parts: parts}
}

func start(t testing.TB, cfg *config.Config, s *modelSink, extra ...kgo.Opt) *instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	in := newInstance(cfg, cancel)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	go func() {
		defer close(in.done)
		in.err = kafkarun.Run(ctx, cfg, kafkarun.Options{Sink: s, Logger: log.With("instance", cfg.Kafka.InstanceID), ClientOpts: extra, Ready: in.ready})
	}()
	return in
}

// stop cancels the instance and returns Run's error.
func (in *instance) stop(t testing.TB) error {
	t.Helper()
	in.cancel()
	select {
	case <-in.done:
		return in.err
	case <-time.After(2 * time.Minute):
		t.Fatal("Run did not return within 2m of cancel")
		return nil
	}
}

// runDiff is a run's verdict: diff (what the sink lacks against the
// oracle, "" when equal) preceded by the wait's error and then the run's
// own (Run's return, from instance.stop), so a failure shows why first.
func runDiff(diff string, waitErr, runErr error) string {
	if waitErr != nil {
		diff = fmt.Sprintf("%v\n%s", waitErr, diff)
	}
	if runErr != nil {
		diff = fmt.Sprintf("Run: %v\n%s", runErr, diff)
	}
	return diff
}

func oracle(h *cdcgen.History, left bool) []cdcgen.JoinedRow {
	return cdcgen.Join(h.Final.Users, h.Final.Domains, left)
}

// brokerAdmin returns an admin client of brokers (a real cluster's, for
// the tests that create their topics there), closed when the test ends.
func brokerAdmin(t testing.TB, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func brokersOf(c *kfake.Cluster) string { return strings.Join(c.ListenAddrs(), ", ") }

// waitFor polls cond until it holds, failing the test after d: a wait on a
// condition, not a sleep that hopes the condition holds by then.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clusterSeed returns the seed of a randomized test: CDCJOIN_SEED when set
// (to reproduce a failure), else one from the clock. It is logged first,
// with the command that reruns it.
func clusterSeed(t testing.TB) int64 {
	t.Helper()
	seed := time.Now().UnixNano() % 1000
	if s := os.Getenv("CDCJOIN_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("CDCJOIN_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (rerun with CDCJOIN_SEED=%d go test -run '^%s$' ./kafkarun)", seed, seed, t.Name())
	return seed
}

// groupMembers returns how many members group has.
func groupMembers(t testing.TB, c *kfake.Cluster, group string) int {
	t.Helper()
	g, ok := describeGroup(t, c, group)
	if !ok {
		return 0
	}
	return len(g.Members)
}

// describeGroup describes group on c (false when it cannot be read).
func describeGroup(t testing.TB, c *kfake.Cluster, group string) (kadm.DescribedGroup, bool) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	gs, err := kadm.NewClient(cl).DescribeGroups(context.Background(), group)
	if err != nil {
		return kadm.DescribedGroup{}, false
	}
	g, ok := gs[group]
	if !ok || g.Err != nil {
		return kadm.DescribedGroup{}, false
	}
	return g, true
}

// holdsTopic reports whether the member of group with clientID is
// assigned a partition of topic (false when the group cannot be read).
func holdsTopic(t testing.TB, c *kfake.Cluster, group, clientID, topic string) bool {
	t.Helper()
	g, _ := describeGroup(t, c, group)
	for _, m := range g.Members {
		a, ok := m.Assigned.AsConsumer()
		if !ok || m.ClientID != clientID {
			continue
		}
		for _, at := range a.Topics {
			if at.Topic == topic && len(at.Partitions) > 0 {
				return true
			}
		}
	}
	return false
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

package kafkarun_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/deadletter"
	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
	"github.com/cdcjoin/cdcjoin/timejoin"
	"github.com/cdcjoin/cdcjoin/timejoin/timegen"
	"github.com/cdcjoin/cdcjoin/timejoin/timeop"
)

// TestTimeJoinRun runs seeded time-join histories (interval INNER, LEFT,
// RIGHT and FULL, window INNER and LEFT; -short: interval LEFT and FULL,
// window INNER; three source partitions a side plus a right partition
// that never has a record, so only wall-time idleness lets the
// watermark move; keys reused, pairs inside and outside the bound, out of
// order, late records, redeliveries) through Run on kfake, with a crash
// of the first instance (a sink failure after its INSERT, before the
// state commit), a restart, a second instance joining (its partitions
// rebuilt from the keyed log) and leaving again. The rows, deduplicated by
// (stream, seq) as the insert-mode sink does, must equal the SQL result
// over the records that are not late (timegen.SQL) — a (stream, seq)
// emitted twice must be the same row — and every dead-lettered record must
// be late against the watermark its letter names. Late probes (an insert
// a side in every source partition at the history's earliest time,
// produced once every keyed partition's watermark shows the flush) make
// some records late in every round whatever wall-time idleness did: they
// must be dead-lettered and change no row. Negative control: the
// SQL over all records, late ones included, must differ in some round.
func TestTimeJoinRun(t *testing.T) {
	seed := clusterSeed(t)
	cases := []struct {
		kind timejoin.Kind
		jt   timejoin.JoinType
	}{
		{timejoin.Interval, timejoin.LeftOuter}, {timejoin.Window, timejoin.Inner}, {timejoin.Interval, timejoin.FullOuter},
		{timejoin.Temporal, timejoin.LeftOuter},
		{timejoin.Interval, timejoin.Inner}, {timejoin.Window, timejoin.LeftOuter}, {timejoin.Interval, timejoin.RightOuter},
		{timejoin.Temporal, timejoin.Inner},
	}
	if testing.Short() {
		cases = cases[:4]
	}
	var late, differed int
	for i, c := range cases {
		t.Run(fmt.Sprintf("%s-%s", c.kind, c.jt), func(t *testing.T) {
			r := timeRun(t, rand.New(rand.NewPCG(uint64(seed), uint64(i))), c.kind, c.jt)
			late += r.late
			if r.controlDiffers {
				differed++
			}
		})
	}
	if t.Failed() {
		t.Fatalf("seed %d (CDCJOIN_SEED=%d to reproduce)", seed, seed)
	}
	if late == 0 {
		t.Fatalf("seed %d: no record was late in any round: the test shows nothing about late records", seed)
	}
	if differed == 0 {
		t.Fatalf("seed %d: negative control: the SQL over all records (late ones included) equals the output in every round", seed)
	}
}

type timeRunResult struct {
	late           int
	controlDiffers bool
}

// timeRun runs one history through Run (see TestTimeJoinRun).
func timeRun(t *testing.T, rng *rand.Rand, kind timejoin.Kind, jt timejoin.JoinType) timeRunResult {
	const ms = 1000
	s := timegen.RandomSpec(rng, kind, jt, []int64{1e6, 4e6}) // idle_timeout: µs of wall time in run
	const parts = 3
	// A temporal right side is a CDC table whose rows move between join
	// keys (the keying stage's index routes them), its time source.ts_ms;
	// no truncates (run keys each source partition on its own: a
	// truncate's order against the other partitions' changes is
	// undefined).
	temporal := kind == timejoin.Temporal
	events := timegen.Generate(rng, timegen.Options{Kind: kind, N: 1200, OutOfOrderness: s.OutOfOrderness / ms, Scale: ms, Partitions: parts, Keys: 20, NoTruncate: temporal})
	// Flush records far past the history: the final watermark makes
	// every row of the history due whatever idleness did on the way.
	nHist := len(events)
	events, flushAt := timegen.WithFlush(events, parts, 1000*(s.Size+abs(s.Upper)+abs(s.Lower)+ms))
	// Late probes, produced once every keyed partition's watermark has
	// passed the flush: an insert a side in every source partition near
	// the history's earliest time, with the earliest event's key, so each
	// is late whatever wall-time idleness did (the join's watermark is
	// monotone), and the SQL over all records pairs them.
	nFlushed := len(events)
	events = append(events, lateProbes(s, events[:nHist], parts)...)
	recs := timegen.Encode(events, timegen.EncodeOptions{Seed: rng.Uint64(), Temporal: temporal})

	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, timegen.LeftTopic), kfake.SeedTopics(parts+1, timegen.RightTopic),
		kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	cfgOf := func(id string) *config.Config {
		y := timegen.Config(timegen.ConfigOptions{Name: "tj", Spec: s, StateDir: t.TempDir(), DLQ: true, TimeSource: temporal,
			Extra: fmt.Sprintf("kafka:\n  keyed_partitions: 3\n  brokers: [%s]\n  instance_id: %s\n  client_id: cdcjoin-%s\n  session_timeout: 6s\n  commit_interval: 100ms\n  transaction_timeout: 10s\n",
				strings.Join(brokers, ", "), id, id)})
		cfg, err := config.Parse([]byte(y), "tj.yaml")
		if err != nil {
			t.Fatalf("%v\n%s", err, y)
		}
		return cfg
	}
	cfgA, cfgB := cfgOf("i0"), cfgOf("i1")
	m := &seqModel{spec: s, rows: map[string]map[uint64]string{}}
	dlq := newTopicReader(t, brokers, "tj.dlq")
	defer dlq.close()

	next := 0 // recs are in event order: produce them in slices
	cut := func(f float64) []timegen.Record {
		from := next
		for next < len(recs) && recs[next].Event < nFlushed && (f > 1 || recs[next].Event < int(f*float64(nHist))) {
			next++
		}
		return recs[from:next]
	}
	produceTime(t, brokers, cut(0.3))

	// A: crashes at the first INSERT once armed (after it, before the
	// state commit), and is restarted on its state.
	a := runTime(t, cfgA, m, true)
	caughtUp := func(in *timeInstance) func() bool {
		return func() bool {
			ok, _, err := kafkarun.CaughtUp(context.Background(), cfgA)
			return ok && err == nil || in.stopped()
		}
	}
	waitFor(t, 3*time.Minute, "the first instance to catch up", caughtUp(a))
	m.arm()
	// The crash needs an INSERT, and a slice may emit nothing (no window
	// closes in it, say): more slices follow until one does.
	for _, f := range []float64{0.55, 0.65, 0.75} {
		produceTime(t, brokers, cut(f))
		waitFor(t, 3*time.Minute, "the first instance to stop or catch up", caughtUp(a))
		if a.stopped() {
			break
		}
	}
	select {
	case <-a.done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the armed sink failure did not stop the first instance within 3m")
	}
	if a.err == nil || !strings.Contains(a.err.Error(), errInjected.Error()) {
		t.Fatalf("first instance: Run returned %v, want the injected sink failure", a.err)
	}
	first := a
	a = runTime(t, cfgA, m, false)
	defer a.cancel()
	// B joins (a rebalance: its partitions rebuilt from the keyed log),
	// then leaves (they move back to A, whose state for them is behind).
	b := runTime(t, cfgB, m, false)
	produceTime(t, brokers, cut(0.8))
	waitFor(t, 3*time.Minute, "both instances in the join group", func() bool { return groupMembers(t, c, cfgA.Kafka.JoinGroup()) == 2 })
	waitFor(t, 3*time.Minute, "both instances to catch up", caughtUp(b))
	// Whether B keyed a right source partition (then it rebuilt that
	// partition's index from the changelog): the keying group's balancer
	// may give it left partitions only.
	bKeyedRight := holdsTopic(t, c, cfgB.Kafka.KeyingGroup(), cfgB.Kafka.ClientID, timegen.RightTopic)
	if err := b.stop(t); err != nil {
		t.Fatalf("second instance: %v", err)
	}
	produceTime(t, brokers, cut(2))

	// The output converges to the SQL over the records that are not late.
	eFinal := flushAt - s.OutOfOrderness - s.AllowedLateness
	var want, got []string
	var lateEv []bool
	deadline, moved, last := time.Now().Add(convergeLimit), time.Now(), -1
	for {
		lateEv = m.lateEvents(t, dlq.records(), recs, events, s)
		for i := nFlushed; i < len(events); i++ {
			lateEv[i] = true // not produced yet
		}
		want = timegen.SQL(s, events, lateEv, eFinal)
		got = m.sorted()
		if slices.Equal(got, want) {
			break
		}
		if n := m.count(); n != last {
			last, moved = n, time.Now()
		}
		if time.Since(moved) > 90*time.Second || time.Now().After(deadline) || a.stopped() {
			// Where it stopped: the keyed log replayed by a fresh
			// operator (the join stage stalled if it gives the rows;
			// else the keying stage did not write them), the groups'
			// lag, the published watermarks.
			replayed, _, logs := replayKeyed(t, brokers, cfgA)
			n := 0
			for _, r := range replayed {
				n += len(r)
			}
			ok, behind, err := kafkarun.CaughtUp(context.Background(), cfgA)
			t.Fatalf("%s %s: %d rows, want %d (run err %v); the keyed log gives %d rows; caught up %v (%s, %v); min join watermark %v s (flush at %v s); keyed logs:\n%s\n%s",
				kind, jt, len(got), len(want), a.err, n, ok, behind, err, minWatermark(t, a.reg, 3), float64(eFinal)/1e6, logs, strings.Join(testkit.SortedDiff(got, want, 20), "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The probes: produced once every keyed partition's watermark shows
	// the flush, each must come out dead-lettered and change no row.
	waitFor(t, 3*time.Minute, "every keyed partition's watermark to pass the flush", func() bool {
		return int64(math.Round(minWatermark(t, a.reg, 3)*1e6)) >= eFinal || a.stopped()
	})
	probes := recs[next:]
	produceTime(t, brokers, probes)
	waitFor(t, 3*time.Minute, "every late probe in the dead-letter topic", func() bool {
		lateEv = m.lateEvents(t, dlq.records(), recs, events, s)
		for i := nFlushed; i < len(events); i++ {
			if !lateEv[i] {
				return a.stopped()
			}
		}
		return true
	})
	if a.stopped() {
		t.Fatalf("%s %s: the instance stopped: %v", kind, jt, a.err)
	}
	if want, got = timegen.SQL(s, events, lateEv, eFinal), m.sorted(); !slices.Equal(got, want) {
		t.Fatalf("%s %s: after the late probes %d rows, want %d:\n%s", kind, jt, len(got), len(want), strings.Join(testkit.SortedDiff(got, want, 20), "\n"))
	}
	if err := m.failure(); err != nil {
		t.Fatal(err)
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("first instance: %v", err)
	}
	// Exactly once: every stream's rows are what its keyed partition's
	// log gives the operator from the start (seq for seq), and the dead
	// letters are its late records, each once or more (a batch redone
	// after a crash writes its letters again).
	replayed, rejected, _ := replayKeyed(t, brokers, cfgA)
	for stream, rows := range m.rows {
		topic := cfgA.Kafka.KeyedTopic() + "/"
		if !strings.HasPrefix(stream, topic) {
			t.Fatalf("stream %q is not a partition of %s", stream, topic)
		}
		p, _, _ := strings.Cut(stream[len(topic):], "@")
		if !maps.Equal(rows, replayed[p]) {
			t.Errorf("stream %s: %d rows, its keyed log gives %d (or other ones)", stream, len(rows), len(replayed[p]))
		}
		delete(replayed, p)
	}
	for p, rows := range replayed {
		if len(rows) > 0 {
			t.Errorf("keyed partition %s: its log gives %d rows, the sink has none", p, len(rows))
		}
	}
	lettered := map[string]bool{}
	for _, l := range dlq.records() {
		h := map[string]string{}
		for _, x := range l.Headers {
			h[x.Key] = string(x.Value)
		}
		lettered[h[deadletter.HeaderSourceTopic]+"/"+h[deadletter.HeaderSourcePartition]+"@"+h[deadletter.HeaderSourceOffset]] = true
	}
	if !maps.Equal(lettered, rejected) {
		t.Errorf("%d records dead-lettered, the keyed logs reject %d (or other ones)", len(lettered), len(rejected))
	}
	// The metrics: every late record counted (once or more), the join
	// watermark published.
	var counted, others, restored float64
	watermarks := 0
	for _, in := range []*timeInstance{first, a, b} {
		mfs, err := in.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, mt := range mf.GetMetric() {
				switch mf.GetName() {
				case "cdcjoin_late_records_total":
					counted += mt.GetCounter().GetValue()
				case "cdcjoin_keying_records_produced_total":
					if labelOf(mt, "kind") == "time_other" {
						others += mt.GetCounter().GetValue()
					}
				case "cdcjoin_keying_index_restore_records_total":
					if in == b && labelOf(mt, "mode") == "rebuild" {
						restored += mt.GetCounter().GetValue()
					}
				case "cdcjoin_time_watermark_seconds":
					// Seconds as a float: µs again, rounded (W·1e-6·1e6 may
					// fall a hair below W).
					if int64(math.Round(mt.GetGauge().GetValue()*1e6)) >= eFinal {
						watermarks++
					}
				}
			}
		}
	}
	if counted < float64(len(lettered)) || watermarks == 0 {
		t.Errorf("cdcjoin_late_records_total %v for %d late records; %d final join watermarks published", counted, len(lettered), watermarks)
	}
	if temporal && (others == 0 || (bKeyedRight && restored == 0)) {
		// The rows moved between keyed partitions, and the second
		// instance, if it keyed right partitions, did so from an index it
		// rebuilt from the changelog.
		t.Errorf("temporal: %v keyed records for the other partitions of moved rows; the second instance (keyed right partitions: %v) read %v index changelog records to rebuild", others, bKeyedRight, restored)
	}
	nLate := 0
	for i, l := range lateEv {
		if l && i >= nHist && i < nFlushed {
			t.Errorf("a flush record was judged late: %v", events[i])
		}
		if !l && i >= nFlushed {
			t.Errorf("a late probe was not judged late: %v", events[i])
		}
		if l {
			nLate++
		}
	}
	all := timegen.SQL(s, events, make([]bool, len(events)), eFinal)
	differs := !slices.Equal(all, got)
	t.Logf("%s %s: %d events, %d rows (%d from i1), %d late, streams %d; SQL over all records differs: %v; temporal: %v records for moved rows' other partitions, %v index records rebuilt by i1 (keyed right partitions: %v)",
		kind, jt, nHist, len(got), m.countFrom("i1"), nLate, len(m.rows), differs, others, restored, bKeyedRight)
	return timeRunResult{late: nLate, controlDiffers: differs}
}

// lateProbes returns an insert a side in each of parts source partitions
// with the key of hist's earliest keyed event: left ones at its time,
// right ones where they would pair with them (an interval's lower bound
// later, the same window).
func lateProbes(s *timejoin.Spec, hist []timegen.Event, parts int32) []timegen.Event {
	first := hist[0]
	for _, e := range hist {
		if e.Key != "" && (first.Key == "" || e.Time < first.Time) {
			first = e
		}
	}
	var out []timegen.Event
	for _, side := range []timegen.Side{timejoin.SideLeft, timejoin.SideRight} {
		for p := int32(0); p < parts; p++ {
			id := fmt.Sprintf("late-%s%d", side, p)
			at := first.Time
			if side == timejoin.SideRight && s.Kind == timejoin.Interval {
				at += s.Lower
			}
			out = append(out, timegen.Event{Side: side, Partition: p, Op: timejoin.Insert, Time: at, Key: first.Key, PK: id, Val: "late"})
		}
	}
	return out
}

// minWatermark returns the smallest cdcjoin_time_watermark_seconds over
// reg's keyed partitions, or -Inf while fewer than n are published.
func minWatermark(t *testing.T, reg *prometheus.Registry, n int) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	low, seen := math.Inf(1), 0
	for _, mf := range mfs {
		if mf.GetName() != "cdcjoin_time_watermark_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			seen++
			low = min(low, mt.GetGauge().GetValue())
		}
	}
	if seen < n {
		return math.Inf(-1)
	}
	return low
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func produceTime(t *testing.T, brokers []string, recs []timegen.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var krs []*kgo.Record
	for _, r := range recs {
		krs = append(krs, &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value})
	}
	if err := cl.ProduceSync(context.Background(), krs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// timeInstance is one Run of a time join and its metrics.
type timeInstance struct {
	*instance
	reg *prometheus.Registry
}

func (in *timeInstance) stopped() bool {
	select {
	case <-in.done:
		return true
	default:
		return false
	}
}

// runTime starts Run of cfg with one sink per keyed partition into m
// (crashy: the sinks fail once m is armed).
func runTime(t *testing.T, cfg *config.Config, m *seqModel, crashy bool) *timeInstance {
	ctx, cancel := context.WithCancel(context.Background())
	in := &timeInstance{instance: newInstance(cfg, cancel), reg: prometheus.NewRegistry()}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	id := cfg.Kafka.InstanceID
	go func() {
		defer close(in.done)
		in.err = kafkarun.Run(ctx, cfg, kafkarun.Options{Logger: log.With("instance", id), Registry: in.reg,
			NewSink: func(_ context.Context, p kafkarun.SinkFor) (sink.Sink, error) {
				return &seqSink{m: m, stream: p.Stream, instance: id, crashy: crashy}, nil
			}})
	}()
	return in
}

// seqModel is the insert-mode ClickHouse table of the time joins' output:
// rows by (stream, seq), where a row flushed again must be the same row.
type seqModel struct {
	spec *timejoin.Spec
	mu   sync.Mutex
	rows map[string]map[uint64]string
	from map[string]int // rows first flushed by an instance
	err  error
	// armed: the next flush of a crashy sink fails after applying its
	// rows (once).
	armed, fired bool
}

func (m *seqModel) arm() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.armed = true
}

func (m *seqModel) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, s := range m.rows {
		n += len(s)
	}
	return n
}

func (m *seqModel) countFrom(instance string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.from[instance]
}

func (m *seqModel) failure() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// sorted returns the rows, sorted; a stream with a gap in its seq
// numbers is a failure.
func (m *seqModel) sorted() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, s := range m.rows {
		for _, r := range s {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// lateEvents maps the dead letters to the events they name, checking each
// is a late record against the watermark it names (timegen.LateByLetters).
func (m *seqModel) lateEvents(t *testing.T, letters []*kgo.Record, recs []timegen.Record, events []timegen.Event, s *timejoin.Spec) []bool {
	t.Helper()
	hs := make([]map[string]string, len(letters))
	for i, l := range letters {
		hs[i] = map[string]string{}
		for _, x := range l.Headers {
			hs[i][x.Key] = string(x.Value)
		}
	}
	late, err := timegen.LateByLetters(s, recs, events, hs)
	if err != nil {
		t.Fatal(err)
	}
	return late
}

// seqSink is one keyed partition's connection to the model.
type seqSink struct {
	m        *seqModel
	stream   string
	instance string
	crashy   bool
	pending  []row.Change
}

func (s *seqSink) Write(_ context.Context, cs []row.Change) error {
	for _, c := range cs {
		s.pending = append(s.pending, cloneChange(c))
	}
	return nil
}

func (s *seqSink) Flush(context.Context) error {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	cs := s.pending
	s.pending = nil
	if m.rows[s.stream] == nil {
		m.rows[s.stream] = map[uint64]string{}
	}
	if m.from == nil {
		m.from = map[string]int{}
	}
	rows := m.rows[s.stream]
	for _, c := range cs {
		if c.Op != row.Insert && m.err == nil {
			m.err = fmt.Errorf("stream %s: a %v change: a time join inserts only", s.stream, c.Op)
		}
		txt := timegen.Text(m.spec, c.Values)
		if old, ok := rows[c.Version]; ok {
			if old != txt && m.err == nil {
				m.err = fmt.Errorf("stream %s seq %d emitted as %q and as %q", s.stream, c.Version, old, txt)
			}
			continue
		}
		rows[c.Version] = txt
		m.from[s.instance]++
	}
	if s.crashy && m.armed && !m.fired {
		m.fired = true
		return errInjected
	}
	return nil
}

func (s *seqSink) Close() error { return nil }

// topicReader reads a topic (read committed) into memory in the
// background until closed.
type topicReader struct {
	cl   *kgo.Client
	mu   sync.Mutex
	recs []*kgo.Record
	done chan struct{}
}

func newTopicReader(t *testing.T, brokers []string, topic string) *topicReader {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	r := &topicReader{cl: cl, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			fs := cl.PollFetches(context.Background())
			if fs.IsClientClosed() {
				return
			}
			fs.EachRecord(func(rec *kgo.Record) {
				r.mu.Lock()
				r.recs = append(r.recs, rec)
				r.mu.Unlock()
			})
		}
	}()
	return r
}

func (r *topicReader) records() []*kgo.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.recs)
}

func (r *topicReader) close() {
	r.cl.Close()
	<-r.done
}

// replayKeyed applies every keyed partition's log (read committed, to its
// end) to a fresh time-join operator, as a new owner rebuilding it would:
// the rows it emits per keyed partition (seq → row) and the records it
// rejects as late ("topic/partition@offset").
func replayKeyed(t *testing.T, brokers []string, cfg *config.Config) (map[string]map[uint64]string, map[string]bool, string) {
	t.Helper()
	ts, err := job.TimeJoin(cfg)
	if err != nil {
		t.Fatal(err)
	}
	topic := cfg.Kafka.KeyedTopic()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	type part struct {
		op   *timeop.Operator
		st   *keyed.MemState
		next int64
	}
	parts := map[int32]*part{}
	rows := map[string]map[uint64]string{}
	rejected := map[string]bool{}
	summary := map[int32]map[timejoin.Source]*logSummary{}
	left := 0
	ends.Each(func(o kadm.ListedOffset) {
		op := timeop.New(ts.Spec, 0)
		for p := int32(0); p < 3; p++ {
			op.Declare(timejoin.Source{Side: timejoin.SideLeft, Partition: p})
		}
		for p := int32(0); p < 4; p++ {
			op.Declare(timejoin.Source{Side: timejoin.SideRight, Partition: p})
		}
		st := keyed.NewMemState()
		if err := op.Load(st); err != nil {
			t.Fatal(err)
		}
		parts[o.Partition] = &part{op: op, st: st}
		rows[strconv.Itoa(int(o.Partition))] = map[uint64]string{}
		if o.Offset > 0 {
			left++
		}
	})
	var m keyedlog.Msg
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v", topic, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			pt := parts[r.Partition]
			if r.Offset < pt.next {
				return
			}
			pt.next = r.Offset + 1
			if end, _ := ends.Lookup(topic, r.Partition); pt.next == end.Offset {
				left--
			}
			if r.Attrs.IsControl() {
				return
			}
			if err := keyedlog.Decode(nil, r.Key, r.Value, nil, &m); err != nil {
				t.Fatal(err)
			}
			if m.Kind == keyedlog.KindEpoch {
				return
			}
			sum := summary[r.Partition]
			if sum == nil {
				sum = map[timejoin.Source]*logSummary{}
				summary[r.Partition] = sum
			}
			switch m.Kind {
			case keyedlog.KindTime:
				src := timejoin.Source{Side: m.Time.Side, Partition: m.Source.Partition}
				if sum[src] == nil {
					sum[src] = &logSummary{max: timejoin.MinTime}
				}
				sum[src].records++
				sum[src].max = max(sum[src].max, m.Time.Time)
			case keyedlog.KindWatermark:
				if sum[m.Watermark.Source] == nil {
					sum[m.Watermark.Source] = &logSummary{max: timejoin.MinTime}
				}
				w := m.Watermark
				sum[m.Watermark.Source].last = &w
				sum[m.Watermark.Source].marks++
			}
			out := keyedlog.Out{
				Emit: func(c *row.Change) error {
					rows[strconv.Itoa(int(r.Partition))][c.Version] = timegen.Text(ts.Spec, c.Values)
					return nil
				},
				Reject: func(m *keyedlog.Msg, _ string, _, _ int64) error {
					src := cfg.TimeJoin.Left.Topic
					if m.Time.Side == timejoin.SideRight {
						src = cfg.TimeJoin.Right.Topic
					}
					rejected[fmt.Sprintf("%s/%d@%d", src, m.Source.Partition, m.Source.Offset)] = true
					return nil
				},
			}
			if err := pt.op.Step(pt.st, &m, out); err != nil {
				t.Fatal(err)
			}
		})
	}
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(summary)) {
		fmt.Fprintf(&b, "  keyed %d (W %d):", p, parts[p].op.Join().Watermark())
		for _, src := range slices.SortedFunc(maps.Keys(summary[p]), func(x, y timejoin.Source) int { return strings.Compare(x.String(), y.String()) }) {
			fmt.Fprintf(&b, " %s", src)
			sm := summary[p][src]
			fmt.Fprintf(&b, "{%d recs max %d, %d marks", sm.records, sm.max, sm.marks)
			if sm.last != nil {
				fmt.Fprintf(&b, " last max %d idle %v", sm.last.Max, sm.last.Idle)
			}
			b.WriteString("}")
		}
		b.WriteString("\n")
	}
	return rows, rejected, b.String()
}

// logSummary is what a keyed log says of one source partition.
type logSummary struct {
	records, marks int
	max            int64
	last           *keyedlog.Watermark
}

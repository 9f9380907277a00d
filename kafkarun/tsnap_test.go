package kafkarun_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/timejoin"
	"github.com/cdcjoin/cdcjoin/timejoin/timegen"
)

// TestTimeSnapshots runs a time join (interval LEFT, three source
// partitions a side, three keyed partitions) through Run on kfake with
// operator-state snapshots every 200 keyed records: the history produced
// in slices, a second instance joining once the keyed log was trimmed
// (log start > 0: its partitions must be loaded from snapshots, which the
// metric counts) and leaving again (the partitions move back to the first
// instance, whose state for them may be older than the log start), and
// the output, deduplicated by (stream, seq) — a seq emitted twice must be
// the same row — must equal the SQL over the records that are not late.
// The same at 8× the history (same rate, bound and keys) must end with
// about the same retained keyed records (high watermark − log start,
// summed) and snapshot topic; the 8× history with snapshots off
// (snapshot_records -1: the negative control of the measure) retains all
// of its keyed log.
func TestTimeSnapshots(t *testing.T) {
	seed := clusterSeed(t)
	n := 500
	if testing.Short() {
		n = 250
	}
	if v := os.Getenv("CDCJOIN_TSNAP_EVENTS"); v != "" { // measurements: a longer history
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("CDCJOIN_TSNAP_EVENTS=%q: %v", v, err)
		}
	}
	short := timeSnapRun(t, rand.New(rand.NewPCG(uint64(seed), 1)), n, true, true)
	long := timeSnapRun(t, rand.New(rand.NewPCG(uint64(seed), 1)), 8*n, true, false)
	off := timeSnapRun(t, rand.New(rand.NewPCG(uint64(seed), 1)), 8*n, false, false)
	t.Logf("keyed records written / retained, snapshot topic records / bytes, state bytes (last snapshots, summed), rebuild seconds (partitions loaded):")
	for _, r := range []struct {
		name string
		r    snapResult
	}{{"short", short}, {"8x", long}, {"8x, snapshots off", off}} {
		t.Logf("  %-18s %7d / %6d   %4d / %8d   %7d   %.3fs (%d %s)", r.name, r.r.written, r.r.retained, r.r.snapRecords, r.r.snapBytes, r.r.stateBytes, r.r.rebuildSeconds, r.r.rebuilt, r.r.rebuildMode)
	}
	// 8× the events; the keyed records also count watermark records (a
	// few per keying transaction, whatever its size).
	if long.written < 4*short.written {
		t.Fatalf("seed %d: the long history wrote %d keyed records, the short one %d: not much longer", seed, long.written, short.written)
	}
	// About the same, while the history is 8× longer: within 2× of the
	// short one's, or what trimming leaves by design whatever the length
	// (per partition: up to two snapshot intervals — a trim stops at the
	// committed offset, which lags the snapshot — and the commit lag).
	lim := max(2*short.retained, snapParts*(2*snapEvery+100))
	if long.retained > lim {
		t.Errorf("seed %d: the 8x history retains %d keyed records, the short one %d (limit %d): the keyed log is not bounded", seed, long.retained, short.retained, lim)
	}
	if lim := 2*short.snapBytes + 64<<10; long.snapBytes > lim {
		t.Errorf("seed %d: the 8x history's snapshot topic holds %d bytes, the short one's %d (limit %d)", seed, long.snapBytes, short.snapBytes, lim)
	}
	if off.retained != off.written || off.retained <= lim {
		t.Errorf("seed %d: negative control: with snapshots off the 8x history retains %d of %d keyed records (limit of the bounded runs %d): the measure shows nothing", seed, off.retained, off.written, lim)
	}
	if t.Failed() {
		t.Fatalf("seed %d (CDCJOIN_SEED=%d to reproduce)", seed, seed)
	}
}

// snapEvery is TestTimeSnapshots' kafka.snapshot_records; snapParts its
// source and keyed partitions.
const (
	snapEvery = 200
	snapParts = 3
)

type snapResult struct {
	written, retained      int64 // keyed records: high watermarks, and minus log starts, summed
	snapRecords, snapBytes int64 // the snapshot topic's retained records and their value bytes
	stateBytes             int64 // the last snapshots' bytes, summed over partitions
	rebuildSeconds         float64
	rebuilt                int
	rebuildMode            string
}

// timeSnapRun runs one history of n events (see TestTimeSnapshots). With
// fault, the fourth produce request to partition 0 of the snapshot topic
// (with one-chunk snapshots: the end record of its second snapshot, its
// chunk written) fails: a writer stopped between a snapshot's chunks and
// its end record; it must fire and change nothing.
func timeSnapRun(t *testing.T, rng *rand.Rand, n int, snapshots, fault bool) snapResult {
	const ms = 1000
	s := timegen.RandomSpec(rng, timejoin.Interval, timejoin.LeftOuter, []int64{1e6})
	events := timegen.Generate(rng, timegen.Options{Kind: timejoin.Interval, N: n, OutOfOrderness: s.OutOfOrderness / ms, Scale: ms, Partitions: snapParts, Keys: 20})
	nHist := len(events)
	events, flushAt := timegen.WithFlush(events, snapParts, 1000*(abs(s.Upper)+abs(s.Lower)+ms))
	recs := timegen.Encode(events, timegen.EncodeOptions{Seed: rng.Uint64()})

	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(snapParts, timegen.LeftTopic), kfake.SeedTopics(snapParts, timegen.RightTopic),
		kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	every := snapEvery
	if !snapshots {
		every = -1
	}
	cfgOf := func(id string) *config.Config {
		y := timegen.Config(timegen.ConfigOptions{Name: "tj", Spec: s, StateDir: t.TempDir(), DLQ: true,
			Extra: fmt.Sprintf("kafka:\n  keyed_partitions: 3\n  brokers: [%s]\n  instance_id: %s\n  session_timeout: 6s\n  commit_interval: 100ms\n  transaction_timeout: 10s\n  snapshot_records: %d\n  snapshot_interval: 1s\n",
				strings.Join(brokers, ", "), id, every)})
		cfg, err := config.Parse([]byte(y), "tj.yaml")
		if err != nil {
			t.Fatalf("%v\n%s", err, y)
		}
		return cfg
	}
	cfgA, cfgB := cfgOf("i0"), cfgOf("i1")
	var f *kfake.FaultHandle
	if fault {
		var produces atomic.Int32
		f = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: cfgA.Kafka.SnapshotTopic(), Partitions: []int32{0}, Err: kerr.InvalidRecord,
			When: func(kmsg.Request) bool { return produces.Add(1) == 4 }})
	}
	m := &seqModel{spec: s, rows: map[string]map[uint64]string{}}
	dlq := newTopicReader(t, brokers, "tj.dlq")
	defer dlq.close()
	adm := kadm.NewClient(mustClient(t, c))

	next := 0
	cut := func(f float64) []timegen.Record {
		from := next
		for next < len(recs) && (f > 1 || recs[next].Event < int(f*float64(nHist))) {
			next++
		}
		return recs[from:next]
	}
	a := runTime(t, cfgA, m, false)
	defer a.cancel()
	caughtUp := func(in *timeInstance) func() bool {
		return func() bool {
			ok, _, err := kafkarun.CaughtUp(context.Background(), cfgA)
			return ok && err == nil || in.stopped()
		}
	}
	for _, f := range []float64{0.2, 0.4, 0.6} {
		produceTime(t, brokers, cut(f))
		waitFor(t, 3*time.Minute, "the first instance to catch up", caughtUp(a))
	}
	if snapshots {
		waitFor(t, 3*time.Minute, "a trimmed keyed partition (log start > 0)", func() bool {
			return logStarts(t, adm, cfgA.Kafka.KeyedTopic()) > 0 || a.stopped()
		})
	}
	// B joins: its partitions are rebuilt (from snapshots when trimmed).
	b := runTime(t, cfgB, m, false)
	waitFor(t, 3*time.Minute, "both instances in the join group", func() bool { return groupMembers(t, c, cfgA.Kafka.JoinGroup()) == 2 || a.stopped() || b.stopped() })
	waitFor(t, 3*time.Minute, "the second instance's partitions to catch up", func() bool {
		owned := counter(t, b.reg, "cdcjoin_join_owned_partitions")
		_, n, _ := joinCatchUps(t, b.reg)
		return owned > 0 && n >= int(owned) || b.stopped()
	})
	produceTime(t, brokers, cut(0.8))
	waitFor(t, 3*time.Minute, "both instances to catch up", caughtUp(b))
	res := snapResult{}
	res.rebuildSeconds, res.rebuilt, res.rebuildMode = joinCatchUps(t, b.reg)
	if loads := counter(t, b.reg, "cdcjoin_time_snapshot_loads_total"); snapshots && loads == 0 {
		t.Fatalf("the second instance loaded no partition from a snapshot though the keyed log was trimmed (log starts %d)", logStarts(t, adm, cfgA.Kafka.KeyedTopic()))
	}
	if err := b.stop(t); err != nil {
		t.Fatalf("second instance: %v", err)
	}
	produceTime(t, brokers, cut(2))

	eFinal := flushAt - s.OutOfOrderness - s.AllowedLateness
	var want, got []string
	deadline, moved, last := time.Now().Add(convergeLimit), time.Now(), -1
	for {
		lateEv := m.lateEvents(t, dlq.records(), recs, events, s)
		want = timegen.SQL(s, events, lateEv, eFinal)
		got = m.sorted()
		if slices.Equal(got, want) {
			break
		}
		if k := m.count(); k != last {
			last, moved = k, time.Now()
		}
		if time.Since(moved) > 90*time.Second || time.Now().After(deadline) || a.stopped() {
			t.Fatalf("%d events, snapshots %v: %d rows, want %d (run err %v):\n%s", n, snapshots, len(got), len(want), a.err, strings.Join(testkit.SortedDiff(got, want, 20), "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := m.failure(); err != nil {
		t.Fatal(err)
	}
	if snapshots {
		// The last slice is trimmed too once a snapshot follows it.
		waitFor(t, 3*time.Minute, "a snapshot near the end of every keyed partition", func() bool {
			snaps := gauges(t, a.reg, "cdcjoin_time_snapshot_offset")
			ends, err := adm.ListEndOffsets(context.Background(), cfgA.Kafka.KeyedTopic())
			if err != nil || len(snaps) < snapParts {
				return a.stopped()
			}
			ok := true
			ends.Each(func(o kadm.ListedOffset) {
				ok = ok && o.Offset-int64(snaps[strconv.Itoa(int(o.Partition))]) <= int64(every+100)
			})
			return ok || a.stopped()
		})
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("first instance: %v", err)
	}
	if fault {
		if f.Hits() == 0 || counter(t, a.reg, "cdcjoin_errors_total", "kind", "snapshot") == 0 {
			t.Fatalf("the fault between a snapshot's chunk and its end record never fired (%d hits; snapshot errors %v): the test shows nothing about it",
				f.Hits(), counter(t, a.reg, "cdcjoin_errors_total", "kind", "snapshot"))
		}
	}
	keyed, snap := cfgA.Kafka.KeyedTopic(), cfgA.Kafka.SnapshotTopic()
	res.written = keyedEnds(t, adm, keyed)
	res.retained = res.written - logStarts(t, adm, keyed)
	res.snapRecords, res.snapBytes = topicBytes(t, brokers, adm, snap)
	res.stateBytes = int64(gaugeSum(t, a.reg, "cdcjoin_time_snapshot_bytes"))
	t.Logf("%d events, snapshots %v: %d rows (%d from i1), %d late; keyed %d written, %d retained; snapshots %d records, %d bytes", nHist, snapshots, len(got), m.countFrom("i1"), trues(m.lateEvents(t, dlq.records(), recs, events, s)), res.written, res.retained, res.snapRecords, res.snapBytes)
	return res
}

// logStarts and keyedEnds sum a topic's log start and end offsets.
func logStarts(t *testing.T, adm *kadm.Client, topic string) int64 {
	return offsetSum(t, topic, adm.ListStartOffsets)
}

func keyedEnds(t *testing.T, adm *kadm.Client, topic string) int64 {
	return offsetSum(t, topic, adm.ListEndOffsets)
}

// offsetSum sums the offsets list gives for topic's partitions.
func offsetSum(t *testing.T, topic string, list func(context.Context, ...string) (kadm.ListedOffsets, error)) int64 {
	os, err := list(context.Background(), topic)
	if err == nil {
		err = os.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	os.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// topicBytes reads topic's retained records: their count and value bytes.
func topicBytes(t *testing.T, brokers []string, adm *kadm.Client, topic string) (int64, int64) {
	ends, err := adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	starts, err := adm.ListStartOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var count, size int64
	offs := map[int32]kgo.Offset{}
	left := map[int32]int64{}
	starts.Each(func(o kadm.ListedOffset) {
		e, _ := ends.Lookup(topic, o.Partition)
		if e.Offset > o.Offset {
			offs[o.Partition] = kgo.NewOffset().At(o.Offset)
			left[o.Partition] = e.Offset
		}
	})
	if len(offs) == 0 {
		return 0, 0
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v", topic, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			count++
			size += int64(len(r.Value))
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
		})
	}
	return count, size
}

// counter and gaugeSum read a metric of reg, summed over its series.
func counter(t *testing.T, reg *prometheus.Registry, name string, label ...string) float64 {
	var v float64
	eachMetric(t, reg, name, label, func(x float64) { v += x })
	return v
}

func gaugeSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	return counter(t, reg, name)
}

// gauges returns a gauge vector's values by partition label.
func gauges(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "partition" {
					out[l.GetValue()] = mt.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// eachMetric calls fn with the value of every series of name whose labels
// include the label name/value pairs.
func eachMetric(t *testing.T, reg *prometheus.Registry, name string, label []string, fn func(float64)) {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, mt := range mf.GetMetric() {
			for i := 0; i+1 < len(label); i += 2 {
				if !slices.ContainsFunc(mt.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == label[i] && l.GetValue() == label[i+1] }) {
					continue series
				}
			}
			switch {
			case mt.GetCounter() != nil:
				fn(mt.GetCounter().GetValue())
			case mt.GetGauge() != nil:
				fn(mt.GetGauge().GetValue())
			}
		}
	}
}

// joinCatchUps returns the join stage's catch-up seconds (summed), how many
// partitions caught up and their modes.
func joinCatchUps(t *testing.T, reg *prometheus.Registry) (float64, int, string) {
	return stageCatchUps(t, reg, "join")
}

// stageCatchUps is joinCatchUps for the stage labelled stage ("join",
// "keying" or a plan stage's number).
func stageCatchUps(t *testing.T, reg *prometheus.Registry, want string) (float64, int, string) {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	var n int
	var modes []string
	for _, mf := range mfs {
		if mf.GetName() != "cdcjoin_catchup_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			stage, mode := "", ""
			for _, l := range mt.GetLabel() {
				switch l.GetName() {
				case "stage":
					stage = l.GetValue()
				case "mode":
					mode = l.GetValue()
				}
			}
			if stage != want || mt.GetHistogram() == nil {
				continue
			}
			sum += mt.GetHistogram().GetSampleSum()
			n += int(mt.GetHistogram().GetSampleCount())
			modes = append(modes, fmt.Sprintf("%s×%d", mode, mt.GetHistogram().GetSampleCount()))
		}
	}
	return sum, n, strings.Join(modes, ",")
}

func trues(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

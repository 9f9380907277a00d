package kafkarun_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/row"
)

// Bulk rebuilds of plan stages, on a real Kafka broker (CDCJOIN_KAFKA_BROKERS).
//
// One job runs a seeded four-table history (run A) and stops; then the
// same stage partitions are rebuilt from the same logs twice, on empty
// state directories: row by row (run R, state.bulk_load_mb -1) and in bulk
// (run B). Between them the stage groups' committed offsets are set back
// to where A left them, so both rebuild to the same positions; the last
// stage's are set back further, to the middle of each partition's log, so
// that both also apply (and emit) the same records after the rebuild. Each
// run's state of every stage partition is read when it caught up (the
// committed position). R's and B's must be equal byte for byte (every key
// of the pebble state: rows, values, position, clock), and the changes
// their sinks got after the rebuild must be the same set of (row key,
// version, values); B's bulk counter must have counted records, R's none.
// Then the rest of the history arrives, and the sink (shared by every run:
// re-emissions carry the versions A gave them) must equal replay's answer.
// Variants: a kill point in B's rebuild (its tables written, not ingested:
// Run fails; the partition has no position; a restart rebuilds again, to
// the same state), and the negative control (a rebuild leaving out stage
// 1's rows is caught by the state comparison).

func TestPlanBulkRebuild(t *testing.T) {
	brokers := testenv.Require(t, testenv.KafkaEnv, "Kafka")
	seed := clusterSeed(t)
	// Chains and stars, INNER/LEFT/FULL, filters in ON and WHERE, a
	// materializer (FULL joins), truncates in one (the bulk path stops
	// at a clear, the rest goes row by row).
	names := []string{"chain-inner-left", "chain-full-full", "star-left-full", "star-inner-left"}
	if testing.Short() {
		names = []string{"chain-inner-left", "star-left-full"}
	}
	for i, name := range names {
		t.Run(name, func(t *testing.T) {
			runPlanRebuild(t, brokers, seed+int64(i), testkit.MultiQueries[name], rebuildCase{truncates: i == 1, kill: i == 0})
		})
	}
}

// TestPlanRebuildTime measures the rebuild of a chain's stage partitions
// in bulk and row by row (CDCJOIN_REBUILD_ROWS rows per table; skipped
// without it), with every check of TestPlanBulkRebuild. It logs the
// partitions' catch-up seconds (cdcjoin_catchup_seconds{mode="rebuild"}:
// sum over the stage partitions, and their count) of each run and the
// load; it asserts no timing.
func TestPlanRebuildTime(t *testing.T) {
	brokers := testenv.Require(t, testenv.KafkaEnv, "Kafka")
	n, err := strconv.Atoi(os.Getenv("CDCJOIN_REBUILD_ROWS"))
	if err != nil || n <= 0 {
		t.Skip("set CDCJOIN_REBUILD_ROWS to the rows per table to measure")
	}
	runPlanRebuild(t, brokers, clusterSeed(t), testkit.MultiQueries["chain-full-full"], rebuildCase{rows: n})
}

// TestPlanBulkRebuildNegativeControl: a bulk rebuild that skips every
// 10th record of stage 2's log, and one that leaves out stage 1's rows,
// are caught by the comparison with the row-by-row rebuild.
func TestPlanBulkRebuildNegativeControl(t *testing.T) {
	brokers := testenv.Require(t, testenv.KafkaEnv, "Kafka")
	seed := clusterSeed(t)
	t.Run("skip-records", func(t *testing.T) {
		runPlanRebuild(t, brokers, seed, testkit.MultiQueries["chain-inner-left"], rebuildCase{control: true, skip: true})
	})
	t.Run("drop-rows", func(t *testing.T) {
		runPlanRebuild(t, brokers, seed+1, testkit.MultiQueries["star-left-full"], rebuildCase{control: true})
	})
}

type rebuildCase struct {
	truncates bool // the history has truncates (one source partition)
	kill      bool // B's first bulk rebuild is killed before its ingest
	control   bool // B's rebuild drops stage 1's rows (must be caught)
	skip      bool // with control: B's rebuild skips every 10th record of stage 2's log instead
	rows      int  // > 0: each table's snapshot rows (a measurement: the rebuild times are logged)
}

// rebuildProbe is what one run's hooks saw.
type rebuildProbe struct {
	mu    sync.Mutex
	dumps map[string]map[string]string // "s<n>/<p>" → the state when caught up
	lines map[string]bool              // changes its sink got
}

func newRebuildProbe() *rebuildProbe {
	return &rebuildProbe{dumps: map[string]map[string]string{}, lines: map[string]bool{}}
}

func (p *rebuildProbe) caughtUp(n int, part int32, st *joinstate.Store) {
	d := dumpStore(st)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dumps[fmt.Sprintf("s%d/%d", n, part)] = d
}

func (p *rebuildProbe) has(keys []string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		if p.dumps[k] == nil {
			return false
		}
	}
	return true
}

// probeSink records the changes written to it and passes them on to the
// shared model's sink.
type probeSink struct {
	*modelSink
	p *rebuildProbe
}

func (s *probeSink) Write(ctx context.Context, cs []row.Change) error {
	s.p.mu.Lock()
	for i := range cs {
		c := &cs[i]
		s.p.lines[fmt.Sprintf("%d v%d p%d %v %v %v %v", c.Op, c.Version, c.PrevVersion, c.ParentKey, c.ChildKey, c.Values, c.Prev)] = true
	}
	s.p.mu.Unlock()
	return s.modelSink.Write(ctx, cs)
}

// dumpStore reads every key of st's pebble state but the count of
// commits, which differs by design (a bulk rebuild commits once, row by
// row once per batch).
func dumpStore(st *joinstate.Store) map[string]string {
	it, err := st.DB().NewIter(nil)
	if err != nil {
		panic(err) // a test probe: the store is open
	}
	defer it.Close()
	out := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		if k := string(it.Key()); k != "Mcommits" {
			out[k] = string(it.Value())
		}
	}
	return out
}

// realPlanJob is the job of sql over Schema4 tables whose topics are
// prefixed by name, on a real broker.
func realPlanJob(t testing.TB, sql, name, brokers, stateDir, instance string, bulkMB int) *config.Config {
	t.Helper()
	var b strings.Builder
	b.WriteString(strings.ReplaceAll(testkit.SQLJob(name, sql), "dbserver1.", name+"."))
	fmt.Fprintf(&b, "state: {dir: %s, sync: false, batch_events: 50, bulk_load_mb: %d}\n", stateDir, bulkMB)
	fmt.Fprintf(&b, "kafka:\n  keyed_partitions: 2\n  brokers: [%s]\n  instance_id: %s\n  session_timeout: 6s\n  commit_interval: 100ms\n  transaction_timeout: 10s\n", brokers, instance)
	cfg, err := config.Parse([]byte(b.String()), "multi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startProbed starts Run with hooks and a metrics registry.
func startProbed(cfg *config.Config, s *probeSink, h kafkarun.RebuildHooks) (*instance, *prometheus.Registry, func() uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	in := newInstance(cfg, cancel)
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	o := kafkarun.Options{Sink: s, Logger: log.With("instance", cfg.Kafka.InstanceID), Ready: in.ready, Registry: reg}
	dropped := kafkarun.SetRebuildHooks(&o, h)
	go func() {
		defer close(in.done)
		in.err = kafkarun.Run(ctx, cfg, o)
	}()
	return in, reg, dropped
}

// rebuildCounter is the counter name of reg.
func rebuildCounter(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var v float64
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
			return v
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// logRebuildTime logs the rebuild's catch-up seconds (summed over the
// stage partitions) and the load average.
func logRebuildTime(t testing.TB, what string, reg *prometheus.Registry, wall time.Duration, cpu float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var sum float64
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() != "cdcjoin_catchup_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelOf(m, "stage") == "join" && labelOf(m, "mode") == "rebuild" {
				sum += m.GetHistogram().GetSampleSum()
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("rebuild %s: %d stage partitions, %.2f s of catch-up in all (%.2f s per partition), %.1f s and %.1f CPU-s of the process to all caught up; load %s",
		what, n, sum, sum/float64(max(n, 1)), wall.Seconds(), cpu, strings.TrimSpace(string(load)))
}

// cpuSeconds is the process's user and system CPU time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// groupOffsets returns group's committed offsets on topic.
func groupOffsets(t testing.TB, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	rs, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Error(); err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	rs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			out[o.Partition] = o.At
		}
	})
	return out
}

// setOffsets commits offs on topic for group (which has no members).
func setOffsets(t testing.TB, adm *kadm.Client, group, topic string, offs map[int32]int64) {
	t.Helper()
	var commit kadm.Offsets
	for p, at := range offs {
		commit.Add(kadm.Offset{Topic: topic, Partition: p, At: at, LeaderEpoch: -1})
	}
	rs, err := adm.CommitOffsets(context.Background(), group, commit)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Error(); err != nil {
		t.Fatalf("commit offsets of %s: %v", group, err)
	}
}

// middleOffset returns the offset after a committed data record in the
// middle of topic/p below end (end itself when there are fewer than 4).
func middleOffset(t testing.TB, brokers []string, topic string, p int32, end int64) int64 {
	t.Helper()
	if end <= 0 {
		return end
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var data []int64
	deadline := time.Now().Add(2 * time.Minute)
	for done := false; !done; {
		if time.Now().After(deadline) {
			t.Fatalf("%s/%d: did not read up to offset %d within 2m", topic, p, end)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= end-1 {
				done = true
			}
			if r.Offset < end && !r.Attrs.IsControl() {
				data = append(data, r.Offset)
			}
		})
	}
	if len(data) < 4 {
		return end
	}
	return data[len(data)/2] + 1
}

func runPlanRebuild(t *testing.T, brokers string, seed int64, sql string, rc rebuildCase) {
	opts := cdcgen.DefaultMultiOptions(seed)
	opts.Ops, opts.Partitions, opts.Truncates = 1200, 2, rc.truncates
	if testing.Short() {
		opts.Ops = 600
	}
	wait := 3 * time.Minute
	if rc.rows > 0 {
		opts.Rows, opts.SnapshotRerun, opts.Redeliver = rc.rows, false, 0
		wait += time.Duration(rc.rows) * 5 * time.Millisecond
	}
	if rc.truncates {
		opts.Partitions = 1
	}
	h, _ := planHistory(t, &opts, sql, 5)
	seed = opts.Seed
	t.Logf("seed %d: %s", seed, h.Stats)
	rng := rand.New(rand.NewSource(seed))
	name := fmt.Sprintf("rb%d-%d", time.Now().UnixNano()%1e9, seed)
	addrs := strings.Split(brokers, ",")
	var recs []cdcgen.Record // the records of the tables the query names
	for _, r := range h.Records {
		r.Topic = strings.Replace(r.Topic, "dbserver1.", name+".", 1)
		if strings.Contains(sql, " "+strings.TrimPrefix(r.Topic, name+".public.")+" ") {
			recs = append(recs, r)
		}
	}
	cut := len(recs) * (70 + rng.Intn(20)) / 100
	dir := t.TempDir()
	mkJob := func(state, instance string, bulkMB int) *config.Config {
		return realPlanJob(t, sql, name, brokers, filepath.Join(dir, state), instance, bulkMB)
	}
	cfgA := mkJob("a", "a", 256)
	wantHead := replayLive(t, cfgA, recs[:cut])
	wantAll := replayLive(t, cfgA, recs)

	adm := brokerAdmin(t, addrs)
	ctx := context.Background()
	names := kafkarun.NamesOf(cfgA)
	cr, err := adm.CreateTopics(ctx, int32(opts.Partitions), -1, nil, names.Sources...)
	if err == nil {
		err = cr.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the source topics' leaders", func() bool {
		td, err := adm.ListTopics(ctx, names.Sources...)
		if err != nil || len(td) != len(names.Sources) {
			return false
		}
		for _, d := range td {
			if d.Err != nil || len(d.Partitions) != opts.Partitions {
				return false
			}
			for _, p := range d.Partitions {
				if p.Err != nil || p.Leader < 0 {
					return false
				}
			}
		}
		return true
	})
	defer func() {
		adm.DeleteTopics(ctx, append(append(names.Sources, names.Keyed...), names.Index...)...)
		adm.DeleteGroups(ctx, names.Groups...)
	}()
	produce(t, addrs, recs[:cut])

	// Run A: the history's head, to the oracle.
	m := newModel()
	in, _, _ := startProbed(cfgA, &probeSink{modelSink: m.sink(), p: newRebuildProbe()}, kafkarun.RebuildHooks{})
	diff, err := m.waitEqual(wantHead, stallLimit, in)
	if serr := in.stop(t); serr != nil {
		t.Fatalf("seed %d: Run A: %v", seed, serr)
	}
	t.Logf("seed %d: run A: %d rows equal replay's", seed, len(wantHead))
	if err != nil || diff != "" {
		t.Fatalf("seed %d: run A: %v\n%s", seed, err, diff)
	}

	// Where the rebuilds end: A's committed offsets; the last stage's set
	// back to the middle of its log (records to apply after the rebuild).
	stages := len(names.Keyed)
	targets := make([]map[int32]int64, stages)
	var want []string // the stage partitions with something to rebuild
	for n := 1; n <= stages; n++ {
		targets[n-1] = groupOffsets(t, adm, names.Groups[n], names.Keyed[n-1])
		if n == stages {
			for p, end := range targets[n-1] {
				targets[n-1][p] = middleOffset(t, addrs, names.Keyed[n-1], p, end)
			}
		}
		for p, at := range targets[n-1] {
			if at > 0 {
				want = append(want, fmt.Sprintf("s%d/%d", n, p))
			}
		}
	}
	slices.Sort(want)
	t.Logf("seed %d: rebuild targets %v (stage partitions %v)", seed, targets, want)
	reset := func() {
		for n := 1; n <= stages; n++ {
			setOffsets(t, adm, names.Groups[n], names.Keyed[n-1], targets[n-1])
		}
	}
	lastEnd := groupOffsets(t, adm, names.Groups[stages], names.Keyed[stages-1]) // A's: the last stage applies up to it
	// done: every stage partition caught up (probed) and the last stage
	// applied what A had.
	done := func(in *instance, p *rebuildProbe) func() bool {
		return func() bool {
			if !in.ready.Ready() || !p.has(want) {
				return false
			}
			got := groupOffsets(t, adm, names.Groups[stages], names.Keyed[stages-1])
			for part, end := range lastEnd {
				if got[part] < end {
					return false
				}
			}
			return true
		}
	}
	run := func(cfg *config.Config, p *rebuildProbe, hk kafkarun.RebuildHooks, sinkOf *model) (*instance, *prometheus.Registry, func() uint64) {
		hk.CaughtUp = p.caughtUp
		return startProbed(cfg, &probeSink{modelSink: sinkOf.sink(), p: p}, hk)
	}

	// Run R: row by row.
	reset()
	pr := newRebuildProbe()
	in, reg, _ := run(mkJob("r", "r", -1), pr, kafkarun.RebuildHooks{}, m)
	began, cpu := time.Now(), cpuSeconds()
	waitFor(t, wait, "the row-by-row rebuild", done(in, pr))
	if rc.rows > 0 {
		logRebuildTime(t, "row by row", reg, time.Since(began), cpuSeconds()-cpu)
	}
	rowBulk := rebuildCounter(t, reg, "cdcjoin_state_rebuild_bulk_records_total")
	rebuiltR := rebuildCounter(t, reg, "cdcjoin_state_rebuild_records_total")
	if err := in.stop(t); err != nil {
		t.Fatalf("seed %d: Run R: %v", seed, err)
	}
	if rowBulk != 0 || rebuiltR == 0 {
		t.Fatalf("seed %d: the row-by-row rebuild counted %v bulk records of %v", seed, rowBulk, rebuiltR)
	}

	// Run B: in bulk (killed once before its ingest, then restarted).
	reset()
	pb := newRebuildProbe()
	sinkB := m
	hk := kafkarun.RebuildHooks{}
	var skipped atomic.Int64
	switch {
	case rc.control && rc.skip:
		hk.BulkSkip = func(n int, _ int32, _ int64) bool {
			if n != 2 {
				return false
			}
			return skipped.Add(1)%10 == 0
		}
		sinkB = newModel() // its changes are wrong: not into the shared model
	case rc.control:
		hk.BulkDrop = []byte{'s', 1, 'r'}
		sinkB = newModel()
	}
	if rc.truncates {
		hk.BulkLimit = 1 + rng.Intn(64<<10) // the budget ends some rebuilds early, too
	}
	var kills atomic.Int32
	var killed struct {
		mu    sync.Mutex
		stage int
		part  int32
	}
	errKill := errors.New("killed mid-rebuild")
	if rc.kill {
		hk.BulkKill = func(n int, p int32) error {
			if kills.Add(1) > 1 {
				return nil
			}
			killed.mu.Lock()
			killed.stage, killed.part = n, p
			killed.mu.Unlock()
			return errKill
		}
	}
	cfgB := mkJob("b", "b", 256)
	in, reg, dropped := run(cfgB, pb, hk, sinkB)
	began, cpu = time.Now(), cpuSeconds()
	if rc.kill {
		select {
		case <-in.done:
		case <-time.After(3 * time.Minute):
			t.Fatalf("seed %d: Run B did not fail within 3m of the kill point", seed)
		}
		if !errors.Is(in.err, errKill) {
			t.Fatalf("seed %d: Run B returned %v, want the kill", seed, in.err)
		}
		killed.mu.Lock()
		n, p := killed.stage, killed.part
		killed.mu.Unlock()
		st, err := joinstate.Open(job.StateOptions(cfgB, filepath.Join(cfgB.State.Dir, fmt.Sprintf("s%d-partition-%d", n, p))))
		if err != nil {
			t.Fatal(err)
		}
		_, has, err := st.Position(names.Keyed[n-1], p)
		st.Close()
		if err != nil || has {
			t.Fatalf("seed %d: stage %d partition %d has a position (%v, %v) after a kill before its ingest", seed, n, p, has, err)
		}
		t.Logf("seed %d: killed stage %d partition %d's bulk rebuild before its ingest: no position; restarting", seed, n, p)
		// The restart: partitions that had committed their rebuild keep
		// it (their probes stay); the rest rebuild again.
		hk.BulkKill = func(int, int32) error { kills.Add(1); return nil }
		in, reg, dropped = run(cfgB, pb, hk, sinkB)
	}
	waitFor(t, wait, "the bulk rebuild", done(in, pb))
	if rc.rows > 0 {
		logRebuildTime(t, "in bulk", reg, time.Since(began), cpuSeconds()-cpu)
	}
	bulk := rebuildCounter(t, reg, "cdcjoin_state_rebuild_bulk_records_total")
	rebuiltB := rebuildCounter(t, reg, "cdcjoin_state_rebuild_records_total")

	// The comparison.
	pr.mu.Lock()
	pb.mu.Lock()
	var diffs []string
	for _, k := range want {
		if d := testkit.StateDiff(pr.dumps[k], pb.dumps[k]); d != "" {
			diffs = append(diffs, k+": "+d)
		}
	}
	var onlyR, onlyB []string
	for l := range pr.lines {
		if !pb.lines[l] {
			onlyR = append(onlyR, l)
		}
	}
	for l := range pb.lines {
		if !pr.lines[l] {
			onlyB = append(onlyB, l)
		}
	}
	nLines := len(pr.lines)
	pb.mu.Unlock()
	pr.mu.Unlock()
	if len(onlyR)+len(onlyB) > 0 {
		slices.Sort(onlyR)
		slices.Sort(onlyB)
		diffs = append(diffs, fmt.Sprintf("changes after the rebuild: %d only row by row (%.3q), %d only in bulk (%.3q)", len(onlyR), onlyR, len(onlyB), onlyB))
	}
	if rc.control {
		in.stop(t)
		if rc.skip && skipped.Load() < 10 || !rc.skip && dropped() == 0 {
			t.Fatalf("seed %d: negative control: the bulk rebuild lost nothing (%d stage 2 records seen, %d rows dropped)", seed, skipped.Load(), dropped())
		}
		if len(diffs) == 0 {
			t.Fatalf("seed %d: negative control: a bulk rebuild that lost records or rows went unnoticed", seed)
		}
		t.Logf("seed %d: negative control caught: %s", seed, firstLines(strings.Join(diffs, "\n"), 3))
		return
	}
	if len(diffs) > 0 {
		in.stop(t)
		t.Fatalf("seed %d: bulk rebuild differs from row by row:\n%s", seed, strings.Join(diffs, "\n"))
	}
	if bulk == 0 {
		in.stop(t)
		t.Fatalf("seed %d: the bulk run rebuilt no record in bulk", seed)
	}
	if rc.kill && kills.Load() < 2 {
		in.stop(t)
		t.Fatalf("seed %d: the restart after the kill rebuilt nothing in bulk", seed)
	}
	t.Logf("seed %d: %d stage partitions rebuilt to the same state bytes (%v of %v records rebuilt in bulk in the last run), %d changes after the rebuild identical",
		seed, len(want), bulk, rebuiltB, nLines)

	// The rest of the history, to the oracle.
	produce(t, addrs, recs[cut:])
	diff, err = m.waitEqual(wantAll, stallLimit, in)
	if serr := in.stop(t); serr != nil {
		t.Errorf("seed %d: Run B: %v", seed, serr)
	}
	if err != nil || diff != "" {
		t.Fatalf("seed %d: after the bulk rebuild: %v\n%s", seed, err, diff)
	}
}

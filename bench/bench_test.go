package bench

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	json "github.com/goccy/go-json"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
)

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	for v := int64(1); v <= 100000; v++ {
		h.Record(v * 1000) // 1 µs .. 100 ms
	}
	for _, c := range []struct {
		q    float64
		want float64
	}{{0.5, 50e6}, {0.99, 99e6}, {0.999, 99.9e6}, {1, 100e6}} {
		got := float64(h.Quantile(c.q))
		if math.Abs(got-c.want)/c.want > 0.01 {
			t.Errorf("q%.3f = %.0f, want %.0f ±1%%", c.q, got, c.want)
		}
	}
	if h.Count() != 100000 || h.Max() != 100e6 {
		t.Fatalf("count %d max %d", h.Count(), h.Max())
	}
	var e Histogram
	if e.Quantile(0.5) != 0 || e.Summary().Count != 0 {
		t.Fatal("empty histogram must report zeros")
	}
	e.Record(-5)
	if e.Quantile(1) != 0 {
		t.Fatal("negative values count as 0")
	}
	var m Histogram
	m.Merge(&h)
	m.Merge(&e)
	if m.Count() != h.Count()+1 || m.Quantile(0.5) != h.Quantile(0.5) {
		t.Fatalf("merge: count %d p50 %d", m.Count(), m.Quantile(0.5))
	}
}

func TestHistogramBuckets(t *testing.T) {
	// Every value lies within its bucket and the bucket's relative width is
	// at most 2^-subBits.
	for _, v := range []int64{0, 1, 127, 128, 129, 1000, 123456789, 1 << 40, math.MaxInt64 / 2} {
		i := bucketOf(v)
		hi := bucketHigh(i)
		if hi < v {
			t.Fatalf("value %d above its bucket's high %d", v, hi)
		}
		if v > 128 && float64(hi-v)/float64(v) > 1.0/(1<<subBits) {
			t.Fatalf("bucket of %d too wide: high %d", v, hi)
		}
		if i > 0 && bucketHigh(i-1) >= v {
			t.Fatalf("value %d also fits the previous bucket", v)
		}
	}
}

func TestProjectionMath(t *testing.T) {
	m := Measured{FromRows: 1e6, ParentStateBytesPerRow: 60, ChildStateBytesPerRow: 120,
		SnapshotCPUPerEvent: 20e-6, SnapshotBytesPerEvent: 800, CDCCPUPerEvent: 50e-6, CDCBytesPerEvent: 1000, CDCOutputRowsPerEvent: 1.2,
		RebuildCPUPerRecord: 2e-6}
	p := Project(ProjectionInput{}, m)
	in := p.Input
	if in.ParentBytes != 4e12 || in.ChildBytes != 2e12 {
		t.Fatalf("defaults not applied: %+v", in)
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("parent rows", p.ParentRows, 4e9)
	near("child rows", p.ChildRows, 8e9)
	near("state", p.StateBytes, 4e9*60+8e9*120)
	near("disk", p.DiskBytes, 2*(4e9*60+8e9*120))
	near("parent record", p.ParentRecordBytes, 1000*1.3+450)
	near("child record", p.ChildRecordBytes, 250*1.3+450)
	near("parent scale", p.CPUScaleParent, (1000*1.3+450)/800)
	near("child scale", p.CPUScaleChild, 1) // smaller than measured: never scaled down
	wantCPU := 20e-6 * (4e9*(1750.0/800) + 8e9)
	near("snapshot cpu", p.SnapshotCPUSeconds, wantCPU)
	usable := 8 * 0.7
	wantCPUInst := int(math.Ceil(wantCPU / (24 * 3600 * usable)))
	wantDiskInst := int(math.Ceil(p.DiskBytes / 1900e9))
	if p.InstancesForCPU != wantCPUInst || p.InstancesForDisk != wantDiskInst || p.Instances != max(wantCPUInst, wantDiskInst) {
		t.Fatalf("instances cpu %d disk %d total %d; want %d %d", p.InstancesForCPU, p.InstancesForDisk, p.Instances, wantCPUInst, wantDiskInst)
	}
	near("snapshot hours cpu", p.SnapshotHoursCPU, wantCPU/(float64(p.Instances)*usable*3600))
	near("snapshot hours sink", p.SnapshotHoursSink, 8e9/1e6/3600)
	near("snapshot hours", p.SnapshotHours, math.Max(p.SnapshotHoursCPU, p.SnapshotHoursSink))
	cdcScale := (1750 + 775.0) / 2 / 1000
	near("cdc cores", p.CDCCoresNeeded, 50000*3*50e-6*cdcScale/0.7)
	if p.Partitions&(p.Partitions-1) != 0 || p.Partitions < 16*p.Instances {
		t.Fatalf("partitions %d: want a power of two >= 2 per core", p.Partitions)
	}
	if p.KeepsUp != (p.CDCInstancesNeeded <= p.Instances) {
		t.Fatal("keeps_up inconsistent")
	}
	near("rebuild hours (partition)", p.RebuildHoursPartition, 12e9/float64(p.Partitions)*2e-6/3600)
	near("rebuild hours (instance)", p.RebuildHoursInstance, 12e9/float64(p.Instances)*2e-6/usable/3600)
	// Disk-bound case: tiny CPU cost, big state.
	big := Project(ProjectionInput{DiskPerInstanceGB: 100}, Measured{ParentStateBytesPerRow: 100, ChildStateBytesPerRow: 100, SnapshotCPUPerEvent: 1e-9})
	if big.Instances != big.InstancesForDisk || big.InstancesForDisk != int(math.Ceil(2*(4e9+8e9)*100/100e9)) {
		t.Fatalf("disk-bound instances %d (disk %d)", big.Instances, big.InstancesForDisk)
	}
}

func TestPlan(t *testing.T) {
	w := Workload{ChildrenPerParent: 2, HotChildren: -1}
	p := w.plan(1_000_000)
	if p.hot != 50000 || p.users+p.domains+p.hot != 1_000_000 || p.users != 316666 || p.cdc != 200000 {
		t.Fatalf("plan %+v", p)
	}
	w.HotChildren = 0
	if p := w.plan(30); p.hot != 0 || p.users != 10 || p.domains != 20 || p.cdc != 20000 {
		t.Fatalf("plan %+v", p)
	}
}

func TestSynthDecodes(t *testing.T) {
	cfg, err := jobConfig(Options{CacheMB: 8, BatchEvents: 10}.withDefaults(), t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	spec := job.MustSpec(cfg)
	s := newSynth()
	var ev debezium.Event
	k, v := s.user('u', hotUserID, "Storm1", "Hot", 5)
	if ok, err := debezium.NewDecoder(spec.ParentColumns, debezium.Options{}).Decode(k, v, &ev); !ok || err != nil {
		t.Fatalf("user: %v %v", ok, err)
	}
	if ev.Op != debezium.OpUpdate || ev.After.Values[0].Int != hotUserID || ev.After.Values[1].Str != "Storm1" {
		t.Fatalf("user event %+v", ev.After)
	}
	k, v = s.domain('r', hotChildID0, hotUserID, hotChildName(0), 5)
	if ok, err := debezium.NewDecoder(spec.ChildColumns, debezium.Options{}).Decode(k, v, &ev); !ok || err != nil {
		t.Fatalf("domain: %v %v", ok, err)
	}
	if ev.Op != debezium.OpRead || ev.After.Values[1].Int != hotUserID {
		t.Fatalf("domain event %+v", ev.After)
	}
}

func TestNullSinkEncodes(t *testing.T) {
	s := NewNullSink([]string{"a", "b"})
	cs := []row.Change{{Op: row.Upsert, Version: 3, ParentKey: []row.Value{row.Int(1)},
		ChildKey: []row.Value{row.Int(2)}, Values: []row.Value{row.Int(1), row.String("x")}}}
	if err := s.Write(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(s.json), `"values":{"a":1,"b":"x"}`) {
		t.Fatalf("json %s", s.json)
	}
	if len(s.cols[0]) != 9 || len(s.cols[1]) != 3 {
		t.Fatalf("columns %v", s.cols)
	}
	if err := s.Flush(context.Background()); err != nil || s.Stats().Rows != 1 || s.Stats().Bytes == 0 || len(s.json) != 0 {
		t.Fatalf("flush: %v %+v", err, s.Stats())
	}
}

func testReport() *Report {
	o := Options{Dir: "x"}.withDefaults()
	r := newReport(o)
	r.Created, r.Command, r.Machine = "2026-01-01T00:00:00Z", "cdcjoin bench --rows 1e6", Machine{CPUs: 2, GOMAXPROCS: 2, CPUModel: "Test CPU"}
	for i, rows := range []int64{1e6, 1e7} {
		pt := Point{Rows: rows, Users: rows / 3, Domains: rows / 3 * 2, StateBytes: uint64(rows) * 100,
			StateBytesPerRow: 100, ParentStateBytesPerRow: 70, ChildStateBytesPerRow: 115}
		for j, name := range []string{"snapshot", "cdc", "cdc_rate", "storm"} {
			ph := Phase{Name: name, Events: 1000000, InputBytes: 800e6, WallSeconds: float64(10 + i + j), CPUSeconds: 8, OutputRows: 900000}
			ph.Latency = Latency{Count: 100, P50Ms: 2, P99Ms: 10 + float64(j), P999Ms: 20}
			if name == "storm" {
				ph.Timeline = []Sample{{T: 0.1, InPerSecond: 1000, OutPerSecond: 50000, MaxLatencyMs: 30}, {T: 0.2, InPerSecond: 2000, OutPerSecond: 1000}}
			}
			ph.finish(2)
			pt.Phases = append(pt.Phases, ph)
		}
		r.Points = append(r.Points, pt)
	}
	r.finish(o)
	return r
}

func TestReportFiles(t *testing.T) {
	r := testReport()
	dir := t.TempDir()
	if err := r.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if back.SchemaVersion != SchemaVersion || len(back.Points) != 2 || back.Projection == nil || back.Projection.Instances < 1 {
		t.Fatalf("round trip: %+v", back)
	}
	// Stable field names (documented in README.md).
	raw, _ := os.ReadFile(filepath.Join(dir, "report.json"))
	var generic map[string]any
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	pt := generic["points"].([]any)[0].(map[string]any)
	ph := pt["phases"].([]any)[0].(map[string]any)
	for _, k := range []string{"events_per_second", "mb_per_second", "events_per_cpu_second", "events_per_second_per_core",
		"cpu_seconds_per_million_events", "output_rows_per_event", "latency", "peak_rss_bytes"} {
		if _, ok := ph[k]; !ok {
			t.Errorf("phase field %q missing", k)
		}
	}
	for _, k := range []string{"state_bytes_per_row", "write_amp", "parent_state_bytes_per_row", "child_state_bytes_per_row"} {
		if _, ok := pt[k]; !ok {
			t.Errorf("point field %q missing", k)
		}
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for k := range ph {
		if !strings.Contains(string(readme), "`"+k+"`") {
			t.Errorf("phase field %q not documented in README.md", k)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, "REPORT.md"))
	for _, want := range []string{"## Results", "| 1e7 | snapshot |", "## Terabyte projection", "![throughput_vs_state.svg]", "Test CPU"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("REPORT.md lacks %q", want)
		}
	}
	for _, c := range []string{chartThroughput, chartLatency, chartStorm, chartStormLatency} {
		b, err := os.ReadFile(filepath.Join(dir, c))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if !strings.HasPrefix(s, "<svg") || !strings.HasSuffix(s, "</svg>\n") || strings.Contains(s, "NaN") {
			t.Errorf("%s is not a clean SVG", c)
		}
	}
}

func TestDownsample(t *testing.T) {
	var tl []Sample
	for i := 0; i < 1000; i++ {
		tl = append(tl, Sample{T: float64(i), InPerSecond: 10, MaxLatencyMs: float64(i % 7)})
	}
	d := downsample(tl, 100)
	if len(d) != 100 || d[0].InPerSecond != 10 || d[0].MaxLatencyMs != 6 || d[99].T != 999 {
		t.Fatalf("downsample: %d %+v %+v", len(d), d[0], d[99])
	}
}

func TestOptionsValidate(t *testing.T) {
	o := Options{Workload: Workload{Rows: 5, Skew: 0.5, Schema: "maybe"}, Pipeline: "x", Dir: "d"}.withDefaults()
	err := o.validate()
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{"rows must be >= 10", "skew", "schema", "pipeline"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	_ = config.Inner
}

// TestSmoke runs a tiny real benchmark end to end (engine pipeline, null
// sink) when CDCJOIN_BENCH_SMOKE is set (make bench-smoke, which CI runs;
// make test leaves it to that target): the report files must exist and
// hold sane numbers, and the output must equal the join of the generated
// tables (Verify).
func TestSmoke(t *testing.T) {
	if os.Getenv("CDCJOIN_BENCH_SMOKE") == "" {
		t.Skip("run by make bench-smoke (CDCJOIN_BENCH_SMOKE=1)")
	}
	dir := t.TempDir()
	o := Options{Workload: Workload{Rows: 20000, CDCEvents: 10000, RateDuration: 2e9, StormRenames: 3, StormGap: 2000, HotChildren: 2000},
		Dir: dir, Sync: false, StormCompare: true, Verify: true}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	CheckReport(t, rep, dir)
	checkStorms(t, rep, "storm_before", "storm")
}

// checkStorms checks that every storm variant ran, with the same output.
func checkStorms(t *testing.T, rep *Report, names ...string) {
	t.Helper()
	pt := &rep.Points[0]
	var rows []int64
	for _, n := range names {
		ph := pt.phase(n)
		if ph == nil {
			t.Fatalf("no %s phase", n)
		}
		rows = append(rows, ph.OutputRows)
	}
	for _, r := range rows {
		if r < pt.HotChildren*int64(rep.Workload.StormRenames) {
			t.Errorf("storm variants %v output %v rows: fewer than the hot parent's %d children × %d renames", names, rows, pt.HotChildren, rep.Workload.StormRenames)
		}
	}
}

// TestSmokeKafka is TestSmoke through the real Kafka runtime (kafkarun.Run
// on in-process kfake, four producers).
func TestSmokeKafka(t *testing.T) {
	if os.Getenv("CDCJOIN_BENCH_SMOKE") == "" {
		t.Skip("run by make bench-smoke (CDCJOIN_BENCH_SMOKE=1)")
	}
	dir := t.TempDir()
	o := Options{Workload: Workload{Rows: 20000, CDCEvents: 10000, RateDuration: 2e9, StormRenames: 3, StormGap: 2000, HotChildren: 2000},
		Pipeline: PipelineKafka, Dir: dir, Sync: false, StormCompare: true, Instances: 2, Verify: true}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pipeline != PipelineKafka {
		t.Errorf("pipeline %q", rep.Pipeline)
	}
	CheckReport(t, rep, dir)
	checkStorms(t, rep, "storm_before", "storm_fair", "storm")
	if pt := rep.Points[0]; len(pt.SaltingMoveSeconds) == 0 {
		t.Error("the hot parent was not salted before the salted storm")
	}
}

func TestFences(t *testing.T) {
	const k = 8
	seen := map[int64]bool{}
	for s := 0; s < k; s++ {
		for p := 0; p < k; p++ {
			id := fenceParent(s, p, k)
			if got := keyedlog.Partition(row.AppendKey(nil, []row.Value{row.Int(id)}), k); got != int32(p) {
				t.Errorf("fence parent %d of (%d,%d) hashes to %d", id, s, p, got)
			}
			if seen[id] || id <= probeUserID || id >= fenceChild0 {
				t.Errorf("fence parent %d of (%d,%d): duplicate or outside its range", id, s, p)
			}
			seen[id] = true
		}
	}
	f := newFences(k, k)
	var flushed []fenceSeen
	for i := 0; i < k*k; i++ {
		c := row.Change{Op: row.Upsert, ChildKey: []row.Value{row.Int(fenceChild0 + int64(i))},
			Values: []row.Value{row.Int(1), {Kind: row.KindString, Str: "F2"}, {}, {}, {Kind: row.KindString, Str: "fence-3"}}}
		fs, fence, ok := f.seen(&c)
		if !fence || !ok {
			t.Fatal("fence row not recognised")
		}
		flushed = append(flushed, fs)
		if f.reached(1) {
			t.Fatal("reached before the flush acknowledged the fences")
		}
	}
	if probe := (row.Change{Op: row.Upsert, ChildKey: []row.Value{row.Int(probeChild0)}}); func() bool { _, fence, _ := f.seen(&probe); return fence }() {
		t.Error("a probe row taken for a fence")
	}
	f.acked(flushed)
	if !f.reached(2) || f.reached(3) {
		t.Errorf("reached(2)=%v reached(3)=%v, want true, false", f.reached(2), f.reached(3))
	}
	if roundOf("fence-x", "fence-") != -1 || roundOf("F12", "F") != 12 {
		t.Error("roundOf")
	}
}

// TestKafkaBrokers drives the --brokers path (fresh topics and group per
// run) against a kfake cluster started here as a stand-in for real
// brokers, and checks the output against the join of the generated
// tables. make test runs it in its second (non -race) pass.
func TestKafkaBrokers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the Kafka runtime for a few seconds: make test runs it without -short")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dir := t.TempDir()
	o := Options{Workload: Workload{Rows: 2000, CDCEvents: 2000, Rate: 500, RateDuration: 1e9, StormRenames: 2, StormGap: 200, HotChildren: 100, Partitions: 3},
		Pipeline: PipelineKafka, Brokers: c.ListenAddrs(), Producers: 2, Dir: dir, ProbeEvery: 50, Verify: true}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Settings.Brokers; got != strings.Join(c.ListenAddrs(), ",") {
		t.Errorf("brokers %q", got)
	}
	ph := rep.Points[0].Phases
	// Verify ends each phase at a consistent DB state: phases run a little long.
	if len(ph) != 4 || ph[0].Events != rep.Points[0].Rows+2 || ph[1].Events < 2000 || ph[3].Events < 2*201 {
		t.Errorf("phases: %+v", ph)
	}
	for _, p := range ph {
		if p.Latency.Count == 0 || p.OutputRows == 0 {
			t.Errorf("phase %s: no probes acknowledged or no output: %+v", p.Name, p)
		}
	}
}

// TestVerifyDetects: the smoke tests' output check fails on an output that
// differs from the join (a negative control), and passes on one that does
// not; rows of the synthetic key space are left out.
func TestVerifyDetects(t *testing.T) {
	tables := cdcgen.Tables{
		Users:   map[int64]cdcgen.User{1: {ID: 1, FirstName: "A", LastName: "B"}},
		Domains: map[int64]cdcgen.Domain{2: {ID: 2, UserID: 1, DomainName: "a.com"}},
	}
	emit := func(v *verifySink, name string) {
		t.Helper()
		c := row.Change{Op: row.Upsert, Version: 1, ParentKey: []row.Value{row.Int(1)}, ChildKey: []row.Value{row.Int(2)},
			Values: []row.Value{row.Int(1), row.String("A"), row.String("B"), row.Int(2), row.String(name)}}
		hot := row.Change{Op: row.Upsert, Version: 2, ParentKey: []row.Value{row.Int(hotUserID)}, ChildKey: []row.Value{row.Int(hotChildID0)},
			Values: []row.Value{row.Int(hotUserID), row.String("Hot"), row.String("Hot"), row.Int(hotChildID0), row.String("hot")}}
		if err := v.Write(context.Background(), []row.Change{c, hot}); err != nil {
			t.Fatal(err)
		}
		if err := v.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	good := newVerifySink(NewNullSink([]string{"user_id", "firstname", "lastname", "domain_id", "domain_name"}))
	emit(good, "a.com")
	if err := good.check([]cdcgen.Tables{tables}); err != nil {
		t.Errorf("a matching output failed the check: %v", err)
	}
	bad := newVerifySink(NewNullSink([]string{"user_id", "firstname", "lastname", "domain_id", "domain_name"}))
	emit(bad, "b.com")
	if err := bad.check([]cdcgen.Tables{tables}); err == nil {
		t.Error("an output with a wrong value passed the check")
	}
}

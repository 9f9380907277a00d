// Command timebench benchmarks cdcjoin's time joins (issue 19) and, on the
// same event history in the same run, Flink SQL's interval join (RocksDB,
// MiniCluster) and Kafka Streams' JoinWindows join (RocksDB window stores,
// TopologyTestDriver), checking that each gives the same rows.
//
//	timebench --events 1e6 --out DIR [--keys 200000] [--partitions 4] [--difference 10s]
//	          [--ooo 2s] [--lateness 2s] [--late-rate 0.001] [--peers flink,kstreams]
//	          [--cache DIR] [--bounded-events 1e5]
//
// The history: impressions (left) and clicks (right) of K keys over P
// partitions a side, event time advancing one millisecond per event on
// average, disorder within out_of_orderness, a click following a third of
// the impressions after a delay in [0, 2 × difference] (about half inside
// the bound), unrelated clicks, and late-rate records far behind the
// watermark. The join: l.k = r.k AND r.t BETWEEN l.t − difference AND
// l.t + difference (Kafka Streams' ofTimeDifferenceAndGrace(difference,
// lateness)), LEFT for Flink's comparison, INNER for Kafka Streams'.
//
// Phases, each reported in DIR/REPORT.md and DIR/report.json:
//   - cdcjoin: events/s (wall and per CPU-second), the late rate, emission
//     latency (from the apply that emitted a row — its partner's arrival, or
//     the watermark passing its bound — to the sink's acknowledgement, p50 and
//     p99), state bytes against rows inside the bound × their size;
//   - the peers: events/s and whether their rows equal cdcjoin's (the peers
//     get the records cdcjoin did not find late);
//   - bounded state: a history 8× longer at the same rate ends with about the
//     same state.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cdcjoin/cdcjoin/bench/peers"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/deadletter"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/timejoin"
	"github.com/cdcjoin/cdcjoin/timejoin/timegen"
)

type options struct {
	events, boundedEvents      int
	keys, partitions           int
	difference, ooo, lateness  time.Duration
	lateRate                   float64
	out, cache, peerList       string
	seed                       uint64
	batchEvents, flinkParallel int
	skipCdcjoinRepeat          bool
}

func main() {
	var o options
	var events, bounded float64
	flag.Float64Var(&events, "events", 1e6, "events in the history (both sides)")
	flag.Float64Var(&bounded, "bounded-events", 1e5, "events of the bounded-state phase's short history (the long one is 8x)")
	flag.IntVar(&o.keys, "keys", 200000, "join keys")
	flag.IntVar(&o.partitions, "partitions", 4, "source partitions per side")
	flag.DurationVar(&o.difference, "difference", 10*time.Second, "the bound: |r.t - l.t| <= difference")
	flag.DurationVar(&o.ooo, "ooo", 2*time.Second, "out_of_orderness (and the disorder of the history)")
	flag.DurationVar(&o.lateness, "lateness", 2*time.Second, "allowed_lateness (Kafka Streams' grace)")
	flag.Float64Var(&o.lateRate, "late-rate", 0.001, "fraction of records far behind the watermark")
	flag.StringVar(&o.out, "out", "", "report directory (required)")
	flag.StringVar(&o.cache, "cache", filepath.Join(os.TempDir(), "cdcjoin-peers"), "where the peers are built")
	flag.StringVar(&o.peerList, "peers", "flink,kstreams", "peers to run (comma-separated; empty: none)")
	flag.Uint64Var(&o.seed, "seed", 1, "history seed")
	flag.IntVar(&o.batchEvents, "batch-events", 1000, "cdcjoin's state.batch_events")
	flag.IntVar(&o.flinkParallel, "flink-parallelism", 2, "Flink's parallelism")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the cdcjoin phases to `file`")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	o.events, o.boundedEvents = int(events), int(bounded)
	if o.out == "" {
		fmt.Fprintln(os.Stderr, "timebench: --out is required")
		os.Exit(2)
	}
	if err := run(context.Background(), o); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "timebench:", err)
		os.Exit(1)
	}
}

// history generates the benchmark's events (times in µs, whole ms).
func history(o options, n int) []timegen.Event {
	rng := rand.New(rand.NewPCG(o.seed, uint64(n)))
	d, ooo, late := o.difference.Milliseconds(), o.ooo.Milliseconds(), o.lateness.Milliseconds()
	type pending struct {
		t int64
		e timegen.Event
	}
	var clicks []pending // scheduled clicks, a min-heap by time
	push := func(p pending) {
		clicks = append(clicks, p)
		for i := len(clicks) - 1; i > 0; {
			j := (i - 1) / 2
			if clicks[j].t <= clicks[i].t {
				break
			}
			clicks[i], clicks[j] = clicks[j], clicks[i]
			i = j
		}
	}
	pop := func() pending {
		top := clicks[0]
		last := len(clicks) - 1
		clicks[0] = clicks[last]
		clicks = clicks[:last]
		for i := 0; ; {
			l, r, m := 2*i+1, 2*i+2, i
			if l < len(clicks) && clicks[l].t < clicks[m].t {
				m = l
			}
			if r < len(clicks) && clicks[r].t < clicks[m].t {
				m = r
			}
			if m == i {
				break
			}
			clicks[i], clicks[m] = clicks[m], clicks[i]
			i = m
		}
		return top
	}
	out := make([]timegen.Event, 0, n)
	clock := int64(1_700_000_000_000) // ms
	id := 0
	payload := func(prefix string) string { return fmt.Sprintf("%s%d-%08x", prefix, id, rng.Uint32()) }
	for len(out) < n {
		clock += rng.Int64N(3) // one event per ms on average
		var e timegen.Event
		if len(clicks) > 0 && clicks[0].t <= clock {
			e = pop().e
		} else if rng.IntN(4) == 0 { // an unrelated click
			id++
			e = timegen.Event{Side: timejoin.SideRight, Key: strconv.Itoa(rng.IntN(o.keys)), PK: fmt.Sprintf("c%d", id), Val: payload("c")}
			e.Time = clock
		} else {
			id++
			e = timegen.Event{Side: timejoin.SideLeft, Key: strconv.Itoa(rng.IntN(o.keys)), PK: fmt.Sprintf("i%d", id), Val: payload("i")}
			e.Time = clock
			if rng.IntN(3) == 0 {
				id++
				delay := rng.Int64N(2*d + 1)
				c := timegen.Event{Side: timejoin.SideRight, Key: e.Key, PK: fmt.Sprintf("c%d", id), Val: payload("c"), Time: clock + delay}
				push(pending{clock + delay, c})
			}
		}
		e.Op = timejoin.Insert
		e.Partition = int32(rng.IntN(o.partitions))
		e.Time -= rng.Int64N(ooo + 1) // disorder within out_of_orderness
		if rng.Float64() < o.lateRate {
			e.Time = clock - ooo - late - 1 - rng.Int64N(10_000) // behind the watermark by more than the lateness
		}
		e.Time *= 1000 // µs
		out = append(out, e)
	}
	return out
}

func spec(o options, jt timejoin.JoinType) *timejoin.Spec {
	d := o.difference.Microseconds()
	return &timejoin.Spec{Kind: timejoin.Interval, Join: jt, Lower: -d, Upper: d,
		OutOfOrderness: o.ooo.Microseconds(), AllowedLateness: o.lateness.Microseconds(),
		LeftWidth: 1, RightWidth: 1, Out: []timejoin.Column{{From: timejoin.FromLeft}, {From: timejoin.FromRight}}}
}

// Report is the benchmark's result.
type Report struct {
	Date     string         `json:"date"`
	Machine  string         `json:"machine"`
	Options  map[string]any `json:"options"`
	Cdcjoin  []CdcjoinRun   `json:"cdcjoin"`
	Peers    []PeerRun      `json:"peers"`
	Bounded  Bounded        `json:"bounded_state"`
	Commands []string       `json:"commands"`
}

// CdcjoinRun is one run of cdcjoin's replay of the history.
type CdcjoinRun struct {
	Join         string  `json:"join"`
	Events       int     `json:"events"`
	WallSeconds  float64 `json:"wall_seconds"`
	CPUSeconds   float64 `json:"cpu_seconds"`
	EventsPerSec float64 `json:"events_per_s"`
	EventsPerCPU float64 `json:"events_per_cpu_s"`
	Late         uint64  `json:"late"`
	LateRate     float64 `json:"late_rate"`
	Rows         int     `json:"rows"`
	LatencyP50ms float64 `json:"latency_p50_ms"`
	LatencyP99ms float64 `json:"latency_p99_ms"`
	// State: the time join's entries (keys and values) at the samples,
	// their mean and max, against rows inside the bound × their size.
	StateBytesMean  float64 `json:"state_bytes_mean"`
	StateBytesMax   float64 `json:"state_bytes_max"`
	BoundBytesMean  float64 `json:"bound_bytes_mean"`
	StateVsBound    float64 `json:"state_vs_bound"`
	DiskBytes       uint64  `json:"disk_bytes_end"`
	RowsInsideBound float64 `json:"rows_inside_bound_mean"`
}

// PeerRun is one peer's run.
type PeerRun struct {
	System       string  `json:"system"`
	Join         string  `json:"join"`
	Events       int     `json:"events"`
	JobSeconds   float64 `json:"job_seconds"`
	CPUSeconds   float64 `json:"cpu_seconds"`
	EventsPerSec float64 `json:"events_per_s"`
	Rows         int     `json:"rows"`
	SameRows     bool    `json:"same_rows"`
	Diff         string  `json:"diff,omitempty"`
	Note         string  `json:"note,omitempty"`
}

// Bounded is the bounded-state phase.
type Bounded struct {
	ShortEvents, LongEvents   int
	ShortStateMean, LongState float64
	Ratio                     float64
}

func run(ctx context.Context, o options) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "timebench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	rep := Report{Date: time.Now().UTC().Format(time.RFC3339), Machine: machine(),
		Options: map[string]any{"events": o.events, "keys": o.keys, "partitions": o.partitions, "difference": o.difference.String(),
			"out_of_orderness": o.ooo.String(), "allowed_lateness": o.lateness.String(), "late_rate": o.lateRate,
			"seed": o.seed, "batch_events": o.batchEvents, "flink_parallelism": o.flinkParallel},
		Commands: []string{strings.Join(os.Args, " ")}}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "timebench: "+format+"\n", args...) }
	logf("generating %d events", o.events)
	events := history(o, o.events)
	recs := timegen.Encode(events, timegen.EncodeOptions{Seed: o.seed})
	input := filepath.Join(work, "history.jsonl")
	if err := writeLines(input, len(recs), func(i int) string { return recs[i].JSONL() }); err != nil {
		return err
	}
	rows := map[string][]string{}
	var lateIdx map[int]bool
	for _, jt := range []timejoin.JoinType{timejoin.LeftOuter, timejoin.Inner} {
		logf("cdcjoin %s", jt)
		r, got, late, err := runCdcjoin(ctx, o, jt, events, recs, input, filepath.Join(work, "state-"+jt.String()))
		if err != nil {
			return err
		}
		rep.Cdcjoin = append(rep.Cdcjoin, r)
		rows[jt.String()] = got
		lateIdx = late
		logf("cdcjoin %s: %.0f events/s, %.0f per CPU-second, %d rows, state %.2fx the bound", jt, r.EventsPerSec, r.EventsPerCPU, r.Rows, r.StateVsBound)
	}
	// The peers' inputs: the records cdcjoin did not find late.
	left, right, all := filepath.Join(work, "left.json"), filepath.Join(work, "right.json"), filepath.Join(work, "all.json")
	if err := writePeerInputs(events, lateIdx, left, right, all); err != nil {
		return err
	}
	peerEvents := len(events) - len(lateIdx)
	for _, p := range strings.Split(o.peerList, ",") {
		switch strings.TrimSpace(p) {
		case "":
		case "flink":
			logf("building the Flink peer")
			f, err := peers.BuildFlink(ctx, o.cache, func(s string) { logf("%s", s) })
			if err != nil {
				return err
			}
			for _, collect := range []bool{false, true} {
				outFile := ""
				if collect {
					outFile = filepath.Join(work, "flink.out")
				}
				logf("Flink LEFT interval join (collect %v)", collect)
				res, err := f.RunInterval(ctx, peers.IntervalRun{Left: left, Right: right,
					LowerMs: -o.difference.Milliseconds(), UpperMs: o.difference.Milliseconds(), OutOfOrdernessMs: o.ooo.Milliseconds(),
					LeftJoin: true, StateDir: filepath.Join(work, fmt.Sprintf("flink-state-%v", collect)), Parallelism: o.flinkParallel, Out: outFile})
				if err != nil {
					return err
				}
				pr := PeerRun{System: "Flink 2.3 SQL interval join (RocksDB)", Join: "left", Events: peerEvents,
					JobSeconds: res.JobSeconds, CPUSeconds: res.Process.CPUSeconds, EventsPerSec: float64(peerEvents) / res.JobSeconds}
				if collect {
					pr.Note = "collect sink (the rows checked)"
					pr.Rows, pr.SameRows, pr.Diff, err = compare(outFile, rows["left"])
					if err != nil {
						return err
					}
				} else {
					pr.Note = "blackhole sink (timed)"
					pr.SameRows = true
					pr.Rows = int(res.Rows)
				}
				rep.Peers = append(rep.Peers, pr)
				logf("Flink: %.0f events/s (job), same rows %v %s", pr.EventsPerSec, pr.SameRows, pr.Diff)
			}
		case "kstreams":
			logf("building the Kafka Streams peer")
			k, err := peers.BuildKStreams(ctx, o.cache, func(s string) { logf("%s", s) })
			if err != nil {
				return err
			}
			outFile := filepath.Join(work, "kstreams.out")
			logf("Kafka Streams JoinWindows join")
			res, err := k.RunJoinWindows(ctx, peers.JoinWindowsRun{Input: all, DifferenceMs: o.difference.Milliseconds(),
				GraceMs: o.lateness.Milliseconds() + o.ooo.Milliseconds(), StateDir: filepath.Join(work, "kstreams-state"), Out: outFile})
			if err != nil {
				return err
			}
			pr := PeerRun{System: "Kafka Streams 4.3 JoinWindows (TopologyTestDriver, RocksDB)", Join: "inner", Events: peerEvents,
				JobSeconds: res.JobSeconds, CPUSeconds: res.Process.CPUSeconds, EventsPerSec: float64(peerEvents) / res.JobSeconds,
				Note: "grace = allowed_lateness + out_of_orderness (stream time is the largest timestamp seen)"}
			pr.Rows, pr.SameRows, pr.Diff, err = compare(outFile, rows["inner"])
			if err != nil {
				return err
			}
			rep.Peers = append(rep.Peers, pr)
			logf("Kafka Streams: %.0f events/s, same rows %v %s", pr.EventsPerSec, pr.SameRows, pr.Diff)
		default:
			return fmt.Errorf("--peers: unknown peer %q (flink, kstreams)", p)
		}
	}
	logf("bounded state: %d and %d events", o.boundedEvents, 8*o.boundedEvents)
	if rep.Bounded, err = bounded(ctx, o, work); err != nil {
		return err
	}
	return writeReport(o.out, &rep)
}

// latencySink collects rows (as timegen.Text) and the emission latency:
// from Write (the rows' emission, within a chunk) to the Flush that made
// them durable.
type latencySink struct {
	spec    *timejoin.Spec
	rows    []string
	pending []time.Time // one per row written since the last Flush
	lat     []time.Duration
	collect bool
}

func (s *latencySink) Write(_ context.Context, changes []row.Change) error {
	now := time.Now()
	for i := range changes {
		if s.collect {
			s.rows = append(s.rows, timegen.Text(s.spec, changes[i].Values))
		}
		s.pending = append(s.pending, now)
	}
	return nil
}

func (s *latencySink) Flush(context.Context) error {
	now := time.Now()
	for i, t := range s.pending {
		if i%16 == 0 { // a sample
			s.lat = append(s.lat, now.Sub(t))
		}
	}
	s.pending = s.pending[:0]
	return nil
}

func (s *latencySink) Close() error { return nil }

type lateCounter struct{ late map[int64]bool } // by "partition<<40 | offset" of the left/right topics

func (l *lateCounter) DeadLetter(_ context.Context, x *deadletter.Letter) error {
	side := int64(0)
	if x.Topic == timegen.RightTopic {
		side = 1
	}
	l.late[side<<62|int64(x.Partition)<<40|x.Offset] = true
	return nil
}

func cpuNow() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// runCdcjoin replays the history through a TimeEngine (the replay path),
// sampling its state every 50,000 records, and returns the run, its rows
// (sorted) and the events it found late.
func runCdcjoin(ctx context.Context, o options, jt timejoin.JoinType, events []timegen.Event, recs []timegen.Record, input, stateDir string) (CdcjoinRun, []string, map[int]bool, error) {
	s := spec(o, jt)
	yaml := timegen.Config(timegen.ConfigOptions{Name: "ad_clicks", Spec: s, StateDir: stateDir, DLQ: true})
	yaml = strings.Replace(yaml, "state: {dir: ", fmt.Sprintf("state: {batch_events: %d, dir: ", o.batchEvents), 1)
	cfg, err := config.Parse([]byte(yaml), "bench.yaml")
	if err != nil {
		return CdcjoinRun{}, nil, nil, err
	}
	out := &latencySink{spec: s, collect: true}
	lc := &lateCounter{late: map[int64]bool{}}
	e, err := engine.OpenTime(cfg, engine.Options{Sink: out, DeadLetters: lc})
	if err != nil {
		return CdcjoinRun{}, nil, nil, err
	}
	defer e.Close()
	// The rows inside the bound at a moment: accepted rows the watermark
	// has not retired yet (left: E <= max(t+upper, t); right: E <= max(t-lower, t)).
	var samples, bounds []float64
	var insideSum float64
	sample := func(upto int) error {
		var n, bytes float64
		err := e.StateScan(func(k, v []byte) { n++; bytes += float64(len(k) + len(v)) })
		if err != nil {
			return err
		}
		eff := e.CommittedWatermark() - s.AllowedLateness
		var inside, rowBytes float64
		// About one event per millisecond: four times the span a row can
		// stay in state is far enough back.
		back := int(4 * (2*o.difference + o.ooo + o.lateness).Milliseconds())
		for i := max(0, upto-back); i < upto; i++ {
			ev := &events[i]
			b := ev.Time + s.Upper
			if ev.Side == timejoin.SideRight {
				b = ev.Time - s.Lower
			}
			if max(b, ev.Time) >= eff {
				inside++
				// A row's size: its join key, its time, its other
				// projected columns, its identity (8 bytes).
				rowBytes += float64(len(row.AppendKey(nil, []row.Value{row.String(ev.Key)})) + 8 +
					len(row.AppendRow(nil, []row.Value{row.String(ev.Val)})) + 8)
			}
		}
		samples = append(samples, bytes)
		bounds = append(bounds, rowBytes)
		insideSum += inside
		return nil
	}
	var paused time.Duration // sampling, taken out of the timing
	var pausedCPU float64
	next := 50_000
	e.SetAfterCommit(func() {
		if n := int(e.Stats().Records); n >= next {
			next = n + 50_000
			t, c := time.Now(), cpuNow()
			if err := sample(n); err != nil {
				panic(err)
			}
			paused, pausedCPU = paused+time.Since(t), pausedCPU+cpuNow()-c
		}
	})
	start, cpu0 := time.Now(), cpuNow()
	i := 0
	err = e.Run(ctx, func(yield func(*engine.Record) error) error {
		for ; i < len(recs); i++ {
			r := &recs[i]
			if err := yield(&engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = e.Commit(ctx)
	}
	wall, cpu := time.Since(start)-paused, cpuNow()-cpu0-pausedCPU
	e.SetAfterCommit(nil)
	if err != nil {
		return CdcjoinRun{}, nil, nil, err
	}
	if len(samples) == 0 { // a short history: the state where the input left it
		if err := sample(len(recs)); err != nil {
			return CdcjoinRun{}, nil, nil, err
		}
	}
	if err := e.EndOfInput(ctx); err == nil {
		err = e.Commit(ctx)
	}
	if err != nil {
		return CdcjoinRun{}, nil, nil, err
	}
	e.Store().Flush()
	st := e.Stats()
	run := CdcjoinRun{Join: jt.String(), Events: len(recs), WallSeconds: wall.Seconds(), CPUSeconds: cpu,
		EventsPerSec: float64(len(recs)) / wall.Seconds(), EventsPerCPU: float64(len(recs)) / cpu,
		Late: st.Late, LateRate: float64(st.Late) / float64(len(recs)), Rows: len(out.rows), DiskBytes: e.Store().DiskBytes()}
	slices.Sort(out.lat)
	if n := len(out.lat); n > 0 {
		run.LatencyP50ms = float64(out.lat[n/2]) / 1e6
		run.LatencyP99ms = float64(out.lat[n*99/100]) / 1e6
	}
	run.StateBytesMean, run.StateBytesMax = mean(samples), slices.Max(samples)
	run.BoundBytesMean = mean(bounds)
	run.RowsInsideBound = insideSum / float64(len(samples))
	if run.BoundBytesMean > 0 {
		run.StateVsBound = run.StateBytesMean / run.BoundBytesMean
	}
	// Which events were late (by their record).
	late := map[int]bool{}
	for _, r := range recs {
		side := int64(0)
		if r.Topic == timegen.RightTopic {
			side = 1
		}
		if lc.late[side<<62|int64(r.Partition)<<40|r.Offset] {
			late[r.Event] = true
		}
	}
	// Cross-check with the reference model on small histories.
	if len(events) <= 20_000 {
		want, wantLate := timegen.Expected(s, events, true, nil, true)
		got := slices.Clone(out.rows)
		slices.Sort(got)
		if !slices.Equal(got, want) || len(wantLate) != len(late) {
			return run, nil, nil, fmt.Errorf("cdcjoin %s: %d rows, %d late; the reference has %d rows, %d late", jt, len(got), len(late), len(want), len(wantLate))
		}
	}
	got := out.rows
	slices.Sort(got)
	return run, got, late, nil
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// bounded runs a history and one 8× longer at the same rate and bound and
// compares their state at the end (before the end of input).
func bounded(ctx context.Context, o options, work string) (Bounded, error) {
	var b Bounded
	for i, n := range []int{o.boundedEvents, 8 * o.boundedEvents} {
		events := history(o, n)
		recs := timegen.Encode(events, timegen.EncodeOptions{Seed: o.seed})
		s := spec(o, timejoin.LeftOuter)
		yaml := timegen.Config(timegen.ConfigOptions{Name: "bounded", Spec: s, StateDir: filepath.Join(work, fmt.Sprintf("bounded-%d", i)), DLQ: true})
		cfg, err := config.Parse([]byte(yaml), "bounded.yaml")
		if err != nil {
			return b, err
		}
		e, err := engine.OpenTime(cfg, engine.Options{DeadLetters: &lateCounter{late: map[int64]bool{}}})
		if err != nil {
			return b, err
		}
		for _, r := range recs {
			if err := e.Process(ctx, &engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}); err != nil {
				e.Close()
				return b, err
			}
		}
		if err := e.Commit(ctx); err != nil {
			e.Close()
			return b, err
		}
		var bytes float64
		if err := e.StateScan(func(k, v []byte) { bytes += float64(len(k) + len(v)) }); err != nil {
			e.Close()
			return b, err
		}
		e.Close()
		if i == 0 {
			b.ShortEvents, b.ShortStateMean = n, bytes
		} else {
			b.LongEvents, b.LongState = n, bytes
		}
	}
	b.Ratio = b.LongState / b.ShortStateMean
	return b, nil
}

func writeLines(path string, n int, line func(i int) string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := 0; i < n; i++ {
		w.WriteString(line(i))
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writePeerInputs writes the non-late events as the peers read them.
func writePeerInputs(events []timegen.Event, late map[int]bool, left, right, all string) error {
	files := map[string]*bufio.Writer{}
	var closers []*os.File
	for _, p := range []string{left, right, all} {
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		closers = append(closers, f)
		files[p] = bufio.NewWriterSize(f, 1<<20)
	}
	for i, e := range events {
		if late[i] {
			continue
		}
		ms := e.Time / 1000
		obj := fmt.Sprintf(`"id":%q,"k":%q,"t":%d,"v":%q}`, e.PK, e.Key, ms, e.Val)
		side, file := "l", left
		if e.Side == timejoin.SideRight {
			side, file = "r", right
		}
		files[file].WriteString("{" + obj + "\n")
		files[all].WriteString(`{"side":"` + side + `",` + obj + "\n")
	}
	for i, p := range []string{left, right, all} {
		if err := files[p].Flush(); err != nil {
			return err
		}
		if err := closers[i].Close(); err != nil {
			return err
		}
	}
	return nil
}

// compare reads a peer's {"lv","rv"} lines and compares them, as a
// multiset, with cdcjoin's rows (timegen.Text: "lv,rv,").
func compare(path string, want []string) (int, bool, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false, "", err
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var m struct{ Lv, Rv *string }
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			return 0, false, "", fmt.Errorf("%s: %q: %w", path, line, err)
		}
		txt := func(p *string) string {
			if p == nil {
				return "null"
			}
			return *p
		}
		got = append(got, txt(m.Lv)+","+txt(m.Rv)+",")
	}
	slices.Sort(got)
	if slices.Equal(got, want) {
		return len(got), true, "", nil
	}
	onlyGot, onlyWant := 0, 0
	i, j := 0, 0
	for i < len(got) || j < len(want) {
		switch {
		case j == len(want) || (i < len(got) && got[i] < want[j]):
			onlyGot++
			i++
		case i == len(got) || want[j] < got[i]:
			onlyWant++
			j++
		default:
			i++
			j++
		}
	}
	return len(got), false, fmt.Sprintf("%d rows only in the peer's output, %d only in cdcjoin's", onlyGot, onlyWant), nil
}

func machine() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	model := ""
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			model = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
			break
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	return fmt.Sprintf("%s, %d cores, load %s", model, numCPU(), strings.Fields(string(load) + " ?")[0])
}

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

func writeReport(dir string, r *Report) error {
	j, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Time joins: cdcjoin, Flink, Kafka Streams on one event history\n\n%s, %s\n\n", r.Date, r.Machine)
	keys := make([]string, 0, len(r.Options))
	for k := range r.Options {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "- %s: %v\n", k, r.Options[k])
	}
	fmt.Fprintf(&b, "\n| system | join | events | seconds | CPU s | events/s | rows | same rows |\n|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, c := range r.Cdcjoin {
		fmt.Fprintf(&b, "| cdcjoin replay (pebble) | %s | %d | %.2f | %.2f | %.0f | %d | (reference) |\n", c.Join, c.Events, c.WallSeconds, c.CPUSeconds, c.EventsPerSec, c.Rows)
	}
	for _, p := range r.Peers {
		same := "yes"
		if !p.SameRows {
			same = "NO: " + p.Diff
		}
		fmt.Fprintf(&b, "| %s (%s) | %s | %d | %.2f | %.2f | %.0f | %d | %s |\n", p.System, p.Note, p.Join, p.Events, p.JobSeconds, p.CPUSeconds, p.EventsPerSec, p.Rows, same)
	}
	fmt.Fprintf(&b, "\n| cdcjoin | join | late rate | latency p50 / p99 (ms) | state bytes (mean / max) | rows inside the bound × size | state / bound | disk at end |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range r.Cdcjoin {
		fmt.Fprintf(&b, "| | %s | %.4f | %.2f / %.2f | %.0f / %.0f | %.0f (%.0f rows) | %.2f | %d |\n", c.Join, c.LateRate, c.LatencyP50ms, c.LatencyP99ms,
			c.StateBytesMean, c.StateBytesMax, c.BoundBytesMean, c.RowsInsideBound, c.StateVsBound, c.DiskBytes)
	}
	fmt.Fprintf(&b, "\nBounded state: %d events → %.0f state bytes; %d events (8×) → %.0f (ratio %.2f)\n", r.Bounded.ShortEvents, r.Bounded.ShortStateMean,
		r.Bounded.LongEvents, r.Bounded.LongState, r.Bounded.Ratio)
	fmt.Fprintf(&b, "\nCommand: `%s`\n", strings.Join(r.Commands, " "))
	return os.WriteFile(filepath.Join(dir, "REPORT.md"), []byte(b.String()), 0o644)
}

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/cdcjoin/cdcjoin/sink"
)

// Run runs every scale point (Options.Sweep, or one point at
// Workload.Rows), writing report.json, REPORT.md and the charts into
// Options.Dir after each point, so an interrupted sweep keeps what it
// measured. A point that would not fit on the disk (estimated from the
// previous point's state bytes per row, ×3 for compaction headroom and the
// bulk load's sorted runs, ×5 with the rebuild phase, which holds the
// state, its keyed records, their runs and the rebuilt state at once)
// stops the sweep with Report.Stopped set. Cancelling ctx stops the point in
// progress; the report then holds the completed points and Run returns
// ctx's error.
func Run(ctx context.Context, o Options) (*Report, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cdcjoin: bench: %w", err)
	}
	rep := newReport(o)
	points := o.Sweep
	if len(points) == 0 {
		points = []int64{o.Workload.Rows}
	}
	// Guess before the first measurement: twice the 51 B/row measured at
	// 1e7 rows (the state holds only the selected columns, so pad widths do
	// not change it); the ×3 below adds WAL, compaction and growth room.
	perRow := 100.0
	headroom := 3.0
	if o.Pipeline == PipelineEngine && !o.NoRebuild {
		headroom = 5
	}
	var runErr error
	for _, rows := range points {
		free, err := freeDiskBytes(o.Dir)
		if err != nil {
			return rep, err
		}
		need := uint64(float64(rows) * perRow * headroom)
		if need > free {
			rep.Stopped = fmt.Sprintf("stopped before %s rows: needs about %.1f GB of disk (%.0f B/row × %g), %.1f GB free in %s",
				formatRows(rows), float64(need)/1e9, perRow, headroom, float64(free)/1e9, o.Dir)
			o.progress(rep.Stopped)
			break
		}
		pt, err := runPoint(ctx, o, rows)
		if err != nil {
			if ctx.Err() != nil {
				rep.Stopped = fmt.Sprintf("interrupted during %s rows", formatRows(rows))
				runErr = ctx.Err()
				break
			}
			return rep, err
		}
		rep.Points = append(rep.Points, pt)
		if pt.StateBytesPerRow > 0 {
			perRow = pt.StateBytesPerRow
		}
		rep.finish(o)
		if err := rep.WriteFiles(o.Dir); err != nil {
			return rep, err
		}
	}
	rep.finish(o)
	if err := rep.WriteFiles(o.Dir); err != nil {
		return rep, err
	}
	return rep, runErr
}

func (o Options) progress(line string) {
	if o.Progress != nil {
		o.Progress(line)
	}
}

func newReport(o Options) *Report {
	w := o.Workload
	sinkName := "null"
	if o.ClickHouse != "" {
		sinkName = "clickhouse"
	}
	r := &Report{
		SchemaVersion: SchemaVersion, Created: time.Now().UTC().Format(time.RFC3339),
		Command: strings.Join(os.Args, " "), Pipeline: o.Pipeline, Sink: sinkName, Machine: describeMachine(),
		Workload: WorkloadReport{Seed: w.Seed, ChildrenPerParent: w.ChildrenPerParent, Skew: w.Skew, HotChildren: w.HotChildren,
			UserPads: w.UserPads, DomainPads: w.DomainPads, PadBytes: w.PadBytes, Schema: w.Schema, Partitions: w.Partitions,
			StormRenames: w.StormRenames, StormGap: w.StormGap, RateSeconds: w.RateDuration.Seconds()},
		Settings: Settings{CacheMB: o.CacheMB, BatchEvents: o.BatchEvents, Sync: o.Sync,
			BulkLoadMB: o.BulkLoadMB, MemTableMB: o.MemTableMB, RowCacheMB: o.RowCacheMB,
			SnapshotBulk: o.Pipeline == PipelineEngine && o.BulkLoadMB >= 0,
			LingerMs:     float64(o.Linger) / 1e6, ProbeEvery: o.ProbeEvery},
	}
	r.Machine.Note = o.MachineNote
	if o.Pipeline == PipelineKafka {
		r.Settings.Producers = o.Producers
		r.Settings.Instances = max(o.Instances, 1)
		r.Settings.Brokers = strings.Join(o.Brokers, ",")
		if r.Settings.Brokers == "" {
			r.Settings.Brokers = "kfake (in-process)"
		}
	}
	return r
}

// finish updates the machine's end load and the projection (from the
// largest point).
func (r *Report) finish(o Options) {
	r.Machine.LoadAvgEnd = loadAvg()
	if len(r.Points) == 0 {
		return
	}
	pr := Project(o.Projection, r.Points[len(r.Points)-1].measured())
	r.Projection = &pr
}

// runPoint loads a fresh state with rows source rows and runs the phases.
func runPoint(ctx context.Context, o Options, rows int64) (Point, error) {
	w := o.Workload
	p := w.plan(rows)
	pt := Point{Rows: rows, Users: p.users, Domains: p.domains, HotChildren: p.hot}
	stateDir := filepath.Join(o.Dir, "state-"+formatRows(rows))
	if err := os.RemoveAll(stateDir); err != nil {
		return pt, fmt.Errorf("cdcjoin: bench: %w", err)
	}
	if !o.KeepState {
		defer os.RemoveAll(stateDir)
	}
	pr := newProbes()
	smp := newSampler(pr, "rows="+formatRows(rows), o.Progress, o.ProgressEvery)
	defer smp.stop()
	var inner sink.Sink
	if o.ClickHouse != "" {
		cfg, err := jobConfig(o, stateDir, clickhouseYAML(o.ClickHouse))
		if err != nil {
			return pt, err
		}
		if inner, err = openClickHouse(ctx, cfg); err != nil {
			return pt, err
		}
	}
	var verify *verifySink
	if o.Verify {
		if inner == nil {
			cfg, err := jobConfig(o, stateDir, "")
			if err != nil {
				return pt, err
			}
			inner = NewNullSink(cfg.OutputNames())
		}
		verify = newVerifySink(inner)
		inner = verify
	}
	sp := startStageProfile()
	defer sp.stop()
	var d phaseDriver
	var err error
	switch o.Pipeline {
	case PipelineKafka:
		d, err = newKafkaDriver(ctx, o, p, stateDir, inner, smp, pr)
	default:
		d, err = newEngineDriver(ctx, o, p, stateDir, inner, smp, pr)
	}
	if err != nil {
		if inner != nil {
			inner.Close()
		}
		return pt, err
	}
	err = runPhases(ctx, o, p, d, &pt)
	if err == nil && verify != nil {
		err = verify.check(d.tables())
	}
	if cerr := d.close(); err == nil {
		err = cerr
	}
	if prof := sp.stop(); prof != nil && err == nil {
		err = stageCPU(prof, pt.Phases)
		if err == nil && o.CPUProfile != "" {
			path := o.CPUProfile
			if len(o.Sweep) > 1 {
				path += "." + formatRows(rows)
			}
			if werr := os.WriteFile(path, prof, 0o644); werr != nil {
				err = fmt.Errorf("cdcjoin: bench: cpu profile: %w", werr)
			}
		}
	}
	return pt, err
}

func runPhases(ctx context.Context, o Options, p plan, d phaseDriver, pt *Point) error {
	procs := goruntime.GOMAXPROCS(0)
	add := func(ph *Phase) {
		ph.finish(procs)
		pt.Phases = append(pt.Phases, *ph)
		o.progress(fmt.Sprintf("bench rows=%s %s: done: %d records in %.1fs, %.0f rec/s, %.0f rec/CPU-s, p99 %.1f ms, %d output rows",
			formatRows(pt.Rows), ph.Name, ph.Events, ph.WallSeconds, ph.EventsPerSecond, ph.EventsPerCPUSecond, ph.Latency.P99Ms, ph.OutputRows))
	}
	// Profiles (--cpuprofile) carry the phase as a label: go tool pprof
	// -tagfocus phase=cdc.
	phase := func(idx int, name string, req phaseReq, rate float64) (ph Phase, err error) {
		pprof.Do(ctx, pprof.Labels("phase", name), func(ctx context.Context) {
			ph, err = d.phase(ctx, idx, name, req, rate)
		})
		return ph, err
	}
	ph, err := phase(0, "snapshot", phaseReq{kind: phaseSnapshot}, 0)
	if err != nil {
		return err
	}
	add(&ph)
	if err := d.measureState(pt, false); err != nil {
		return err
	}
	ph, err = phase(1, "cdc", phaseReq{kind: phaseCDC, n: p.cdc}, 0)
	if err != nil {
		return err
	}
	add(&ph)
	rate := o.Workload.Rate
	if rate == 0 {
		rate = ph.EventsPerSecond / 2
	}
	if rate > 0 {
		n := int64(rate * o.Workload.RateDuration.Seconds())
		ph, err = phase(2, "cdc_rate", phaseReq{kind: phaseCDC, n: max(n, 1)}, rate)
		if err != nil {
			return err
		}
		add(&ph)
	}
	stormRate := o.Workload.StormRate
	if stormRate < 0 {
		stormRate = rate // the cdc_rate phase's
	}
	switch {
	case o.Workload.StormRenames > 0 && o.StormCompare:
		if err := runStorms(ctx, d, pt, 3, stormRate, o.StormRounds, add); err != nil {
			return err
		}
	case o.Workload.StormRenames > 0:
		ph, err = phase(3, "storm", phaseReq{kind: phaseStorm}, stormRate)
		if err != nil {
			return err
		}
		add(&ph)
	}
	if err := d.measureState(pt, true); err != nil {
		return err
	}
	if ed, ok := d.(*engineDriver); ok && !o.NoRebuild {
		pprof.Do(ctx, pprof.Labels("phase", phaseRebuild), func(ctx context.Context) {
			ph, err = ed.rebuildPhase(ctx, o.Dir)
		})
		if err != nil {
			return err
		}
		add(&ph)
	}
	return nil
}

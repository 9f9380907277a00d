package bench

import (
	"fmt"
	"strings"
)

// Chart file names written next to REPORT.md.
const (
	chartThroughput   = "throughput_vs_state.svg"
	chartLatency      = "latency_by_phase.svg"
	chartStorm        = "storm_timeline.svg"
	chartStormLatency = "storm_latency.svg"
)

func (r *Report) last() *Point {
	if len(r.Points) == 0 {
		return nil
	}
	return &r.Points[len(r.Points)-1]
}

// charts renders the SVG charts by file name.
func (r *Report) charts() map[string]string {
	out := map[string]string{}
	if len(r.Points) == 0 {
		return out
	}
	var ss []series
	for _, name := range []string{"snapshot", "cdc", "storm"} {
		s := series{name: name + " events/s"}
		for i := range r.Points {
			if ph := r.Points[i].phase(name); ph != nil {
				s.xs = append(s.xs, float64(r.Points[i].StateBytes))
				s.ys = append(s.ys, ph.EventsPerSecond)
			}
		}
		if len(s.xs) > 0 {
			ss = append(ss, s)
		}
	}
	out[chartThroughput] = lineChart("Throughput vs state size (bytes on disk after the snapshot)", "state bytes (log scale)", "input events/s", true, ss)
	pt := r.last()
	var groups []string
	p50, p99, p999 := series{name: "p50 ms"}, series{name: "p99 ms"}, series{name: "p99.9 ms"}
	title := fmt.Sprintf("End-to-end latency per phase (%s rows)", formatRows(pt.Rows))
	bulk := r.Settings.SnapshotBulk && pt.phase("snapshot") != nil
	if bulk {
		title = fmt.Sprintf("Streaming latency per phase (%s rows; bulk snapshot: see table)", formatRows(pt.Rows))
	}
	for _, ph := range pt.Phases {
		if ph.Latency.Count == 0 || (bulk && ph.Name == "snapshot") {
			continue
		}
		if strings.Contains(ph.Name, "#") {
			continue // a later round of a storm variant: the hot-key chart has their medians
		}
		groups = append(groups, ph.Name)
		p50.ys = append(p50.ys, ph.Latency.P50Ms)
		p99.ys = append(p99.ys, ph.Latency.P99Ms)
		p999.ys = append(p999.ys, ph.Latency.P999Ms)
	}
	out[chartLatency] = barChart(title, "milliseconds", groups, []series{p50, p99, p999})
	for i := range r.Points {
		if pt := &r.Points[i]; len(pt.StormVariants) > 0 {
			out[hotKeysChartName(pt)] = r.hotKeysChart(pt)
		}
	}
	if st := pt.phase("storm"); st != nil {
		in, outS, lat := series{name: "input events/s"}, series{name: "output rows/s"}, series{name: "max probe latency ms"}
		for _, s := range st.Timeline {
			in.xs, in.ys = append(in.xs, s.T), append(in.ys, s.InPerSecond)
			outS.xs, outS.ys = append(outS.xs, s.T), append(outS.ys, s.OutPerSecond)
			lat.xs, lat.ys = append(lat.xs, s.T), append(lat.ys, s.MaxLatencyMs)
		}
		out[chartStorm] = lineChart(fmt.Sprintf("Hot-key storm: %d renames of a parent with %d children", r.Workload.StormRenames, pt.HotChildren),
			"seconds", "per second", false, []series{in, outS})
		out[chartStormLatency] = lineChart("Hot-key storm: max probe latency per 100 ms", "seconds", "milliseconds", false, []series{lat})
	}
	return out
}

func mb(b uint64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }

// Markdown renders REPORT.md.
func (r *Report) Markdown() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("# cdcjoin benchmark report\n\n")
	p("Generated %s by `%s`.\n\n", r.Created, r.Command)
	m := r.Machine
	p("## Machine\n\n%s, %d CPUs (GOMAXPROCS %d), %.1f GB RAM, %s, kernel %s, %s. Load average (1 min) %.2f at start, %.2f at end.",
		m.CPUModel, m.CPUs, m.GOMAXPROCS, float64(m.MemTotalB)/1e9, m.OS, m.Kernel, m.GoVersion, m.LoadAvgStart, m.LoadAvgEnd)
	if m.Note != "" {
		p(" %s", m.Note)
	}
	if r.Peers != nil {
		r.peerMarkdown(&b)
		return b.String()
	}
	p("\n\n## Setup\n\n")
	p("- Pipeline: **%s**; sink: **%s**", r.Pipeline, r.Sink)
	if r.Pipeline == PipelineEngine {
		p(" (in-process decode → key → join on one pebble state, single goroutine; the generator runs on its own OS thread and its CPU is excluded)")
	}
	if r.Pipeline == PipelineKafka {
		p(" (the real kafkarun.Run: keying stage with Kafka transactions → keyed topic → join stage on per-partition pebble state; brokers: %s; %d parallel producers, acks=all; CPU includes the producers' clients and an in-process broker, only the generator threads are excluded; a phase ends when fence rows sent after all its records reached the sink; state bytes are the du of state.dir, WAL included)",
			r.Settings.Brokers, r.Settings.Producers)
	}
	if r.Sink == "null" {
		p("; the null sink still encodes every change as a JSON line and into ClickHouse-like column buffers")
	}
	p(".\n")
	w := r.Workload
	p("- Workload: cdcgen Debezium 3.6 JSON, schemas %s, %d partitions/topic, %.1f children per parent (skew %g), users with %d and domains with %d unselected pad columns of %d B; a dedicated hot parent with the point's hot children; CDC mix: inserts, selected and unselected updates, FK moves, deletes (with tombstones), PK changes, 10%% TOAST placeholders.\n",
		w.Schema, w.Partitions, w.ChildrenPerParent, w.Skew, w.UserPads, w.DomainPads, w.PadBytes)
	s := r.Settings
	p("- State: pebble, block cache %d MB, %d events per batch, sync %t, linger %.0f ms, %s. Latency probes: one per %d records.\n",
		s.CacheMB, s.BatchEvents, s.Sync, s.LingerMs, stateSettings(s), s.ProbeEvery)
	p("- Phases: **snapshot** (op=r initial load), **cdc** (flat out), **cdc_rate** (paced at half the cdc rate for %.0f s unless --rate), **storm** (%d renames of the hot parent, %d CDC records apart, flat out).\n",
		w.RateSeconds, w.StormRenames, w.StormGap)
	p("- Latency: probe child rows inserted into the input stream (paced phases: stamped with their scheduled time, so a stalled pipeline cannot hide queueing); measured until the sink's Flush returned (before the state commit that follows it). Throughput per core is events/s ÷ GOMAXPROCS; events per CPU-second uses getrusage, minus the generator thread.\n\n")

	p("## Results\n\n")
	p("| rows | phase | events | events/s | MB/s | events/CPU-s | CPU s / 1M events | out rows/event | p50 ms | p99 ms | p99.9 ms | peak RSS |\n")
	p("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, pt := range r.Points {
		for _, ph := range pt.Phases {
			name := ph.Name
			if ph.TargetRate > 0 {
				name += fmt.Sprintf(" @%.0f/s", ph.TargetRate)
			}
			p("| %s | %s | %d | %.0f | %.1f | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %s |\n",
				formatRows(pt.Rows), name, ph.Events, ph.EventsPerSecond, ph.MBPerSecond, ph.EventsPerCPUSecond,
				ph.CPUSecondsPerMillion, ph.OutputRowsPerEvent, ph.Latency.P50Ms, ph.Latency.P99Ms, ph.Latency.P999Ms, mb(ph.PeakRSSBytes))
		}
	}
	r.stagesMarkdown(&b)
	p("\n| rows | users | domains | hot children | state after snapshot | bytes/row | parent B/row | child B/row | final state | write amp | cache hit rate |\n")
	p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, pt := range r.Points {
		p("| %s | %d | %d | %d | %s | %.1f | %.1f | %.1f | %s | %.2f | %.2f |\n", formatRows(pt.Rows), pt.Users, pt.Domains, pt.HotChildren,
			mb(pt.StateBytes), pt.StateBytesPerRow, pt.ParentStateBytesPerRow, pt.ChildStateBytesPerRow, mb(pt.FinalStateBytes), pt.WriteAmp, pt.BlockCacheHitRate)
	}
	if r.Stopped != "" {
		p("\n**Sweep stopped:** %s\n", r.Stopped)
	}
	for i := range r.Points {
		r.hotKeysMarkdown(&b, &r.Points[i])
	}
	p("\nChild state includes the child index (child key → join key + last row), which the keyer needs to retract FK moves and resolve TOAST without `before`.\n")
	charts := r.charts()
	p("\n## Charts\n\n")
	for _, c := range []string{chartThroughput, chartLatency, chartStorm, chartStormLatency} {
		if _, ok := charts[c]; ok {
			p("![%s](%s)\n\n", c, c)
		}
	}
	if pr := r.Projection; pr != nil {
		r.projectionMarkdown(&b, pr)
	}
	return b.String()
}

// stagesMarkdown renders the CPU per record by stage of every profiled
// phase.
func (r *Report) stagesMarkdown(b *strings.Builder) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	head := false
	for _, pt := range r.Points {
		for _, ph := range pt.Phases {
			st := ph.Stages
			if st == nil {
				continue
			}
			if !head {
				p("\nCPU µs per input record by stage (from a CPU profile of the point, samples sorted by the leaf-most frame of a stage's packages; other: drivers, garbage collection, unlabelled work; see bench/README.md):\n\n")
				p("| rows | phase | decode | key | join | state | sink | kafka | other | total | samples |\n")
				p("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
				head = true
			}
			p("| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %d |\n", formatRows(pt.Rows), ph.Name,
				st.Decode, st.Key, st.Join, st.State, st.Sink, st.Kafka, st.Other, ph.CPUSecondsPerMillion, st.Samples)
		}
	}
}

func (r *Report) projectionMarkdown(b *strings.Builder, pr *Projection) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	in, me := pr.Input, pr.Measured
	p("## Terabyte projection\n\n")
	p("Scaled from the %s-row point. **%d instances** of %g cores (%d partitions) hold %.2f TB of state and snapshot a %.1f TB users + %.1f TB domains pair in **%.1f hours**; keeping up with %.0f changes/s (×%g peak) needs %.1f cores (%d instance(s)): %s.\n\n",
		formatRows(me.FromRows), pr.Instances, in.CoresPerInstance, pr.Partitions, pr.StateBytes/1e12, in.ParentBytes/1e12, in.ChildBytes/1e12,
		pr.SnapshotHours, in.CDCRate, in.CDCPeakFactor, pr.CDCCoresNeeded, pr.CDCInstancesNeeded, map[bool]string{true: "the snapshot fleet keeps up", false: "more instances than the snapshot needs"}[pr.KeepsUp])
	p("| quantity | value | how |\n|---|---:|---|\n")
	p("| users rows | %.3g | %.3g B ÷ %.0f B/row (assumed) |\n", pr.ParentRows, in.ParentBytes, in.ParentRowBytes)
	p("| domains rows | %.3g | %.3g B ÷ %.0f B/row (assumed) |\n", pr.ChildRows, in.ChildBytes, in.ChildRowBytes)
	p("| state | %.2f TB | rows × measured %.1f (parent) / %.1f (child) state B/row |\n", pr.StateBytes/1e12, me.ParentStateBytesPerRow, me.ChildStateBytesPerRow)
	p("| disk | %.2f TB | state × %.1f headroom (LSM space amp, compactions, growth) |\n", pr.DiskBytes/1e12, in.DiskHeadroom)
	p("| Debezium record size | %.0f / %.0f B | row × %.2f JSON + %.0f B envelope (assumed); benchmark mean %.0f B |\n", pr.ParentRecordBytes, pr.ChildRecordBytes, in.JSONFactor, in.EnvelopeBytes, me.SnapshotBytesPerEvent)
	p("| snapshot input | %.2f TB | records × record size |\n", pr.SnapshotInputBytes/1e12)
	p("| snapshot CPU | %.0f core-hours | measured %.2f µs/event × size scale %.2f (users) / %.2f (domains) |\n", pr.SnapshotCPUSeconds/3600, me.SnapshotCPUPerEvent*1e6, pr.CPUScaleParent, pr.CPUScaleChild)
	p("| instances for CPU | %d | snapshot CPU ÷ (%.0f h target × %g cores × %.0f%% utilization) |\n", pr.InstancesForCPU, in.TargetSnapshotHours, in.CoresPerInstance, in.Utilization*100)
	p("| instances for disk | %d | disk ÷ %.0f GB per instance |\n", pr.InstancesForDisk, in.DiskPerInstanceGB)
	p("| instances | %d | the larger; %.0f GB state each |\n", pr.Instances, pr.StatePerInstanceGB)
	p("| partitions | %d | power of two ≥ 2 per core and ≥ state ÷ %.0f GB per partition |\n", pr.Partitions, in.MaxPartitionStateGB)
	p("| snapshot hours (CPU) | %.1f | snapshot CPU ÷ fleet cores × utilization |\n", pr.SnapshotHoursCPU)
	p("| snapshot hours (sink) | %.1f | %.3g joined rows ÷ %.0f rows/s ClickHouse ingest (assumed) |\n", pr.SnapshotHoursSink, pr.ChildRows, in.SinkRowsPerSecond)
	p("| keep-up cores | %.1f | %.0f/s × %g peak × measured %.2f µs/CDC event (size-scaled) ÷ utilization |\n", pr.CDCCoresNeeded, in.CDCRate, in.CDCPeakFactor, me.CDCCPUPerEvent*1e6)
	p("| CDC output rows/s | %.0f | rate × measured %.2f output rows per input event |\n", pr.CDCOutputRowsPerS, me.CDCOutputRowsPerEvent)
	if pr.RebuildHoursPartition > 0 {
		p("| rebuild of a partition | %.2f h | %.3g rows ÷ %d partitions × measured %.2f µs/keyed record, one core |\n",
			pr.RebuildHoursPartition, pr.ParentRows+pr.ChildRows, pr.Partitions, me.RebuildCPUPerRecord*1e6)
		p("| rebuild of an instance (lost disk) | %.2f h | rows ÷ %d instances × %.2f µs/record ÷ (%g cores × %.0f%%) |\n",
			pr.RebuildHoursInstance, pr.Instances, me.RebuildCPUPerRecord*1e6, in.CoresPerInstance, in.Utilization*100)
	}
	p("\nAssumptions not in the table: Kafka brokers, the keying stage's network hops and ClickHouse are provisioned separately and are not the bottleneck (except the stated sink ingest floor); per-event CPU measured on this machine's cores carries over to the instance's cores; state per row grows only with the selected columns, so the projection holds if the selected columns are as wide as the benchmark's (user: id + two names; domain: id, user_id, name); CPU per event is scaled up by record size above the benchmark's mean record (an upper bound: join and state costs do not depend on unselected columns); the hot-parent fan-out of a storm is additional and shown above in the storm phase.\n")
}

// stateSettings describes the state settings a run changed from the
// defaults (bulk load 256 MiB, memtable 8 MiB, row cache 64 MiB).
func stateSettings(s Settings) string {
	out := "snapshot written row by row"
	switch {
	case s.SnapshotBulk && s.BulkLoadMB > 0:
		out = fmt.Sprintf("snapshot bulk loaded (sort memory %d MiB)", s.BulkLoadMB)
	case s.SnapshotBulk:
		out = "snapshot bulk loaded (sort memory 256 MiB)"
	}
	if s.MemTableMB > 0 {
		out += fmt.Sprintf(", memtable %d MiB", s.MemTableMB)
	}
	if s.RowCacheMB != 0 {
		out += fmt.Sprintf(", row cache %d MiB", s.RowCacheMB)
	}
	return out
}

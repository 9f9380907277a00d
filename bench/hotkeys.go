package bench

import (
	"context"
	"fmt"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/row"
)

// Hot keys (--storm-compare): the storm phase runs once per variant of the
// hot-key handling, one after the other on the same state, so that one
// report shows them side by side.
//
//	engine: storm_before (every fan-out at once: cdcjoin before hot-key
//	        handling), storm (fair fan-out)
//	kafka:  storm_before (no salting, every fan-out at once), storm_fair
//	        (fair fan-out, no salting), storm (salting and fair fan-out)
//
// The engine switches in place (Engine.SetChunkRows); the Kafka pipeline
// restarts its instances with the variant's skew settings (they resume
// their state). Before the salted storm the hot parent is salted: one of
// its children is updated, and the time until its layout move is done is
// reported (salting_move_seconds).

// stormVariant is one way of handling the storm's hot parent.
type stormVariant struct {
	Name string `json:"name"`
	What string `json:"what"`
	// ChunkRows is skew.chunk_rows (-1: every fan-out at once);
	// HotChildren is skew.hot_children (0: no salting).
	ChunkRows   int `json:"chunk_rows"`
	HotChildren int `json:"hot_children"`
}

var (
	variantBefore = stormVariant{Name: "storm_before", What: "every fan-out at once (cdcjoin before hot-key handling)", ChunkRows: -1}
	variantFair   = stormVariant{Name: "storm_fair", What: "fair fan-out (chunks between other keys' records), no salting", ChunkRows: config.DefaultChunkRows}
	variantSalted = stormVariant{Name: "storm", What: "salting across keyed partitions and fair fan-out", ChunkRows: config.DefaultChunkRows, HotChildren: config.DefaultHotChildren}
)

// hotWatch counts the upserts of the hot parent's rows with one first name
// (the last rename of a storm) that sinks have flushed: a salted fan-out
// runs on partitions the phase fences do not cover, so a storm ends when
// every hot child's row shows the last rename. Safe for concurrent use.
type hotWatch struct {
	name atomic.Pointer[string]
	rows atomic.Int64
}

// watch starts counting rows renamed to name.
func (h *hotWatch) watch(name string) {
	h.rows.Store(0)
	h.name.Store(&name)
}

func (h *hotWatch) match(c *row.Change) bool {
	n := h.name.Load()
	return n != nil && c.Op == row.Upsert && c.ChildKey != nil && len(c.ParentKey) == 1 &&
		c.ParentKey[0].Kind == row.KindInt && c.ParentKey[0].Int == hotUserID && len(c.Values) > 1 && c.Values[1].Str == *n
}

func (h *hotWatch) acked(n int64) { h.rows.Add(n) }

// runStorms runs the storm phase once per variant of d (phase indexes from
// idx on).
// With rounds > 1 the variants alternate, round after round (phase names
// get "#2", "#3", …), so that a shared machine's load changes hit them
// alike; the report shows each variant's median.
func runStorms(ctx context.Context, d phaseDriver, pt *Point, idx int, rate float64, rounds int, add func(*Phase)) error {
	vs := d.stormVariants()
	pt.StormVariants = vs
	for r := 1; r <= max(rounds, 1); r++ {
		for i, v := range vs {
			move, err := d.configure(ctx, v)
			if err != nil {
				return err
			}
			if move > 0 {
				pt.SaltingMoveSeconds = append(pt.SaltingMoveSeconds, move)
			}
			name := stormPhaseName(v, r)
			var ph Phase
			pprof.Do(ctx, pprof.Labels("phase", name), func(ctx context.Context) {
				ph, err = d.phase(ctx, idx+(r-1)*len(vs)+i, name, phaseReq{kind: phaseStorm}, rate)
			})
			if err != nil {
				return err
			}
			add(&ph)
		}
	}
	return nil
}

func stormPhaseName(v stormVariant, round int) string {
	if round == 1 {
		return v.Name
	}
	return fmt.Sprintf("%s#%d", v.Name, round)
}

// stormRuns returns v's phases of every round.
func (pt *Point) stormRuns(v stormVariant) []*Phase {
	var out []*Phase
	for i := range pt.Phases {
		if n := pt.Phases[i].Name; n == v.Name || strings.HasPrefix(n, v.Name+"#") {
			out = append(out, &pt.Phases[i])
		}
	}
	return out
}

// phaseMedian returns the median of f over phases (see median).
func phaseMedian(phs []*Phase, f func(*Phase) float64) float64 {
	if len(phs) == 0 {
		return 0
	}
	xs := make([]float64, len(phs))
	for i, ph := range phs {
		xs[i] = f(ph)
	}
	slices.Sort(xs)
	return median(xs)
}

func fanOutRate(ph *Phase) float64 {
	if ph.WallSeconds <= 0 {
		return 0
	}
	return float64(ph.OutputRows) / ph.WallSeconds
}

func (d *engineDriver) stormVariants() []stormVariant {
	return []stormVariant{variantBefore, {Name: "storm", What: "fair fan-out (chunks between other keys' records)", ChunkRows: config.DefaultChunkRows}}
}

func (d *engineDriver) configure(_ context.Context, v stormVariant) (float64, error) {
	d.eng.SetChunkRows(v.ChunkRows)
	return 0, nil
}

func (d *kafkaDriver) stormVariants() []stormVariant {
	salted := variantSalted
	if d.p.hot > 0 && d.p.hot/4 < int64(salted.HotChildren) {
		salted.HotChildren = int(max(d.p.hot/4, 2)) // a small run: its hot parent must cross the threshold
	}
	return []stormVariant{variantBefore, variantFair, salted}
}

// configure restarts the instances with v's skew settings and, for a
// salting variant, salts the hot parent first; it returns how long that
// move took.
func (d *kafkaDriver) configure(ctx context.Context, v stormVariant) (float64, error) {
	if err := d.stop(); err != nil {
		return 0, err
	}
	cfg := *d.cfg
	hot := v.HotChildren
	cfg.Skew.HotChildren, cfg.Skew.ChunkRows = &hot, v.ChunkRows
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	if err := d.start(&cfg); err != nil {
		return 0, err
	}
	// Wait until the restarted instances joined their groups and joined a
	// round of fence rows, so that the phase does not measure the
	// rebalance.
	d.round++
	if err := d.produceFences(ctx, d.round); err != nil {
		return 0, err
	}
	if err := d.waitFences(ctx, d.round); err != nil {
		return 0, err
	}
	salt := hot > 0 && d.p.hot >= int64(hot)
	if !salt && d.metricSum("cdcjoin_skew_hot_keys") == 0 {
		return 0, nil
	}
	// Salt the hot parent (or cool it back, salting being off now): its
	// layout changes at its next change. Wait until that is done.
	t0 := time.Now()
	key, val := d.syn.domain('u', hotChildID0, hotUserID, fmt.Sprintf("trigger-%d-%s", d.round, hotChildName(0)), t0.UnixMilli())
	rec := &kgo.Record{Topic: d.childTopic, Partition: 0, Key: clone(key), Value: clone(val), Timestamp: t0}
	if err := d.prods[0].cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return 0, fmt.Errorf("cdcjoin: bench: produce the layout trigger: %w", err)
	}
	settled := 0
	last := time.Now()
	err := d.waitFor(ctx, func() bool {
		hotKeys, busy := d.metricSum("cdcjoin_skew_hot_keys"), d.metricSum("cdcjoin_skew_fanout_keys")+d.metricSum("cdcjoin_skew_waiting_inputs")
		if time.Since(last) >= d.o.ProgressEvery {
			last = time.Now()
			d.o.progress(fmt.Sprintf("bench: moving the hot parent: %.0f hot keys, %.0f keys busy or inputs waiting", hotKeys, busy))
		}
		if (hotKeys >= 1) == salt && busy == 0 {
			settled++
		} else {
			settled = 0
		}
		return settled >= 40 // 200 ms without work in progress
	})
	if err != nil || !salt {
		return 0, err
	}
	return time.Since(t0).Seconds(), nil
}

// waitHot waits until every hot child's row shows the storm's last rename.
func (d *kafkaDriver) waitHot(ctx context.Context) error {
	if d.p.hot == 0 || d.o.Workload.StormRenames == 0 {
		return nil
	}
	return d.waitFor(ctx, func() bool { return d.hot.rows.Load() >= d.p.hot })
}

// hotKeysMarkdown renders the side-by-side storm variants of a point.
func (r *Report) hotKeysMarkdown(b *strings.Builder, pt *Point) {
	if len(pt.StormVariants) == 0 {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("\n### Hot keys: the storm, side by side (%s rows, %d renames of a parent with %d children)\n\n", formatRows(pt.Rows), r.Workload.StormRenames, pt.HotChildren)
	cdc, rate := pt.phase("cdc"), pt.phase("cdc_rate")
	rounds := len(pt.stormRuns(pt.StormVariants[0]))
	if rounds > 1 {
		p("Medians of %d rounds; the variants alternated, round after round.\n\n", rounds)
	}
	p("| storm | how | wall s | output rows | fan-out rows/s | p50 ms | p99 ms | p99 ÷ cdc p99 | p99 ÷ cdc_rate p99 |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	ratio := func(a float64, ref *Phase) string {
		if ref == nil || ref.Latency.P99Ms <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", a/ref.Latency.P99Ms)
	}
	for _, v := range pt.StormVariants {
		runs := pt.stormRuns(v)
		if len(runs) == 0 {
			continue
		}
		p99 := phaseMedian(runs, func(ph *Phase) float64 { return ph.Latency.P99Ms })
		p("| `%s` | %s | %.1f | %.0f | %.0f | %.1f | %.1f | %s | %s |\n", v.Name, v.What,
			phaseMedian(runs, func(ph *Phase) float64 { return ph.WallSeconds }),
			phaseMedian(runs, func(ph *Phase) float64 { return float64(ph.OutputRows) }), phaseMedian(runs, fanOutRate),
			phaseMedian(runs, func(ph *Phase) float64 { return ph.Latency.P50Ms }), p99, ratio(p99, cdc), ratio(p99, rate))
	}
	for _, ref := range []*Phase{cdc, rate} {
		if ref != nil {
			p("| (`%s`) | the other keys without a storm | %.1f | %d | | %.1f | %.1f | 1.00 | |\n", ref.Name, ref.WallSeconds, ref.OutputRows, ref.Latency.P50Ms, ref.Latency.P99Ms)
		}
	}
	if len(pt.SaltingMoveSeconds) > 0 {
		p("\nSalting the hot parent while running (copying its %d children into its sub-keys) took %s s before the salted storms.\n", pt.HotChildren, fmtSeconds(pt.SaltingMoveSeconds))
	}
	c := hotKeysChartName(pt)
	p("\n![%s](%s)\n", c, c)
}

// hotKeysChartName is the file name of a point's hot-key chart.
func hotKeysChartName(pt *Point) string { return "hotkeys_" + formatRows(pt.Rows) + ".svg" }

// hotKeysChart is the latency of the other keys (p50, p99) in the cdc
// phases and in each storm variant.
func (r *Report) hotKeysChart(pt *Point) string {
	var groups []string
	p50, p99 := series{name: "p50 ms"}, series{name: "p99 ms"}
	add := func(ph *Phase) {
		if ph == nil {
			return
		}
		groups = append(groups, ph.Name)
		p50.ys = append(p50.ys, ph.Latency.P50Ms)
		p99.ys = append(p99.ys, ph.Latency.P99Ms)
	}
	add(pt.phase("cdc"))
	add(pt.phase("cdc_rate"))
	for _, v := range pt.StormVariants {
		if runs := pt.stormRuns(v); len(runs) > 0 {
			groups = append(groups, v.Name)
			p50.ys = append(p50.ys, phaseMedian(runs, func(ph *Phase) float64 { return ph.Latency.P50Ms }))
			p99.ys = append(p99.ys, phaseMedian(runs, func(ph *Phase) float64 { return ph.Latency.P99Ms }))
		}
	}
	return barChart(fmt.Sprintf("Other keys' latency during hot-parent storms (%s rows, %d children)", formatRows(pt.Rows), pt.HotChildren),
		"milliseconds", groups, []series{p50, p99})
}

func fmtSeconds(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(parts, ", ")
}

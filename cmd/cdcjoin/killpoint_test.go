package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// killPoint is where a kill test kills a `cdcjoin run`: once one of the
// run's counters (its /metrics) reached n since the run started, plus a
// delay — or, for counter "", delay after the run's partitions were
// assigned. Kill points are drawn from the test's seed, so
// CDCJOIN_SEED=<seed> replays the same points; a point in terms of the
// run's own progress lands on the same work however loaded the machine is
// (a delay alone lands earlier and earlier in the work as the load grows:
// under load average 13 the 12 kills of TestChangelogKillsHotKeys all
// came before the first INSERT).
type killPoint struct {
	counter string // a metric name; "": time only
	n       float64
	delay   time.Duration
}

func (p killPoint) String() string {
	if p.counter == "" {
		return fmt.Sprintf("%v after the partitions were assigned", p.delay)
	}
	return fmt.Sprintf("%s >= %g, +%v", p.counter, p.n, p.delay)
}

// drawKillPoints draws kills points for slices of about per source
// records; hot adds the hot-key forwards as a counter.
func drawKillPoints(r *rand.Rand, kills, per int, hot bool) []killPoint {
	type counter struct {
		name string
		max  int
	}
	cs := []counter{
		{"", 0},
		{"cdcjoin_keying_records_produced_total", per},
		{"cdcjoin_join_changes_total", per},
		{"cdcjoin_sink_inserts_total", 6},
	}
	if hot {
		cs = append(cs, counter{"cdcjoin_skew_forwarded_records_total", 40})
	}
	out := make([]killPoint, kills)
	for i := range out {
		c := cs[r.IntN(len(cs))]
		if c.name == "" {
			out[i] = killPoint{delay: time.Duration(r.IntN(1500)) * time.Millisecond}
			continue
		}
		out[i] = killPoint{counter: c.name, n: float64(1 + r.IntN(c.max)), delay: time.Duration(r.IntN(30)) * time.Millisecond}
	}
	return out
}

// await waits until the run serving metrics on addr reaches the point and
// says what it saw. A run that goes quiet (no counter moved for 10 s after
// one moved: under load 30 a run was quiet for 3-8 s between its keying
// transactions and its first join batch) or takes 60 s without reaching it
// is killed all the same.
func (p killPoint) await(addr string) string {
	start := time.Now()
	if p.counter == "" {
		time.Sleep(p.delay)
		return "counters " + counterText(scrape(addr))
	}
	var last map[string]float64
	var moved time.Time // zero until a counter moved
	for {
		m := scrape(addr)
		if m[p.counter] >= p.n {
			time.Sleep(p.delay)
			return fmt.Sprintf("reached after %v; counters %s", time.Since(start).Round(time.Millisecond), counterText(m))
		}
		if last != nil && fmt.Sprint(m) != fmt.Sprint(last) {
			moved = time.Now()
		}
		last = m
		switch {
		case !moved.IsZero() && time.Since(moved) > 10*time.Second:
			return fmt.Sprintf("not reached: the run went quiet after %v; counters %s", time.Since(start).Round(time.Millisecond), counterText(m))
		case time.Since(start) > time.Minute:
			return fmt.Sprintf("not reached within 1m; counters %s", counterText(m))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killCounters are the counters a kill point may wait for (and that its
// log line shows).
var killCounters = []string{"cdcjoin_keying_records_produced_total", "cdcjoin_join_changes_total",
	"cdcjoin_sink_inserts_total", "cdcjoin_skew_forwarded_records_total"}

func counterText(m map[string]float64) string {
	var parts []string
	for _, c := range killCounters {
		parts = append(parts, fmt.Sprintf("%s=%g", strings.TrimSuffix(strings.TrimPrefix(c, "cdcjoin_"), "_total"), m[c]))
	}
	return strings.Join(parts, " ")
}

// scrape reads the counters of killCounters from a run's /metrics, summed
// over their labels (nil when the run does not answer).
func scrape(addr string) map[string]float64 {
	fams := scrapeMetrics(addr)
	if fams == nil {
		return nil
	}
	out := map[string]float64{}
	for _, c := range killCounters {
		for _, m := range fams[c].GetMetric() {
			out[c] += sampleValue(m)
		}
	}
	return out
}

// scrapeGauge reads a metric's samples from a run's /metrics, by their
// label text (`a="x",b="y"`; nil when the run does not answer).
func scrapeGauge(addr, name string) map[string]float64 {
	fams := scrapeMetrics(addr)
	if fams == nil {
		return nil
	}
	out := map[string]float64{}
	for _, m := range fams[name].GetMetric() {
		var labels []string
		for _, l := range m.GetLabel() {
			labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
		}
		out[strings.Join(labels, ",")] = sampleValue(m)
	}
	return out
}

// scrapeMetrics reads a run's /metrics with Prometheus' own text parser
// (nil when the run does not answer or the page does not parse).
func scrapeMetrics(addr string) map[string]*dto.MetricFamily {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil
	}
	return fams
}

// sampleValue is a counter's, gauge's or untyped sample's value.
func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	default:
		return m.GetUntyped().GetValue()
	}
}

// childProgress is what a run that does not converge says about itself:
// /healthz, /readyz and /statusz (what each stage and join worker waits
// on).
func childProgress(addr string) string {
	var b strings.Builder
	c := http.Client{Timeout: 5 * time.Second}
	for _, path := range []string{"/healthz", "/readyz", "/statusz"} {
		resp, err := c.Get("http://" + addr + path)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", path, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Fprintf(&b, "%s (%d): %s\n", path, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return b.String()
}

// goroutinesMark precedes a goroutine dump in a child's log (the tail a
// failed test prints ends there).
const goroutinesMark = "--- goroutines (SIGQUIT):"

// dumpGoroutines makes a run print its goroutines into its log (SIGQUIT),
// gives it 3 s to write them, and kills it.
func dumpGoroutines(cmd *exec.Cmd, log io.Writer) {
	fmt.Fprintf(log, "%s\n", goroutinesMark)
	cmd.Process.Signal(syscall.SIGQUIT)
	time.Sleep(3 * time.Second)
	cmd.Process.Kill()
}

// convergeWatch decides when a run that has not converged yet fails: when
// neither its output (the diff) nor its counters moved for convergeStall —
// stuck, whatever the budget —, or when it has not converged within
// convergeCap although it kept moving — too slow. A loaded machine slows
// a run down without stopping it; a fixed budget cannot tell the two
// apart (issue 24).
type convergeWatch struct {
	began, moved time.Time
	diff         string
	counters     string
}

const (
	convergeStall = 90 * time.Second
	convergeCap   = 10 * time.Minute
)

// stalled takes the latest diff and counters and says why the wait is
// over ("" while it goes on).
func (w *convergeWatch) stalled(diff string, counters map[string]float64) string {
	now := time.Now()
	c := counterText(counters)
	if w.began.IsZero() {
		w.began = now
	}
	if w.moved.IsZero() || diff != w.diff || c != w.counters {
		w.moved, w.diff, w.counters = now, diff, c
	}
	switch {
	case now.Sub(w.moved) > convergeStall:
		return fmt.Sprintf("no progress for %v (output and counters unchanged; %v since the last run started)", convergeStall, now.Sub(w.began).Round(time.Second))
	case now.Sub(w.began) > convergeCap:
		return fmt.Sprintf("still not converged after %v although it kept moving (too slow)", convergeCap)
	}
	return ""
}

package bench

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestNiceTicksCoverMax: the top tick is never below the largest value (a
// 17K point on a 15K axis was drawn above the plot).
func TestNiceTicksCoverMax(t *testing.T) {
	for _, hi := range []float64{1, 9.5, 17062 * 1.05, 15000, 15001, 4643, 1e6, 123456789} {
		ticks := niceTicks(0, hi, 5)
		if top := ticks[len(ticks)-1]; top < hi {
			t.Errorf("niceTicks(0, %v): top tick %v below the maximum", hi, top)
		}
	}
}

var svgYs = regexp.MustCompile(`(?:cy="|,)(-?[0-9.]+)(?:"| )`)

// TestChartsKeepDataInPlot renders the charts of the committed 1e8 report
// and checks that every plotted point lies inside the plot area, below the
// title and the legend.
func TestChartsKeepDataInPlot(t *testing.T) {
	b, err := os.ReadFile("results/2026-11-30-2vcpu-1e8/report.json")
	if err != nil {
		t.Skip(err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	for name, svg := range r.charts() {
		top := newSVG("x", nil).plotTop
		if name == chartLatency || name == chartThroughput {
			top = float64(legendY + legendRow + 14)
		}
		for _, m := range regexp.MustCompile(`<(?:circle|polyline)[^>]*>`).FindAllString(svg, -1) {
			for _, y := range svgYs.FindAllStringSubmatch(m, -1) {
				v, _ := strconv.ParseFloat(y[1], 64)
				if v < top-0.5 || v > chartH-padB+0.5 {
					t.Errorf("%s: a point at y=%.1f is outside the plot (%.0f..%d): %.80s", name, v, top, chartH-padB, m)
				}
			}
		}
	}
}

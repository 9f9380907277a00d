package bench

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// series is one line (or one bar colour) of a chart.
type series struct {
	name   string
	xs, ys []float64
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

const (
	chartW, chartH   = 720, 380
	padL, padR, padB = 80, 20, 50
	titleY           = 22 // title baseline; the legend rows follow, then the plot
	legendY          = 34 // top of the first legend row
	legendRow        = 18
)

// niceTicks returns about n round tick values covering [lo, hi]: the last
// one is at least hi.
func niceTicks(lo, hi float64, n int) []float64 {
	if hi <= lo {
		hi = lo + 1
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var t []float64
	for v := math.Floor(lo/step) * step; ; v += step {
		if v >= lo-step/1e9 {
			t = append(t, v)
		}
		if v >= hi-step/1e9 {
			return t
		}
	}
}

// fmtNum renders axis numbers compactly: 1.5M, 20k, 0.25.
func fmtNum(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return trimZero(fmt.Sprintf("%.1f", v/1e9)) + "G"
	case a >= 1e6:
		return trimZero(fmt.Sprintf("%.1f", v/1e6)) + "M"
	case a >= 1e3:
		return trimZero(fmt.Sprintf("%.1f", v/1e3)) + "k"
	case a == 0:
		return "0"
	case a < 1:
		return trimZero(fmt.Sprintf("%.3f", v))
	}
	return trimZero(fmt.Sprintf("%.1f", v))
}

func trimZero(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// svgDoc is a chart: the title, then the legend rows, then the plot area
// (from plotTop down to chartH-padB), so that neither covers the data.
type svgDoc struct {
	b       strings.Builder
	plotTop float64
}

// newSVG starts a chart titled title with a legend of names above the plot.
func newSVG(title string, names []string) *svgDoc {
	d := &svgDoc{}
	fmt.Fprintf(&d.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(&d.b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&d.b, `<text x="%d" y="%d" font-size="15" font-weight="bold">%s</text>`+"\n", padL, titleY, html.EscapeString(title))
	rows := d.legend(names)
	d.plotTop = float64(legendY+rows*legendRow) + 14
	return d
}

func (d *svgDoc) text(x, y float64, anchor, s string, extra string) {
	fmt.Fprintf(&d.b, `<text x="%.1f" y="%.1f" text-anchor="%s" %s>%s</text>`+"\n", x, y, anchor, extra, html.EscapeString(s))
}

func (d *svgDoc) line(x1, y1, x2, y2 float64, stroke string, width float64) {
	fmt.Fprintf(&d.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"/>`+"\n", x1, y1, x2, y2, stroke, width)
}

func (d *svgDoc) end() string { d.b.WriteString("</svg>\n"); return d.b.String() }

// axes draws the frame, y ticks and labels; returns the y mapping. The top
// tick is at least ymax, so every value fits in the plot.
func (d *svgDoc) axes(xlabel, ylabel string, ymax float64) (func(float64) float64, []float64) {
	x0, x1 := float64(padL), float64(chartW-padR)
	y0, y1 := float64(chartH-padB), d.plotTop
	ticks := niceTicks(0, ymax, 5)
	top := ticks[len(ticks)-1]
	if top <= 0 {
		top = 1
	}
	ym := func(v float64) float64 { return y0 - (v/top)*(y0-y1) }
	for _, t := range ticks {
		d.line(x0, ym(t), x1, ym(t), "#e0e0e0", 1)
		d.text(x0-6, ym(t)+4, "end", fmtNum(t), "")
	}
	d.line(x0, y0, x1, y0, "black", 1)
	d.line(x0, y0, x0, y1, "black", 1)
	d.text((x0+x1)/2, float64(chartH-10), "middle", xlabel, "")
	d.text(16, (y0+y1)/2, "middle", ylabel, fmt.Sprintf(`transform="rotate(-90 16 %.1f)"`, (y0+y1)/2))
	return ym, ticks
}

// legend draws the series names in rows under the title and returns the
// number of rows.
func (d *svgDoc) legend(names []string) int {
	if len(names) == 0 {
		return 0
	}
	x, row := float64(padL), 0
	for i, n := range names {
		w := 24 + 7*float64(len(n))
		if x > padL && x+w > chartW-padR {
			x, row = padL, row+1
		}
		y := float64(legendY + row*legendRow)
		fmt.Fprintf(&d.b, `<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/>`+"\n", x, y, palette[i%len(palette)])
		d.text(x+16, y+10, "start", n, "")
		x += w
	}
	return row + 1
}

func names(ss []series) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.name)
	}
	return out
}

// lineChart plots series against x (log10 x when logX; x must be > 0).
func lineChart(title, xlabel, ylabel string, logX bool, ss []series) string {
	d := newSVG(title, names(ss))
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range ss {
		for i, x := range s.xs {
			if logX {
				x = math.Log10(math.Max(x, 1e-12))
			}
			xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
			ymax = math.Max(ymax, s.ys[i])
		}
	}
	if math.IsInf(xmin, 0) {
		return d.end()
	}
	if xmax == xmin {
		xmin, xmax = xmin-0.5, xmax+0.5
	}
	ym, _ := d.axes(xlabel, ylabel, ymax*1.05)
	x0, x1 := float64(padL), float64(chartW-padR)
	xm := func(x float64) float64 {
		if logX {
			x = math.Log10(math.Max(x, 1e-12))
		}
		return x0 + 10 + (x-xmin)/(xmax-xmin)*(x1-x0-20)
	}
	// x ticks: the points themselves for log axes, nice ticks otherwise.
	if logX {
		seen := map[float64]bool{}
		for _, s := range ss {
			for _, x := range s.xs {
				if !seen[x] {
					seen[x] = true
					d.text(xm(x), float64(chartH-padB+16), "middle", fmtNum(x), "")
				}
			}
		}
	} else {
		for _, t := range niceTicks(xmin, xmax, 8) {
			d.text(xm(t), float64(chartH-padB+16), "middle", fmtNum(t), "")
		}
	}
	for i, s := range ss {
		c := palette[i%len(palette)]
		var pts []string
		for j := range s.xs {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xm(s.xs[j]), ym(s.ys[j])))
		}
		fmt.Fprintf(&d.b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		if len(s.xs) <= 20 {
			for j := range s.xs {
				fmt.Fprintf(&d.b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", xm(s.xs[j]), ym(s.ys[j]), c)
			}
		}
	}
	return d.end()
}

// barChart draws grouped bars: groups along x, one bar per series in each
// group (series.ys[i] is the value in group i).
func barChart(title, ylabel string, groups []string, ss []series) string {
	d := newSVG(title, names(ss))
	ymax := 0.0
	for _, s := range ss {
		for _, y := range s.ys {
			ymax = math.Max(ymax, y)
		}
	}
	ym, _ := d.axes("", ylabel, ymax*1.1)
	x0, x1 := float64(padL), float64(chartW-padR)
	gw := (x1 - x0) / float64(max(1, len(groups)))
	bw := gw * 0.8 / float64(max(1, len(ss)))
	for i, s := range ss {
		for g := range groups {
			if g >= len(s.ys) {
				continue
			}
			x := x0 + float64(g)*gw + gw*0.1 + float64(i)*bw
			y := ym(s.ys[g])
			fmt.Fprintf(&d.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, y, bw-1, float64(chartH-padB)-y, palette[i%len(palette)])
			d.text(x+bw/2, y-3, "middle", fmtNum(s.ys[g]), `font-size="9"`)
		}
	}
	for g, name := range groups {
		d.text(x0+float64(g)*gw+gw/2, float64(chartH-padB+16), "middle", name, "")
	}
	return d.end()
}

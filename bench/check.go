package bench

import (
	"fmt"
	"os"
	"path/filepath"
)

// TB is the part of testing.TB CheckReport needs.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
}

// CheckReport checks that dir holds report.json, REPORT.md and the charts,
// and that rep's numbers are sane (positive throughput, latency measured,
// state per row within 1 B .. 10 KB, a projection). Used by the smoke test.
func CheckReport(t TB, rep *Report, dir string) {
	t.Helper()
	for _, f := range []string{"report.json", "REPORT.md", chartThroughput, chartLatency} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("missing or empty %s: %v", f, err)
		}
	}
	if err := rep.Sane(); err != nil {
		t.Errorf("%v", err)
	}
}

// Sane reports the first implausible number in r, or nil.
func (r *Report) Sane() error {
	if len(r.Points) == 0 {
		return fmt.Errorf("cdcjoin: bench: report has no points")
	}
	for _, pt := range r.Points {
		if pt.StateBytesPerRow < 1 || pt.StateBytesPerRow > 10000 {
			return fmt.Errorf("cdcjoin: bench: %d rows: state bytes per row %.1f is implausible", pt.Rows, pt.StateBytesPerRow)
		}
		if len(pt.Phases) < 3 {
			return fmt.Errorf("cdcjoin: bench: %d rows: only %d phases", pt.Rows, len(pt.Phases))
		}
		for _, ph := range pt.Phases {
			if ph.Events <= 0 || ph.EventsPerSecond <= 0 || ph.CPUSeconds <= 0 {
				return fmt.Errorf("cdcjoin: bench: %d rows, %s: no throughput (%d events, %.0f/s, %.2f CPU s)", pt.Rows, ph.Name, ph.Events, ph.EventsPerSecond, ph.CPUSeconds)
			}
			if ph.Name == phaseRebuild {
				continue // no output, no probes
			}
			if ph.Latency.Count == 0 || ph.Latency.P99Ms <= 0 || ph.Latency.P50Ms > ph.Latency.P99Ms {
				return fmt.Errorf("cdcjoin: bench: %d rows, %s: latency not measured (%+v)", pt.Rows, ph.Name, ph.Latency)
			}
			if ph.OutputRows <= 0 {
				return fmt.Errorf("cdcjoin: bench: %d rows, %s: no output rows", pt.Rows, ph.Name)
			}
		}
	}
	if r.Projection == nil || r.Projection.Instances < 1 || r.Projection.SnapshotHours <= 0 {
		return fmt.Errorf("cdcjoin: bench: projection missing or empty")
	}
	return nil
}

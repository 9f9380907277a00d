package timejoin

import "testing"

// TestAllIdleTakesTheLargest: partitions that go idle together (run's
// keying stage announces idleness in one transaction, in no set order)
// leave the same watermark in every order: the largest watermark of any
// once all are idle, a partition without records included (before: the
// last active one's, or −∞ for ever when a partition without records
// was the last active one, so that no outer row was ever emitted).
func TestAllIdleTakesTheLargest(t *testing.T) {
	a, b, none := Source{SideLeft, 0}, Source{SideLeft, 1}, Source{SideRight, 0}
	for _, order := range [][]Source{{a, b, none}, {b, a, none}, {none, a, b}, {none, b, a}, {a, none, b}, {b, none, a}} {
		m := newWatermarks(10, 0)
		m.declare(none)
		m.observe(a, 100)
		m.observe(b, 200)
		if m.W() != MinTime {
			t.Fatalf("W %d before any idleness: the partition without records must hold it back", m.W())
		}
		for _, src := range order {
			m.setIdle(src, true)
		}
		if m.W() != 190 {
			t.Errorf("idle in order %v: W %d, want 190", order, m.W())
		}
		// A record makes its partition active again; W never moves back.
		m.observe(a, 150)
		if m.W() != 190 {
			t.Errorf("after a record in an idle partition: W %d, want 190", m.W())
		}
	}
	// Nothing seen anywhere: all idle leaves W at −∞.
	m := newWatermarks(10, 0)
	m.declare(a)
	m.setIdle(a, true)
	if m.W() != MinTime {
		t.Errorf("W %d with no record anywhere", m.W())
	}
}

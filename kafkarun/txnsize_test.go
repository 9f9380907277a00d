package kafkarun

import (
	"testing"
	"time"
)

// TestTxnSize: slow transactions shrink the next poll (at least halved,
// to the size their rate keys in an eighth of the timeout when that is
// less; not below 100), fast
// full ones grow it back up to kafka.transaction_records, fast partial ones
// leave it.
func TestTxnSize(t *testing.T) {
	s := newTxnSize(10000, 20*time.Second)
	if s.next() != 1000 {
		t.Fatalf("first size %d, want 1000", s.next())
	}
	for range 4 { // fast full ones: 2000, 4000, 8000, 10000
		s.observe(s.next(), time.Millisecond)
	}
	if s.next() != 10000 {
		t.Fatalf("grew to %d, want 10000", s.next())
	}
	steps := []struct {
		n    int
		d    time.Duration
		want int
	}{
		{10000, 6 * time.Second, 4166}, // the rate: 10000 × 2.5 s / 6 s
		{5000, 6 * time.Second, 2083},
		{300, 6 * time.Second, 125},  // the rate: 300 × 2.5 s / 6 s
		{150, 10 * time.Second, 100}, // the floor
		{100, 10 * time.Second, 100},
		{100, 2 * time.Second, 100},       // neither slow nor fast
		{40, 100 * time.Millisecond, 100}, // fast but not full
		{100, 100 * time.Millisecond, 200},
		{200, 100 * time.Millisecond, 400},
		{400, 100 * time.Millisecond, 800},
	}
	for i, st := range steps {
		s.observe(st.n, st.d)
		if got := s.next(); got != st.want {
			t.Fatalf("step %d (%d records in %v): next = %d, want %d", i, st.n, st.d, got, st.want)
		}
	}
	for range 10 {
		s.observe(s.next(), time.Millisecond)
	}
	if s.next() != 10000 {
		t.Errorf("grew to %d, want the limit 10000", s.next())
	}
	small := newTxnSize(50, time.Second)
	small.observe(50, time.Second)
	if small.next() != 50 {
		t.Errorf("a limit below 100 shrank to %d", small.next())
	}
}

package kafkarun

import (
	"testing"
	"time"
)

// TestTxnSize: slow transactions shrink the next poll (not below 100), fast
// full ones grow it back up to kafka.transaction_records, fast partial ones
// leave it.
func TestTxnSize(t *testing.T) {
	s := newTxnSize(10000, 20*time.Second)
	steps := []struct {
		n    int
		d    time.Duration
		want int
	}{
		{10000, 6 * time.Second, 5000},
		{5000, 6 * time.Second, 2500},
		{300, 6 * time.Second, 150},
		{150, 10 * time.Second, 100},
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

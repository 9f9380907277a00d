package driver_test

import (
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/driver"
)

// TestPacer: steps get as much time as inputs earned (overdrawing by at
// most one step), the idle quantum is free, and nothing is saved up while
// there is no work.
func TestPacer(t *testing.T) {
	now := time.Unix(0, 0)
	p := driver.Pacer{Now: func() time.Time { return now }}
	work := 100
	busy := func() bool { return work > 0 }
	step := func() error { now = now.Add(3 * time.Millisecond); work--; return nil }

	p.Earn(10 * time.Millisecond)
	if err := p.Spend(0, busy, step); err != nil {
		t.Fatal(err)
	}
	if work != 100-4 { // 3+3+3 < 10, the 4th overdraws
		t.Errorf("10ms of credit ran %d steps of 3ms, want 4", 100-work)
	}
	p.Earn(time.Millisecond) // pays the 2ms debt only in part
	if err := p.Spend(0, busy, step); err != nil {
		t.Fatal(err)
	}
	if work != 96 {
		t.Errorf("in debt, a step ran (%d left)", work)
	}
	if err := p.Spend(20*time.Millisecond, busy, step); err != nil {
		t.Fatal(err)
	}
	if work != 96-7 { // idle: 7 steps reach 21ms ≥ 20ms
		t.Errorf("a 20ms idle quantum ran %d steps, want 7", 96-work)
	}
	work = 0
	p.Earn(40 * time.Millisecond)
	_ = p.Spend(0, busy, step)
	work = 5
	if err := p.Spend(0, busy, step); err != nil {
		t.Fatal(err)
	}
	if work != 5 {
		t.Errorf("credit earned while idle was saved up: %d steps ran", 5-work)
	}
}

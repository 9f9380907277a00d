package version

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestMonotonic applies random markers (proposals above and below the
// current epoch) between increasing positions, from legacy and marked
// starts, across seq overflows: versions strictly increase, and a clock
// rebuilt from its encoding continues identically.
func TestMonotonic(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 0))
		var c Clock
		if r.IntN(2) == 0 {
			c = Legacy(uint64(r.IntN(4)))
		} else {
			c = Start(uint64(r.IntN(1000)), 0)
		}
		pos := int64(0)
		last := uint64(0)
		for i := 0; i < 500; i++ {
			switch r.IntN(10) {
			case 0:
				c.Raise(pos, uint64(r.IntN(2000)))
			case 1: // jump far, across seq overflows (a legacy clock's
				// positions stay below 2^48, as before markers existed)
				if c.Marked() {
					pos += int64(r.Uint64N(3 * seqSpan))
				}
			}
			v := c.At(pos)
			if v <= last {
				t.Fatalf("seed %d: version %d at position %d after %d (%v)", seed, v, pos, last, c)
			}
			last = v
			b, _ := c.MarshalBinary()
			var d Clock
			if err := d.UnmarshalBinary(b); err != nil || d != c {
				t.Fatalf("seed %d: round trip %v → %v (%v)", seed, c, d, err)
			}
			pos++
		}
	}
}

// TestLaterInputWins: a clock started later (by wall clock) gives higher
// versions than an earlier one, at any position reachable in practice.
func TestLaterInputWins(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	early := Start(Propose(t0), 0)
	late := Legacy(0)
	late.Raise(0, Propose(t0.Add(time.Millisecond)))
	if early.At(1e7) >= late.At(1) {
		t.Fatalf("earlier input's version %d ≥ later input's first %d", early.At(1e7), late.At(1))
	}
	if Legacy(5).At(1<<40) >= late.At(0) {
		t.Fatal("a marker does not lift the clock above legacy versions")
	}
}

func TestUnmarshalRejects(t *testing.T) {
	for _, b := range [][]byte{nil, {2}, {1}, {1, 0x80}, {0, 1, 2, 3}} {
		var c Clock
		if err := c.UnmarshalBinary(b); err == nil {
			t.Errorf("%x: accepted", b)
		}
	}
}

package skew_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cdcjoin/cdcjoin/skew"
)

// TestSpaceSaving: in a Zipf stream the heaviest keys are found with
// counts within their error bound, and decay ages them.
func TestSpaceSaving(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(rng, 1.3, 1, 100000)
	s := skew.NewSpaceSaving(32)
	truth := map[string]float64{}
	for i := 0; i < 200000; i++ {
		k := fmt.Sprint(z.Uint64())
		truth[k]++
		s.Add([]byte(k), 1)
	}
	top := s.Top(5)
	for i, h := range top {
		if want := fmt.Sprint(i); h.Key != want {
			t.Errorf("rank %d: key %s, want %s (%v)", i, h.Key, want, top)
		}
		if h.Count < truth[h.Key] || h.Count-h.Err > truth[h.Key] {
			t.Errorf("key %s: count %.0f (err %.0f), true %.0f", h.Key, h.Count, h.Err, truth[h.Key])
		}
	}
	s.Decay(0.5)
	if got := s.Top(1)[0]; got.Count != top[0].Count/2 {
		t.Errorf("decay: %v after %v", got, top[0])
	}
}

package skew_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/skew"
)

// stepsByInput applies h to a Fair stepped by input (each input then buys
// chunk rows of the fan-outs in progress, as a driver with a
// sink.Positioned steps it) and returns every change in emission order.
// With restarts, the Fair is made again and Loaded from the state at
// random inputs (a commit followed by a restart, nothing lost), opened by
// mk. It also returns the most keys busy at once.
func stepsByInput(t *testing.T, seed uint64, restarts bool, mk func(*keyed.Join, int) *skew.Fair) ([]string, int, int) {
	t.Helper()
	spec := testSpec(t, false)
	h := genHistory(seed, 800, 6, 40, 0.3, 0)
	rng := rand.New(rand.NewPCG(seed, 5))
	chunk := 1 + int(seed%4)
	st := keyed.NewMemState()
	f := mk(keyed.NewJoin(spec), chunk)
	if err := f.Load(st); err != nil {
		t.Fatal(err)
	}
	var out []string
	emit := func(c *row.Change) error { out = append(out, rowKeyOf(c)+" "+changeText(c)); return nil }
	reloads, busiest := 0, 0
	for i := range h.in {
		m := keyedlog.Msg{Kind: keyedlog.KindInput, In: h.in[i], Version: h.ver[i]}
		if err := f.Step(st, &m, keyedlog.Out{Emit: emit}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Advance(st, chunk, keyedlog.Out{Emit: emit}); err != nil {
			t.Fatal(err)
		}
		if n := skew.BusyKeys(f); n > busiest {
			busiest = n
		}
		if restarts && rng.IntN(10) == 0 {
			reloads++
			f = mk(keyed.NewJoin(spec), chunk)
			if err := f.Load(st); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out, reloads, busiest
}

// TestSchedulerRestartSameSteps: the Scheduler's turns are a function of
// the committed state: fan-outs stepped by input emit exactly the same
// changes in the same order whether or not the Fair was made again and
// Loaded from the state in between (what a batch re-created after a crash
// relies on with a sink.Positioned). Most seeds must have several keys
// busy at once.
func TestSchedulerRestartSameSteps(t *testing.T) {
	seeds, several := testSeeds(40), 0
	for _, seed := range seeds {
		want, _, busiest := stepsByInput(t, seed, false, skew.NewFair)
		got, reloads, _ := stepsByInput(t, seed, true, skew.NewFair)
		if reloads == 0 {
			t.Fatalf("seed %d: no reload", seed)
		}
		if busiest >= 2 {
			several++
		}
		if d := firstDiff(want, got); d != "" {
			t.Fatalf("seed %d (reproduce with -seed %d): %d reloads changed the steps: %s", seed, seed, reloads, d)
		}
	}
	if several*2 < len(seeds) {
		t.Fatalf("%d of %d seeds had several keys busy at once: the test does not exercise turns across a restart", several, len(seeds))
	}
}

// TestSchedulerRestartNegativeControl: a Scheduler that forgets whose turn
// was next when it is Loaded steps otherwise after a restart, and the
// comparison of TestSchedulerRestartSameSteps sees it for some seed.
func TestSchedulerRestartNegativeControl(t *testing.T) {
	forget := func(j *keyed.Join, chunk int) *skew.Fair {
		f := skew.NewFair(j, chunk)
		skew.IgnoreCursor(f)
		return f
	}
	for _, seed := range testSeeds(40) {
		want, _, _ := stepsByInput(t, seed, false, skew.NewFair)
		got, _, _ := stepsByInput(t, seed, true, forget)
		if d := firstDiff(want, got); d != "" {
			t.Logf("seed %d: detected: %s", seed, d)
			return
		}
	}
	t.Fatal("a Scheduler that forgets its cursor stepped the same on every seed: the comparison cannot fail")
}

func firstDiff(a, b []string) string {
	for i := 0; i < len(a) || i < len(b); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return fmt.Sprintf("change %d: want %q, got %q", i, x, y)
		}
	}
	return ""
}

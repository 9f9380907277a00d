package skew_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/skew"
)

var flagSeed = flag.Uint64("seed", 0, "run only this seed")

func testSeeds(n int) []uint64 {
	if *flagSeed != 0 {
		return []uint64{*flagSeed}
	}
	if testing.Short() {
		n = max(n/8, 4) // -short runs under -race in CI
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

// reference applies h with plain Join.Apply (every fan-out at once).
func reference(t *testing.T, spec *keyed.Spec, h history) (*keyed.MemState, *changes) {
	st := keyed.NewMemState()
	j := keyed.NewJoin(spec)
	m := newChanges()
	for i := range h.in {
		if err := j.Apply(st, &h.in[i], h.ver[i], m.emit); err != nil {
			t.Fatal(err)
		}
	}
	return st, m
}

// TestFairEqualsReference: fan-outs done in random chunks between other
// keys' inputs, with crashes (the uncommitted batch is lost, sometimes
// after its changes reached the sink) and restarts from the committed
// state, give exactly the reference's changes per row key (same versions,
// values and previous values), and the same final state and tables.
func TestFairEqualsReference(t *testing.T) {
	for _, left := range []bool{false, true} {
		for _, seed := range testSeeds(60) {
			t.Run(fmt.Sprintf("left=%v/seed=%d", left, seed), func(t *testing.T) {
				if err := runFair(t, seed, left, skew.NewFair); err != nil {
					t.Fatalf("seed %d (reproduce with -seed %d): %v", seed, seed, err)
				}
			})
		}
	}
}

// TestFairNegativeControl: an executor that forgets the version a parent
// had when its fan-out was interrupted (so the rows emitted after a
// resumption cancel the wrong previous version) must fail the comparison.
func TestFairNegativeControl(t *testing.T) {
	failed := 0
	for _, seed := range testSeeds(10) {
		broken := func(j *keyed.Join, chunk int) *skew.Fair {
			return skew.NewFairWith(j, chunk, &forgetful{skew.JoinExecutor{Join: j}})
		}
		if runFair(t, seed, false, broken) != nil {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("the broken executor passed every seed: the comparison does not check previous versions")
	}
}

// forgetful drops the interrupted parent's version on every resumption.
type forgetful struct{ skew.JoinExecutor }

func (f *forgetful) Resume(t keyed.State, key, task []byte, budget int, out keyedlog.Out) ([]byte, int, error) {
	var fo keyed.FanOut
	if err := keyed.DecodeFanOut(task, &fo); err != nil {
		return nil, 0, err
	}
	fo.Old.Version = 1
	return f.JoinExecutor.Resume(t, key, keyed.AppendFanOut(nil, &fo), budget, out)
}

func runFair(t *testing.T, seed uint64, left bool, newFair func(*keyed.Join, int) *skew.Fair) error {
	spec := testSpec(t, left)
	h := genHistory(seed, 600, 4, 40, 0.6, 0.01)
	wantSt, want := reference(t, spec, h)
	rng := rand.New(rand.NewPCG(seed, 2))
	got := newChanges()

	committed := keyed.NewMemState()
	var pos int // next input to apply, as committed
	st := committed.Clone()
	chunk := 1 + rng.IntN(6)
	open := func() (*skew.Fair, error) {
		f := newFair(keyed.NewJoin(spec), chunk)
		return f, f.Load(st)
	}
	f, err := open()
	if err != nil {
		return err
	}
	var buf []row.Change // changes not yet flushed
	emit := func(c *row.Change) error { buf = append(buf, cloneChange(c)); return nil }
	flush := func() {
		for i := range buf {
			got.emit(&buf[i])
		}
		buf = buf[:0]
	}
	crashes := 0
	for i := pos; i < len(h.in); i++ {
		if err := apply(f, st, &h.in[i], h.ver[i], emit); err != nil {
			return err
		}
		for k := rng.IntN(3); k > 0; k-- {
			if _, err := f.Advance(st, f.Chunk, keyedlog.Out{Emit: emit}); err != nil {
				return err
			}
		}
		switch r := rng.IntN(100); {
		case r < 15: // commit
			flush()
			committed, pos = st.Clone(), i+1
		case r < 17 && crashes < 6: // crash
			crashes++
			if rng.IntN(2) == 0 {
				flush() // the sink got them, the state commit did not happen
			}
			buf = buf[:0]
			st = committed.Clone()
			chunk = 1 + rng.IntN(6)
			if f, err = open(); err != nil {
				return err
			}
			i = pos - 1
		}
	}
	if _, err := f.Advance(st, -1, keyedlog.Out{Emit: emit}); err != nil {
		return err
	}
	flush()
	if got.err != nil {
		return got.err
	}
	join := materialize(t, wantSt, spec)
	if d := diffLists(join, materialize(t, st, spec)); d != "" {
		return fmt.Errorf("final state differs:\n%s", d)
	}
	for k, w := range want.seq {
		if d := diffSeq(w, got.seq[k]); d != "" {
			return fmt.Errorf("row %s: changes differ from the reference:\n%s", k, d)
		}
	}
	if len(got.seq) != len(want.seq) {
		return fmt.Errorf("%d row keys changed, reference %d", len(got.seq), len(want.seq))
	}
	if d := diffLists(join, got.liveRMT()); d != "" {
		return fmt.Errorf("upsert table differs from the join:\n%s", d)
	}
	live, err := got.liveVCMT()
	if err != nil {
		return err
	}
	if d := diffLists(join, live); d != "" {
		return fmt.Errorf("changelog table differs from the join:\n%s", d)
	}
	return nil
}

func diffSeq(want, got []string) string {
	if fmt.Sprint(want) == fmt.Sprint(got) {
		return ""
	}
	return fmt.Sprintf("want:\n  %v\ngot:\n  %v", want, got)
}

// TestOpRoundTrip: a waiting op keeps every field of its input the join
// reads (a parent's source partition included).
func TestOpRoundTrip(t *testing.T) {
	op := skew.Op{Kind: skew.OpApply, Version: 7, Origin: 42,
		In: keyed.Input{Kind: keyed.ParentLoad, Side: row.Parent, JoinKey: key(1), Row: []row.Value{row.Int(1), row.String("x")},
			Version: 5, PadVersion: 6, Partition: 3, PartitionKnown: true}}
	var got skew.Op
	if err := skew.DecodeOp(skew.AppendOp(nil, &op), &got); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(op) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, op)
	}
}

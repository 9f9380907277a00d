package timejoin_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/cdcjoin/cdcjoin/row"
	. "github.com/cdcjoin/cdcjoin/timejoin"
	"github.com/cdcjoin/cdcjoin/timejoin/timegen"
)

type rec = timegen.Event

// toRecord is the Record of a generated event: one column (its Val; "?"
// an unchanged TOAST value), a one-column string key ("" NULL).
func toRecord(s *Spec, r rec) *Record {
	out := toRecordOf(r)
	if len(s.KeyCols[0]) > 0 && out.Row != nil {
		// compact(s): rows (time, key, val), the key and time in the
		// state key, only val in the value.
		k := row.Null()
		if r.Key != "" {
			k = row.String(r.Key)
		}
		out.Row = []row.Value{row.Timestamp(r.Time), k, out.Row[0]}
	}
	return out
}

// compact makes s store rows (time, key, val) without key and time.
func compact(s *Spec) {
	s.LeftWidth, s.RightWidth = 3, 3
	s.KeyCols = [2][]int{{1}, {1}}
	s.TimeCol = [2]int{0, 0}
	for i := range s.Out {
		if s.Out[i].From == FromLeft || s.Out[i].From == FromRight {
			s.Out[i].Index = 2
		}
	}
}

func toRecordOf(r rec) *Record {
	out := &Record{Side: r.Side, Partition: r.Partition, Op: r.Op, Time: r.Time, PK: []byte(r.PK)}
	if r.Op == Insert {
		if r.Key == "" {
			out.Key, out.KeyNull = row.AppendKey(nil, []row.Value{row.Null()}), true
		} else {
			out.Key = row.AppendKey(nil, []row.Value{row.String(r.Key)})
		}
		v := row.String(r.Val)
		if r.Val == "?" {
			v = row.Unavailable()
		}
		out.Row = []row.Value{v}
	}
	return out
}

// run drives a Join over recs on a MemState, committing (Save + a copy of
// the state) every commitEvery records and crashing before the records
// listed in crashes (state back to the last commit, a new Join loaded
// from it, the records since re-applied). Rows are collected by sequence
// number, as the exactly-once sink does: a re-emitted sequence number must
// carry the same row. It returns the rows (sorted) and the late indexes.
type runConf struct {
	declared    []Source
	end         bool
	crashes     map[int]bool
	commitEvery int
	opts        Options
	idle        map[int][]Source   // SetIdle(true) before record i (driver idleness)
	sample      func(st *MemState) // called at every commit
}

func run(t testing.TB, s *Spec, recs []rec, c runConf) (out []string, late []int, st *MemState, j *Join) {
	t.Helper()
	if c.commitEvery <= 0 {
		c.commitEvery = 1
	}
	st = &MemState{}
	committed := st.Clone()
	newJoin := func() *Join {
		j := New(s, c.opts)
		if err := j.Load(st); err != nil {
			t.Fatal(err)
		}
		return j
	}
	j = newJoin()
	for _, d := range c.declared {
		j.Declare(d)
	}
	rows := map[uint64]string{}
	lateSet := map[int]bool{}
	emit := func(ch *row.Change) error {
		if ch.Op != row.Insert {
			t.Fatalf("emitted op %v", ch.Op)
		}
		txt := timegen.Text(s, ch.Values)
		if old, ok := rows[ch.Version]; ok && old != txt {
			t.Fatalf("sequence %d re-emitted as %q, was %q", ch.Version, txt, old)
		}
		rows[ch.Version] = txt
		return nil
	}
	crashed := map[int]bool{}
	last := 0
	for i := 0; i < len(recs); {
		if c.crashes[i] && !crashed[i] {
			crashed[i] = true
			st = committed.Clone()
			j = newJoin()
			i = last
			continue
		}
		for _, src := range c.idle[i] {
			if err := j.SetIdle(st, src, true, emit); err != nil {
				t.Fatal(err)
			}
		}
		res, err := j.Apply(st, toRecord(s, recs[i]), emit)
		if err != nil {
			t.Fatalf("record %d (%v): %v", i, recs[i], err)
		}
		if res.Verdict == Late {
			lateSet[i] = true
		}
		i++
		if i%c.commitEvery == 0 || i == len(recs) {
			if err := j.Save(st); err != nil {
				t.Fatal(err)
			}
			committed, last = st.Clone(), i
			if c.sample != nil {
				c.sample(st)
			}
		}
	}
	if c.end {
		if err := j.EndOfInput(st, emit); err != nil {
			t.Fatal(err)
		}
		if err := j.Save(st); err != nil {
			t.Fatal(err)
		}
	}
	for seq := uint64(1); seq <= uint64(len(rows)); seq++ {
		if _, ok := rows[seq]; !ok {
			t.Fatalf("sequence numbers have a gap at %d (%d rows)", seq, len(rows))
		}
	}
	if j.Seq() != uint64(len(rows)) {
		t.Fatalf("Seq %d, %d rows", j.Seq(), len(rows))
	}
	for _, r := range rows {
		out = append(out, r)
	}
	slices.Sort(out)
	for i := range recs {
		if lateSet[i] {
			late = append(late, i)
		}
	}
	return out, late, st, j
}

// check compares a run with the reference.
func check(t testing.TB, s *Spec, recs []rec, c runConf) bool {
	t.Helper()
	ok, _ := checkStats(t, s, recs, c)
	return ok
}

func checkStats(t testing.TB, s *Spec, recs []rec, c runConf) (bool, Stats) {
	t.Helper()
	got, gotLate, _, j := run(t, s, recs, c)
	want, wantLate := timegen.Expected(s, recs, !c.opts.IdleByDriver, c.declared, c.end)
	if slices.Equal(got, want) && slices.Equal(gotLate, wantLate) {
		return true, j.Stats
	}
	t.Errorf("%s %s lower=%d upper=%d size=%d slide=%d ooo=%d lateness=%d idle=%d end=%v: output differs\ninput:", s.Kind, s.Join,
		s.Lower, s.Upper, s.Size, s.Slide, s.OutOfOrderness, s.AllowedLateness, s.IdleTimeout, c.end)
	for i, r := range recs {
		t.Errorf("  %d: %v", i, r)
	}
	t.Errorf("got  %q late %v\nwant %q late %v", got, gotLate, want, wantLate)
	return false, j.Stats
}

func spec(kind Kind, jt JoinType) *Spec {
	s := &Spec{Kind: kind, Join: jt, LeftWidth: 1, RightWidth: 1,
		Out: []Column{{From: FromLeft}, {From: FromRight}}}
	switch kind {
	case Interval:
		s.Lower, s.Upper = 0, 2
	case Window:
		s.Size, s.Slide = 2, 2
		s.Out = append(s.Out, Column{From: FromWindowStart}, Column{From: FromWindowEnd})
	}
	return s
}

var joinTypes = []JoinType{Inner, LeftOuter, RightOuter, FullOuter}

// TestExhaustive runs every history of up to three records over a small
// alphabet (two partitions a side, a few times, a NULL key), for every kind,
// join type and a few bound/lateness settings, with and without end of
// input, and one crash in the middle.
func TestExhaustive(t *testing.T) {
	var alpha []rec
	for _, side := range []Side{SideLeft, SideRight} {
		parts := []int32{0, 1}
		if side == SideRight {
			parts = parts[:1]
		}
		for _, p := range parts {
			for _, tm := range []int64{0, 1, 3} {
				alpha = append(alpha, rec{Side: side, Partition: p, Op: Insert, Time: tm, Key: "a"})
			}
		}
		alpha = append(alpha, rec{Side: side, Partition: 0, Op: Insert, Time: 1, Key: ""})
	}
	depth := 3
	if testing.Short() {
		depth = 2
	}
	type variant struct {
		tune func(*Spec)
		name string
	}
	variants := []variant{
		{func(*Spec) {}, "default"},
		{func(s *Spec) { s.OutOfOrderness = 1 }, "ooo1"},
		{func(s *Spec) { s.AllowedLateness = 1 }, "late1"},
		{func(s *Spec) { s.Lower, s.Upper, s.Slide = -1, 1, 1 }, "sym/hop"},
		{func(s *Spec) { s.Lower, s.Upper = 1, 3 }, "positive"},
		{func(s *Spec) { s.Lower, s.Upper = -3, -1 }, "negative"},
		{func(s *Spec) { s.IdleTimeout = 2 }, "idle2"},
		{compact, "compact"},
	}
	n := 0
	for _, kind := range []Kind{Interval, Window, Temporal} {
		for _, jt := range joinTypes {
			if kind == Temporal && (jt == RightOuter || jt == FullOuter) {
				continue
			}
			for _, v := range variants {
				s := spec(kind, jt)
				v.tune(s)
				if err := s.Validate(); err != nil {
					continue
				}
				a := alpha
				if kind == Temporal {
					a = temporalAlphabet()
				}
				var hist []rec
				maxDepth := depth
				var walk func(depth int) bool
				walk = func(depth int) bool {
					if len(hist) > 0 {
						recs := slices.Clone(hist)
						for i := range recs {
							recs[i].PK = strconv.Itoa(i)
							if recs[i].Side == SideRight && kind == Temporal {
								recs[i].PK = fmt.Sprintf("p%d", i%2)
							}
							recs[i].Val = fmt.Sprintf("%s%d", recs[i].Side, i)
						}
						for _, end := range []bool{false, true} {
							n++
							c := runConf{end: end, commitEvery: 1}
							if len(recs) > 1 {
								c.crashes = map[int]bool{len(recs) - 1: true}
								c.commitEvery = 2
							}
							if !check(t, s, recs, c) {
								return false
							}
						}
					}
					if depth == maxDepth {
						return true
					}
					for _, r := range a {
						hist = append(hist, r)
						ok := walk(depth + 1)
						hist = hist[:len(hist)-1]
						if !ok {
							return false
						}
					}
					return true
				}
				if !walk(0) {
					t.Fatalf("variant %s", v.name)
				}
			}
		}
	}
	t.Logf("%d histories", n)
}

// temporalAlphabet: left events and right changes (upserts under two
// keys, deletes, a truncate) at a few times.
func temporalAlphabet() []rec {
	var a []rec
	for _, tm := range []int64{0, 1, 3} {
		a = append(a, rec{Side: SideLeft, Partition: int32(tm % 2), Op: Insert, Time: tm, Key: "a"})
		a = append(a, rec{Side: SideRight, Partition: 0, Op: Insert, Time: tm, Key: "a"})
		a = append(a, rec{Side: SideRight, Partition: 0, Op: Insert, Time: tm, Key: "b"})
		a = append(a, rec{Side: SideRight, Partition: 0, Op: Delete, Time: tm})
	}
	a = append(a, rec{Side: SideRight, Partition: 1, Op: Truncate, Time: 2})
	a = append(a, rec{Side: SideLeft, Partition: 0, Op: Insert, Time: 2, Key: ""})
	return a
}

// seed returns the test's random seed (CDCJOIN_SEED to reproduce), logged.
func seed(t testing.TB) uint64 {
	s := uint64(rand.Int64())
	if v := os.Getenv("CDCJOIN_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CDCJOIN_SEED=%q: %v", v, err)
		}
		s = n
	}
	t.Logf("seed %d (CDCJOIN_SEED=%d to reproduce)", s, s)
	return s
}

func history(rng *rand.Rand, kind Kind, n int, ooo int64) []rec {
	return timegen.Generate(rng, timegen.Options{Kind: kind, N: n, OutOfOrderness: ooo})
}

func historyOf(rng *rand.Rand, kind Kind, n int, ooo int64, steady bool) []rec {
	return timegen.Generate(rng, timegen.Options{Kind: kind, N: n, OutOfOrderness: ooo, Steady: steady})
}

// TestOracle compares seeded random histories with the reference, every
// kind and join type, with crashes.
func TestOracle(t *testing.T) {
	sd := seed(t)
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	var total Stats
	idled := 0
	defer func() {
		// The histories must exercise what they are for.
		t.Logf("totals: %+v, %d histories with an idle partition", total, idled)
		if total.Late == 0 || total.Duplicates == 0 || total.Outer == 0 || total.Retired == 0 || idled == 0 {
			t.Errorf("the histories missed a case: %+v, %d with idleness", total, idled)
		}
	}()
	for round := 0; round < rounds; round++ {
		rng := rand.New(rand.NewPCG(sd, uint64(round)))
		for _, kind := range []Kind{Interval, Window, Temporal} {
			for _, jt := range joinTypes {
				if kind == Temporal && jt > LeftOuter {
					continue
				}
				s := spec(kind, jt)
				s.OutOfOrderness = rng.Int64N(6)
				s.AllowedLateness = rng.Int64N(4)
				s.IdleTimeout = []int64{0, 20, 60}[rng.IntN(3)]
				s.Lower = rng.Int64N(11) - 5
				s.Upper = s.Lower + rng.Int64N(12)
				s.Size = 1 + rng.Int64N(12)
				s.Slide = 1 + rng.Int64N(s.Size)
				recs := history(rng, kind, 300, s.OutOfOrderness)
				if rng.IntN(2) == 0 {
					compact(s)
				}
				c := runConf{end: rng.IntN(2) == 0, commitEvery: 1 + rng.IntN(20), crashes: map[int]bool{},
					opts: Options{MemoryBytes: []int{0, -1, 3000}[rng.IntN(3)]}}
				for i := 0; i < 3; i++ {
					c.crashes[rng.IntN(len(recs))] = true
				}
				ok, st := checkStats(t, s, recs, c)
				if !ok {
					t.Fatalf("round %d (seed %d)", round, sd)
				}
				total.Late += st.Late
				total.Duplicates += st.Duplicates
				total.Outer += st.Outer
				total.Retired += st.Retired
				total.Pairs += st.Pairs
				if s.IdleTimeout > 0 && idleHappened(s, recs) {
					idled++
				}
			}
		}
	}
}

// idleHappened reports whether some partition was idle by event time at
// some record.
func idleHappened(s *Spec, recs []rec) bool {
	last := map[Source]int64{}
	gmax := MinTime
	for _, r := range recs {
		gmax = max(gmax, r.Time)
		for _, l := range last {
			if gmax-l >= s.IdleTimeout {
				return true
			}
		}
		last[Source{Side: r.Side, Partition: r.Partition}] = gmax
	}
	return false
}

// TestStateBounded: a history eight times longer at the same rate and
// bound keeps about the same state (rows inside the bound, not the
// history), for every kind: the mean number of entries over the commits of
// the second half of the history.
func TestStateBounded(t *testing.T) {
	sd := seed(t)
	for _, kind := range []Kind{Interval, Window, Temporal} {
		s := spec(kind, LeftOuter)
		s.Lower, s.Upper, s.Size, s.Slide, s.OutOfOrderness = -5, 5, 8, 4, 3
		var means [2]float64
		for i, n := range []int{2000, 16000} {
			rng := rand.New(rand.NewPCG(sd, 1))
			recs := historyOf(rng, kind, n, s.OutOfOrderness, true)
			var sum, count float64
			commits := 0
			run(t, s, recs, runConf{commitEvery: 100, sample: func(st *MemState) {
				if commits++; commits > n/200 {
					sum += float64(st.Len())
					count++
				}
			}})
			means[i] = sum / count
		}
		t.Logf("%s: %.0f entries on average over 2000 records, %.0f over 16000", kind, means[0], means[1])
		if means[1] > 1.25*means[0]+10 {
			t.Errorf("%s: the state grew with the history: %.0f entries on average over 2000 records, %.0f over 16000", kind, means[0], means[1])
		}
	}
}

package kafkarun

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/timejoin"
	"github.com/cdcjoin/cdcjoin/timejoin/timegen"
)

// memIndex is a temporalIndex in memory.
type memIndex map[string][]byte

func (m memIndex) ChildIndex(pk []byte) ([]byte, bool, error) {
	e, ok := m[string(pk)]
	return e, ok, nil
}
func (m memIndex) SetChildIndex(pk, e []byte) error { m[string(pk)] = bytes.Clone(e); return nil }

// TestTemporalRouting checks the keying stage's routing of a temporal
// join's right side (temporalRouter: rows whose join key moves, deletes
// with key-only before images, NULL keys, truncates, redeliveries)
// against replay's semantics: seeded timegen histories are keyed into
// several keyed partitions, each with its own timejoin.Join, every source
// record's time reaching every partition at once (as if each record were a
// keying transaction with its watermark records), so each partition's
// watermark is replay's; the union of the partitions' output at the end of
// input must be the reference's (timegen.Expected, replay's model). The
// negative control: with each upsert sent only to its key's partition (no
// record of a key move for the old key's), some history's output differs.
func TestTemporalRouting(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CDCJOIN_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed = v
	}
	rounds := 200
	if testing.Short() {
		rounds = 60
	}
	var moves, lateRight, differed int
	for round := 0; round < rounds; round++ {
		rng := rand.New(rand.NewPCG(seed, uint64(round)))
		jt := []timejoin.JoinType{timejoin.Inner, timejoin.LeftOuter}[round%2]
		s := timegen.RandomSpec(rng, timejoin.Temporal, jt, []int64{0, 5000, 20000})
		events := timegen.Generate(rng, timegen.Options{Kind: timejoin.Temporal, N: 400, OutOfOrderness: s.OutOfOrderness / 1000, Scale: 1000, Keys: 6})
		parts := int32(2 + rng.IntN(3))
		want, late := timegen.Expected(s, events, true, nil, true)
		got, st := routeHistory(t, s, events, parts, false)
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d round %d (%s, %d keyed partitions): %d rows, want %d:\n%s", seed, round, jt, parts, len(got), len(want),
				strings.Join(testkit.SortedDiff(got, want, 20), "\n"))
		}
		moves += st.moves
		for _, i := range late {
			if events[i].Side == timejoin.SideRight {
				lateRight++
			}
		}
		if bad, _ := routeHistory(t, s, events, parts, true); !slices.Equal(bad, want) {
			differed++
		}
	}
	t.Logf("seed %d: %d rounds, %d upserts sent to other keyed partitions than their key's, %d late right changes, %d rounds differ with upserts sent only to their key's partition",
		seed, rounds, moves, lateRight, differed)
	if moves == 0 || differed == 0 {
		t.Fatalf("seed %d: %d upserts to the other partitions, %d rounds differ without them: the histories show nothing", seed, moves, differed)
	}
}

type routeStats struct{ moves int }

// routeHistory keys events into parts keyed partitions as the keying stage
// does (left rows by their key, right changes by temporalRouter, truncates
// to all) and returns the rows the partitions' joins emit, sorted.
func routeHistory(t *testing.T, s *timejoin.Spec, events []timegen.Event, parts int32, targetOnly bool) ([]string, routeStats) {
	t.Helper()
	joins := make([]*timejoin.Join, parts)
	states := make([]*timejoin.MemState, parts)
	var out []string
	emit := func(c *row.Change) error {
		out = append(out, timegen.Text(s, c.Values))
		return nil
	}
	for p := range joins {
		joins[p], states[p] = timejoin.New(s, timejoin.Options{}), &timejoin.MemState{}
		if err := joins[p].Load(states[p]); err != nil {
			t.Fatal(err)
		}
	}
	tr := &temporalRouter{parts: parts, targetOnly: targetOnly}
	indexes := map[int32]memIndex{}
	var st routeStats
	for _, e := range events {
		rec := recordOf(e)
		got := map[int32]bool{}
		apply := func(p int32, r *timejoin.Record) error {
			if got[p] {
				return fmt.Errorf("two records of one change for keyed partition %d", p)
			}
			got[p] = true
			_, err := joins[p].Apply(states[p], r, emit)
			return err
		}
		var err error
		switch {
		case e.Op == timejoin.Truncate:
			for p := int32(0); p < parts && err == nil; p++ {
				err = apply(p, rec)
			}
		case e.Side == timejoin.SideRight:
			ix := indexes[e.Partition]
			if ix == nil {
				ix = memIndex{}
				indexes[e.Partition] = ix
			}
			var n int
			n, err = tr.route(ix, rec, apply)
			st.moves += n
		default:
			err = apply(keyedlog.Partition(rec.Key, parts), rec)
		}
		for p := int32(0); p < parts && err == nil; p++ {
			if !got[p] {
				err = joins[p].Advance(states[p], timejoin.Source{Side: e.Side, Partition: e.Partition}, e.Time, emit)
			}
		}
		if err != nil {
			t.Fatalf("%v: %v", e, err)
		}
	}
	for p := range joins {
		if err := joins[p].EndOfInput(states[p], emit); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(out)
	return out, st
}

// recordOf is the timejoin.Record the time decoder gives for a generated
// event (one column, its Val; "?" an unchanged TOAST value; a one-column
// string key, "" NULL; deletes without a key, as key-only before images
// decode).
func recordOf(e timegen.Event) *timejoin.Record {
	r := &timejoin.Record{Side: e.Side, Partition: e.Partition, Op: e.Op, Time: e.Time, PK: []byte(e.PK)}
	if e.Op != timejoin.Insert {
		return r
	}
	k := row.String(e.Key)
	if e.Key == "" {
		k, r.KeyNull = row.Null(), true
	}
	r.Key = row.AppendKey(nil, []row.Value{k})
	v := row.String(e.Val)
	if e.Val == "?" {
		v = row.Unavailable()
	}
	r.Row = []row.Value{v}
	return r
}

// BenchmarkTemporalRoute measures the keying stage's routing of a
// temporal right side's upserts on a pebble index (joinstate, one
// transaction per 1000 changes, 8 MiB cache as the keying stage opens
// it): 1,000 rows, each change an update to one of 20 join keys (so
// rows move between 4 keyed partitions), a 3-column row.
func BenchmarkTemporalRoute(b *testing.B) {
	s, err := joinstate.Open(joinstate.Options{Dir: b.TempDir(), CacheBytes: 8 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	tr := &temporalRouter{parts: 4}
	rng := rand.New(rand.NewPCG(1, 2))
	recs := make([]timejoin.Record, 4096)
	for i := range recs {
		recs[i] = timejoin.Record{Side: timejoin.SideRight, Op: timejoin.Insert, PK: []byte(fmt.Sprintf(`{"id":%d}`, rng.IntN(1000))),
			Key: row.AppendKey(nil, []row.Value{row.String(strconv.Itoa(rng.IntN(20)))}),
			Row: []row.Value{row.Int(int64(i)), row.String("some name"), row.String(strconv.Itoa(i))}}
	}
	sent := 0
	send := func(int32, *timejoin.Record) error { sent++; return nil }
	t := s.Begin()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := &recs[i%len(recs)]
		r.Time = int64(i)
		if _, err := tr.route(t, r, send); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 {
			if err := t.Commit(); err != nil {
				b.Fatal(err)
			}
			t = s.Begin()
		}
	}
	b.StopTimer()
	t.Abort()
	b.ReportMetric(float64(sent)/float64(b.N), "records/change")
}

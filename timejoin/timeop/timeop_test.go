package timeop

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/timejoin"
	"github.com/cdcjoin/cdcjoin/timejoin/timegen"
)

// TestOperator drives the operator through the keyed log's encoding
// (records written and decoded as run's keying and join stages do) on a
// keyed.MemState, a watermark message after every record (what a keying
// stage reports of the record's partition), and compares with the
// reference; late records come out through Reject.
func TestOperator(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	for round := 0; round < 12; round++ {
		rng := rand.New(rand.NewPCG(seed, uint64(round)))
		kind := []timejoin.Kind{timejoin.Interval, timejoin.Window, timejoin.Temporal}[round%3]
		jt := []timejoin.JoinType{timejoin.Inner, timejoin.LeftOuter}[round/3%2]
		s := &timejoin.Spec{Kind: kind, Join: jt, Lower: -2, Upper: 3, Size: 4, Slide: 2, OutOfOrderness: 2, AllowedLateness: 1,
			LeftWidth: 1, RightWidth: 1, Out: []timejoin.Column{{From: timejoin.FromLeft}, {From: timejoin.FromRight}}}
		events := timegen.Generate(rng, timegen.Options{Kind: kind, N: 400, OutOfOrderness: 2})
		op := New(s, 0)
		st := keyed.NewMemState()
		if err := op.Load(st); err != nil {
			t.Fatal(err)
		}
		rows := map[uint64]string{}
		var late []int
		cur := 0
		out := keyedlog.Out{
			Emit: func(c *row.Change) error {
				rows[c.Version] = timegen.Text(s, c.Values)
				return nil
			},
			Reject: func(m *keyedlog.Msg, reason string, tm, wm int64) error {
				if reason != "late" || tm >= wm-s.AllowedLateness {
					t.Errorf("rejected %s at %d, watermark %d", reason, tm, wm)
				}
				late = append(late, cur)
				return nil
			},
		}
		var m keyedlog.Msg
		for i, e := range events {
			cur = i
			r := timejoin.Record{Side: e.Side, Partition: e.Partition, Op: e.Op, Time: e.Time, PK: []byte(e.PK)}
			if e.Op == timejoin.Insert {
				k := row.String(e.Key)
				if e.Key == "" {
					k, r.KeyNull = row.Null(), true
				}
				v := row.String(e.Val)
				if e.Val == "?" {
					v = row.Unavailable()
				}
				r.Key, r.Row = row.AppendKey(nil, []row.Value{k}), []row.Value{v}
			}
			key, val := keyedlog.AppendTime(nil, nil, &r, keyedlog.TimeSource{Partition: e.Partition, Offset: int64(i)})
			if err := keyedlog.Decode(nil, key, val, nil, &m); err != nil {
				t.Fatal(err)
			}
			if err := op.Step(st, &m, out); err != nil {
				t.Fatal(err)
			}
			if i%50 == 49 { // a restart
				op = New(s, []int{0, -1}[i%2])
				if err := op.Load(st); err != nil {
					t.Fatal(err)
				}
			}
		}
		var got []string
		for _, r := range rows {
			got = append(got, r)
		}
		slices.Sort(got)
		want, wantLate := timegen.Expected(s, events, false, nil, false)
		if !slices.Equal(got, want) || !slices.Equal(late, wantLate) {
			t.Fatalf("round %d %s %s: %d rows, %d late; want %d rows, %d late", round, kind, jt, len(got), len(late), len(want), len(wantLate))
		}
	}
}

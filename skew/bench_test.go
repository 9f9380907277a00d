package skew_test

import (
	"fmt"
	"testing"

	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/skew"
)

// BenchmarkFairFanOut renames a parent with 200,000 children on pebble:
// at once (chunk -1), and in chunks of 1024 rows advanced one step per
// input of another key (the engine's pattern, without the pacing clock):
// the cost of fair fan-out per row.
func BenchmarkFairFanOut(b *testing.B) {
	for _, chunk := range []int{-1, 1024} {
		b.Run(fmt.Sprintf("chunk=%d", chunk), func(b *testing.B) {
			spec := testSpec(b, false)
			st, err := joinstate.Open(joinstate.Options{Dir: b.TempDir(), CacheBytes: 64 << 20})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			const children = 200_000
			jk := key(1)
			j := keyed.NewJoin(spec)
			txn := st.Begin()
			var ver uint64
			in := keyed.Input{Side: row.Child, Kind: keyed.ChildUpsert, JoinKey: jk, Row: make([]row.Value, 3)}
			for i := int64(0); i < children; i++ {
				in.ChildKey = key(i)
				in.Row[0], in.Row[1], in.Row[2] = row.Int(i), row.Int(1), row.String("hot-user-domain.com")
				ver++
				if err := j.Apply(txn, &in, ver, nil); err != nil {
					b.Fatal(err)
				}
				if i%10000 == 9999 {
					if err := txn.Commit(); err != nil {
						b.Fatal(err)
					}
					txn = st.Begin()
				}
			}
			if err := txn.Commit(); err != nil {
				b.Fatal(err)
			}
			changes := 0
			emit := func(*row.Change) error { changes++; return nil }
			other := keyed.Input{Side: row.Parent, Kind: keyed.ParentUpsert, JoinKey: key(2), Row: []row.Value{row.Int(2), row.String("x")}}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f := skew.NewFair(keyed.NewJoin(spec), chunk)
				txn := st.Begin()
				if err := f.Load(txn); err != nil {
					b.Fatal(err)
				}
				ver++
				p := keyed.Input{Side: row.Parent, Kind: keyed.ParentUpsert, JoinKey: jk, Row: []row.Value{row.Int(1), row.String(fmt.Sprint("Name", i))}}
				if err := apply(f, txn, &p, ver, emit); err != nil {
					b.Fatal(err)
				}
				for f.Busy() {
					ver++
					other.Row[1] = row.String(fmt.Sprint(ver))
					if err := apply(f, txn, &other, ver, emit); err != nil {
						b.Fatal(err)
					}
					if _, err := f.Advance(txn, chunk, keyedlog.Out{Emit: emit}); err != nil {
						b.Fatal(err)
					}
				}
				if err := txn.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(changes)/b.Elapsed().Seconds(), "changes/s")
		})
	}
}

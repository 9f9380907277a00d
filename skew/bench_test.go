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

// BenchmarkRouterSnapshot steps a Router on a fresh pebble state through a
// snapshot's inputs: a parent and then about three children per join key,
// children spread over the keys as a snapshot's table scan spreads them,
// 1,000 inputs per commit (a batch). Every input reads its key's child
// count (Router.count: an Aux point read, for most keys of an absent
// entry): the per-input cost of routing a snapshot.
func BenchmarkRouterSnapshot(b *testing.B) {
	spec := testSpec(b, false)
	st, err := joinstate.Open(joinstate.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	r := skew.NewRouter(spec, skew.RouterConfig{Partitions: 1, Hot: 1 << 30, Cool: 1, Salts: 2, Chunk: -1})
	txn := st.Begin()
	if err := r.MarkFresh(txn); err != nil {
		b.Fatal(err)
	}
	if err := r.Load(txn); err != nil {
		b.Fatal(err)
	}
	out := keyedlog.Out{Emit: func(*row.Change) error { return nil }}
	const keys = 1 << 18
	var m keyedlog.Msg
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := int64(i)
		if n%4 == 0 { // a parent
			jk := n / 4 % keys
			m = keyedlog.Msg{Kind: keyedlog.KindInput, In: keyed.Input{Side: row.Parent, Kind: keyed.ParentUpsert, JoinKey: key(jk),
				Row: []row.Value{row.Int(jk), row.String("name")}}}
		} else { // a child of a key 7919 parents away: not the last few
			jk := (n/4 + 7919*(n%4)) % keys
			m = keyedlog.Msg{Kind: keyedlog.KindInput, In: keyed.Input{Side: row.Child, Kind: keyed.ChildUpsert, JoinKey: key(jk), ChildKey: key(n),
				Row: []row.Value{row.Int(n), row.Int(jk), row.String("domain.example")}}}
		}
		m.Version, m.Pos = uint64(i+1), n
		if err := r.Step(txn, &m, out); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 {
			if err := txn.Commit(); err != nil {
				b.Fatal(err)
			}
			txn = st.Begin()
		}
	}
	b.StopTimer()
	if err := txn.Commit(); err != nil {
		b.Fatal(err)
	}
}

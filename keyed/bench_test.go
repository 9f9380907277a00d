package keyed_test

import (
	"fmt"
	"testing"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
)

func benchSetup(b *testing.B, join string) (*keyed.Spec, *joinstate.Store) {
	cfg, err := config.Parse([]byte(fmt.Sprintf(ddConfig, join)), "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	st, err := joinstate.Open(joinstate.Options{Dir: b.TempDir(), CacheBytes: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return keyed.NewSpec(cfg), st
}

// BenchmarkJoinApply measures keyed child upserts joined against existing
// parents on an on-disk pebble state, committing every 1000 inputs.
func BenchmarkJoinApply(b *testing.B) {
	spec, st := benchSetup(b, "inner")
	j := keyed.NewJoin(spec)
	const parents = 10000
	txn := st.Begin()
	var ver uint64
	in := keyed.Input{Side: config.Parent, Kind: keyed.ParentUpsert}
	for i := int64(0); i < parents; i++ {
		in.JoinKey = joinstate.AppendKey(in.JoinKey[:0], []debezium.Value{debezium.Int(i)})
		in.Row = []debezium.Value{debezium.Int(i), debezium.String("First"), debezium.String("Last")}
		ver++
		if err := j.Apply(txn, &in, ver, func(*keyed.Change) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
	if err := txn.Commit(); err != nil {
		b.Fatal(err)
	}
	var changes int
	emit := func(*keyed.Change) error { changes++; return nil }
	child := keyed.Input{Side: config.Child, Kind: keyed.ChildUpsert, Row: make([]debezium.Value, 3)}
	txn = st.Begin()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pk := int64(i)
		fk := int64(i*7919) % parents
		child.JoinKey = joinstate.AppendKey(child.JoinKey[:0], []debezium.Value{debezium.Int(fk)})
		child.ChildKey = joinstate.AppendKey(child.ChildKey[:0], []debezium.Value{debezium.Int(pk)})
		child.Row[0], child.Row[1], child.Row[2] = debezium.Int(pk), debezium.Int(fk), debezium.String("example-domain.com")
		ver++
		if err := j.Apply(txn, &child, ver, emit); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 {
			if err := txn.Commit(); err != nil {
				b.Fatal(err)
			}
			txn = st.Begin()
		}
	}
	if err := txn.Commit(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "inputs/s")
}

// BenchmarkFanOut renames a parent with 1M children: one input, 1M upserts
// streamed from pebble (memory stays bounded).
func BenchmarkFanOut(b *testing.B) {
	spec, st := benchSetup(b, "inner")
	j := keyed.NewJoin(spec)
	const children = 1_000_000
	jk := joinstate.AppendKey(nil, []debezium.Value{debezium.Int(1)})
	txn := st.Begin()
	var ver uint64
	child := keyed.Input{Side: config.Child, Kind: keyed.ChildUpsert, JoinKey: jk, Row: make([]debezium.Value, 3)}
	for i := int64(0); i < children; i++ {
		child.ChildKey = joinstate.AppendKey(child.ChildKey[:0], []debezium.Value{debezium.Int(i)})
		child.Row[0], child.Row[1], child.Row[2] = debezium.Int(i), debezium.Int(1), debezium.String("hot-user-domain.com")
		ver++
		if err := j.Apply(txn, &child, ver, nil); err != nil {
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
	var changes int
	emit := func(*keyed.Change) error { changes++; return nil }
	parent := keyed.Input{Side: config.Parent, Kind: keyed.ParentUpsert, JoinKey: jk}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		parent.Row = []debezium.Value{debezium.Int(1), debezium.String(fmt.Sprintf("Name%d", i)), debezium.String("Hot")}
		txn := st.Begin()
		ver++
		if err := j.Apply(txn, &parent, ver, emit); err != nil {
			b.Fatal(err)
		}
		if err := txn.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(changes)/b.Elapsed().Seconds(), "changes/s")
	b.ReportMetric(float64(changes)/float64(b.N), "changes/op")
}

package keyed_test

import (
	"fmt"
	"testing"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
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
	return job.MustSpec(cfg), st
}

// BenchmarkJoinApply measures keyed child upserts joined against existing
// parents on an on-disk pebble state, committing every 1000 inputs.
func BenchmarkJoinApply(b *testing.B) {
	spec, st := benchSetup(b, "inner")
	j := keyed.NewJoin(spec)
	const parents = 10000
	txn := st.Begin()
	var ver uint64
	in := keyed.Input{Side: row.Parent, Kind: keyed.ParentUpsert}
	for i := int64(0); i < parents; i++ {
		in.JoinKey = row.AppendKey(in.JoinKey[:0], []row.Value{row.Int(i)})
		in.Row = []row.Value{row.Int(i), row.String("First"), row.String("Last")}
		ver++
		if err := j.Apply(txn, &in, ver, func(*row.Change) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
	if err := txn.Commit(); err != nil {
		b.Fatal(err)
	}
	var changes int
	emit := func(*row.Change) error { changes++; return nil }
	child := keyed.Input{Side: row.Child, Kind: keyed.ChildUpsert, Row: make([]row.Value, 3)}
	txn = st.Begin()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pk := int64(i)
		fk := int64(i*7919) % parents
		child.JoinKey = row.AppendKey(child.JoinKey[:0], []row.Value{row.Int(fk)})
		child.ChildKey = row.AppendKey(child.ChildKey[:0], []row.Value{row.Int(pk)})
		child.Row[0], child.Row[1], child.Row[2] = row.Int(pk), row.Int(fk), row.String("example-domain.com")
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
	jk := row.AppendKey(nil, []row.Value{row.Int(1)})
	txn := st.Begin()
	var ver uint64
	child := keyed.Input{Side: row.Child, Kind: keyed.ChildUpsert, JoinKey: jk, Row: make([]row.Value, 3)}
	for i := int64(0); i < children; i++ {
		child.ChildKey = row.AppendKey(child.ChildKey[:0], []row.Value{row.Int(i)})
		child.Row[0], child.Row[1], child.Row[2] = row.Int(i), row.Int(1), row.String("hot-user-domain.com")
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
	emit := func(*row.Change) error { changes++; return nil }
	parent := keyed.Input{Side: row.Parent, Kind: keyed.ParentUpsert, JoinKey: jk}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		parent.Row = []row.Value{row.Int(1), row.String(fmt.Sprintf("Name%d", i)), row.String("Hot")}
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

package keyed_test

import (
	"testing"

	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
)

// BenchmarkKeyerChild measures keying decoded child events against the
// child index: inserts of new children, then updates and FK moves of
// existing ones (each resolving its old join key from the index).
func BenchmarkKeyerChild(b *testing.B) {
	spec, st := benchSetup(b, "inner")
	k := keyed.NewKeyer(spec)
	const live = 100000
	ev := debezium.Event{After: debezium.Row{Present: true, Values: make([]row.Value, 3)}}
	var inputs int
	out := func(*keyed.Input) error { inputs++; return nil }
	txn := st.Begin()
	for i := int64(0); i < live; i++ {
		ev.Op = debezium.OpRead
		ev.After.Values[0], ev.After.Values[1], ev.After.Values[2] = row.Int(i), row.Int(i%1000), row.String("example.com")
		if err := k.Key(txn, row.Child, 0, &ev, out); err != nil {
			b.Fatal(err)
		}
	}
	if err := txn.Commit(); err != nil {
		b.Fatal(err)
	}
	txn = st.Begin()
	inputs = 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := int64(i*7919) % live
		ev.Op = debezium.OpUpdate
		fk := id % 1000
		if i%4 == 0 {
			fk = (fk + int64(i)) % 1000 // FK move
		}
		ev.After.Values[0], ev.After.Values[1], ev.After.Values[2] = row.Int(id), row.Int(fk), row.String("renamed.example.com")
		if err := k.Key(txn, row.Child, 0, &ev, out); err != nil {
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
	txn.Abort()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(inputs)/float64(b.N), "inputs/event")
}

// BenchmarkChangeAppendJSON measures the JSON-lines sink encoding of one
// joined row.
func BenchmarkChangeAppendJSON(b *testing.B) {
	names := []string{"user_id", "firstname", "lastname", "domain_id", "domain_name"}
	c := row.Change{Op: row.Upsert, Version: 123456789, PrevVersion: 123456000,
		ParentKey: []row.Value{row.Int(42)}, ChildKey: []row.Value{row.Int(4242)},
		Values: []row.Value{row.Int(42), row.String("Zoë"), row.String("O'Brien"),
			row.Int(4242), row.String("river-167.example.com")}}
	var buf []byte
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = c.AppendJSON(buf[:0], names)
	}
	b.SetBytes(int64(len(buf)))
}

package cdcgen

import (
	"io"
	"testing"
)

// BenchmarkGenerate measures streaming generation (records/s, MB/s of key +
// value bytes) for snapshot and CDC phases, schemas on and off, narrow and
// wide rows.
func BenchmarkGenerate(b *testing.B) {
	cdc := Mix{InsertUser: 10, InsertDomain: 25, UpdateUserSelected: 10, UpdateUserUnselected: 10,
		UpdateDomain: 15, MoveDomain: 10, DeleteUser: 2, DeleteDomain: 8, PKChangeUser: 1, PKChangeDomain: 1}
	for _, c := range []struct {
		name     string
		snapshot bool
		schema   SchemaMode
		pads     int
	}{
		{"snapshot/schema-off", true, SchemaOff, 0},
		{"snapshot/schema-on", true, SchemaOn, 0},
		{"cdc/schema-off", false, SchemaOff, 0},
		{"cdc/schema-on", false, SchemaOn, 0},
		{"cdc/schema-off/wide40", false, SchemaOff, 40},
	} {
		b.Run(c.name, func(b *testing.B) {
			o := Options{Seed: 1, SchemaMode: c.schema, Mix: cdc, Partitions: 8, Toast: 0.1,
				UserPads: c.pads, DomainPads: c.pads / 2, PadBytes: 24, MaxRoundOps: 256}
			if c.snapshot {
				o.Users, o.Domains = b.N/3+1, b.N-b.N/3+1
			} else {
				o.Users, o.Domains, o.Ops = 1000, 2000, b.N+1
			}
			g, err := NewGenerator(o)
			if err != nil {
				b.Fatal(err)
			}
			var bytes int64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r, ok := g.Next()
				if !ok {
					b.Fatal("history ended early")
				}
				bytes += int64(len(r.Key) + len(r.Value))
			}
			s := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/s, "records/s")
			b.ReportMetric(float64(bytes)/s/1e6, "MB/s")
			b.ReportMetric(float64(bytes)/float64(b.N), "B/record")
		})
	}
}

// BenchmarkStreamJSONL measures generation plus JSONL encoding.
func BenchmarkStreamJSONL(b *testing.B) {
	o := Options{Seed: 1, SchemaMode: SchemaOff, Partitions: 8, Users: 1000, Domains: 2000, Ops: b.N + 1}
	g, _ := NewGenerator(o)
	j := NewJSONLWriter(io.Discard)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, _ := g.Next()
		if err := j.Write(&r); err != nil {
			b.Fatal(err)
		}
	}
	_ = j.Flush()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

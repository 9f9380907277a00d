package keyed_test

import (
	"testing"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
)

// TestLoadRecords: parent and child records loaded with their versions
// (through the keyed-topic encoding) emit nothing, and a later change of
// the row cancels exactly the loaded versions.
func TestLoadRecords(t *testing.T) {
	spec := exhaustiveSpec(t, true)
	st := keyed.NewMemState()
	j := keyed.NewJoin(spec)
	jk := row.AppendKey(nil, []row.Value{i64(1)})
	ck := row.AppendKey(nil, []row.Value{i64(10)})
	var in keyed.Input
	apply := func(src keyed.Input, version uint64) []row.Change {
		t.Helper()
		key := keyedlog.AppendInputKey(nil, &src)
		val := keyedlog.AppendInputValue(nil, &src)
		var m keyedlog.Msg
		if err := keyedlog.Decode(spec, key, val, nil, &m); err != nil {
			t.Fatal(err)
		}
		in = m.In
		if in.Kind != src.Kind || in.Version != src.Version || in.PadVersion != src.PadVersion {
			t.Fatalf("round trip: %v v%d/%d, want %v v%d/%d", in.Kind, in.Version, in.PadVersion, src.Kind, src.Version, src.PadVersion)
		}
		var out []row.Change
		if err := j.Apply(st, &in, version, func(c *row.Change) error { out = append(out, cloneChange(*c)); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out := apply(keyed.Input{Kind: keyed.ParentLoad, Side: row.Parent, JoinKey: jk, Row: []row.Value{i64(1), str("Egor")}, Version: 700, PadVersion: 650}, 0); len(out) != 0 {
		t.Fatalf("parent load emitted %v", out)
	}
	if out := apply(keyed.Input{Kind: keyed.ChildLoad, Side: row.Child, JoinKey: jk, ChildKey: ck, Row: []row.Value{i64(10), i64(1), str("a.com")}, Version: 800}, 0); len(out) != 0 {
		t.Fatalf("child load emitted %v", out)
	}
	out := apply(keyed.Input{Kind: keyed.ParentUpsert, Side: row.Parent, JoinKey: jk, Row: []row.Value{i64(1), str("Vera")}}, 900)
	if len(out) != 1 || out[0].PrevVersion != 800 || out[0].Version != 900 || fmtVals(out[0].Prev) != "int:1,string:Egor,int:10,string:a.com" {
		t.Fatalf("rename after loads: %+v", out)
	}
	out = apply(keyed.Input{Kind: keyed.ChildDelete, Side: row.Child, JoinKey: jk, ChildKey: ck}, 901)
	if len(out) != 2 || out[0].Op != row.Retract || out[0].PrevVersion != 900 || out[1].ChildKey != nil || out[1].Op != row.Upsert {
		t.Fatalf("child delete after loads: %+v", out)
	}
}

func cloneChange(c row.Change) row.Change {
	c.ParentKey = append([]row.Value(nil), c.ParentKey...)
	if c.ChildKey != nil {
		c.ChildKey = append([]row.Value(nil), c.ChildKey...)
	}
	c.Values = append([]row.Value(nil), c.Values...)
	if c.Prev != nil {
		c.Prev = append([]row.Value(nil), c.Prev...)
	}
	return c
}

// TestIndexEntries: entries record their source partition; entries of
// cdcjoin ≤ wave 1 (no tag, no partition) still decode.
func TestIndexEntries(t *testing.T) {
	jk := row.AppendKey(nil, []row.Value{i64(7)})
	vals := []row.Value{i64(10), i64(7), str("a.com")}
	p, gotJK, got, err := keyed.DecodeIndexEntry(keyed.AppendIndexEntry(nil, 5, jk, vals), nil)
	if err != nil || p != 5 || string(gotJK) != string(jk) || fmtVals(got) != fmtVals(vals) {
		t.Fatalf("child entry: %d %x %v %v", p, gotJK, got, err)
	}
	legacy := append(append([]byte{byte(len(jk))}, jk...), row.AppendRow(nil, vals)...)
	if p, gotJK, got, err = keyed.DecodeIndexEntry(legacy, nil); err != nil || p != -1 || string(gotJK) != string(jk) || fmtVals(got) != fmtVals(vals) {
		t.Fatalf("legacy child entry: %d %x %v %v", p, gotJK, got, err)
	}
	pvals := []row.Value{i64(7), str("Egor")}
	if p, got, err := keyed.DecodeParentIndexEntry(keyed.AppendParentIndexEntry(nil, 1<<20, pvals), nil); err != nil || p != 1<<20 || fmtVals(got) != fmtVals(pvals) {
		t.Fatalf("parent entry: %d %v %v", p, got, err)
	}
	if p, got, err := keyed.DecodeParentIndexEntry(row.AppendRow(nil, pvals), nil); err != nil || p != -1 || fmtVals(got) != fmtVals(pvals) {
		t.Fatalf("legacy parent entry: %d %v %v", p, got, err)
	}
}

// TestParentRecordPartition: a parent record keeps a known source
// partition; records without one (and those of cdcjoin ≤ wave 1) decode
// with -1.
func TestParentRecordPartition(t *testing.T) {
	for _, p := range []int32{-1, 0, 7, 1 << 30} {
		rec := keyed.ParentRecord{Version: 9, PadVersion: 3, Row: []row.Value{i64(1), str("Egor")}, Partition: p}
		var got keyed.ParentRecord
		if err := keyed.DecodeParent(keyed.AppendParent(nil, &rec), &got); err != nil || got.Partition != p || got.Version != 9 || got.PadVersion != 3 || fmtVals(got.Row) != fmtVals(rec.Row) {
			t.Fatalf("partition %d: %+v %v", p, got, err)
		}
	}
}

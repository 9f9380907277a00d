package keyedlog

import (
	"slices"
	"testing"

	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/timejoin"
)

func TestTimeRecords(t *testing.T) {
	for _, r := range []timejoin.Record{
		{Side: timejoin.SideLeft, Partition: 3, Op: timejoin.Insert, Time: -5, Key: row.AppendKey(nil, []row.Value{row.Int(7)}), PK: []byte("pk1"),
			Row: []row.Value{row.Int(7), row.String("x"), row.Null()}},
		{Side: timejoin.SideRight, Partition: 0, Op: timejoin.Insert, Time: 1 << 50, Key: row.AppendKey(nil, []row.Value{row.Null()}), KeyNull: true, PK: []byte{1, 2}, Row: []row.Value{row.Null()}},
		{Side: timejoin.SideRight, Partition: 9, Op: timejoin.Delete, Time: 12, PK: []byte(`{"id":4}`)},
	} {
		key, val := AppendTime(nil, nil, &r, TimeSource{Partition: r.Partition, Offset: 99, Key: []byte(`{"id":1}`)})
		var m Msg
		if err := Decode(nil, key, val, nil, &m); err != nil {
			t.Fatal(err)
		}
		got := m.Time
		if m.Kind != KindTime || got.Side != r.Side || got.Partition != r.Partition || got.Op != r.Op || got.Time != r.Time ||
			string(got.Key) != string(r.Key) || got.KeyNull != r.KeyNull || string(got.PK) != string(r.PK) ||
			len(got.Row) != len(r.Row) || m.Source.Offset != 99 || string(m.Source.Key) != `{"id":1}` {
			t.Errorf("round trip of %+v: %+v %+v", r, got, m.Source)
		}
		for i := range r.Row {
			if !got.Row[i].Equal(r.Row[i]) {
				t.Errorf("column %d: %v, want %v", i, got.Row[i], r.Row[i])
			}
		}
		if err := Decode(nil, key, val[:5], nil, &m); err == nil {
			t.Error("a truncated value decoded")
		}
	}
	w := Watermark{Source: timejoin.Source{Side: timejoin.SideRight, Partition: 2}, Max: timejoin.MinTime, Idle: true}
	key, val := AppendWatermark(nil, nil, &w, "host-a")
	var m Msg
	if err := Decode(nil, key, val, nil, &m); err != nil || m.Kind != KindWatermark || m.Watermark != w {
		t.Errorf("watermark round trip: %+v %v", m.Watermark, err)
	}
	_ = slices.Equal[[]byte]
}

package keyedlog_test

import (
	"slices"
	"testing"

	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
)

// decode decodes an input record with keyedlog.Decode.
func decode(spec *keyed.Spec, key, val []byte, in *keyed.Input) error {
	var m keyedlog.Msg
	m.In.Row = in.Row
	if err := keyedlog.Decode(spec, key, val, nil, &m); err != nil {
		return err
	}
	*in = m.In
	return nil
}

// TestCompactRecordValue: the compact value (the row without the columns
// the record key carries) is shorter and decodes to the same input as the
// full value of keyed topics written before it, which stays readable; a
// row whose key columns do not encode to the record key keeps the full
// form.
func TestCompactRecordValue(t *testing.T) {
	spec := testkit.Spec(t, false, []string{"firstname"}, []string{"name"})
	pk := func(v row.Value) []byte { return row.AppendKey(nil, []row.Value{v}) }
	ins := []keyed.Input{
		{Kind: keyed.ParentUpsert, Side: row.Parent, JoinKey: pk(row.Int(1)), Row: []row.Value{row.Int(1), row.String("Egor")}},
		{Kind: keyed.ChildUpsert, Side: row.Child, JoinKey: pk(row.Int(1)), ChildKey: pk(row.Int(10)),
			Row: []row.Value{row.Int(10), row.Int(1), row.String("a.com")}},
		{Kind: keyed.ChildUpsert, Side: row.Child, JoinKey: pk(row.String("k")), ChildKey: pk(row.String("c")),
			Row: []row.Value{row.String("c"), row.String("k"), {}}},
	}
	var got keyed.Input
	for _, in := range ins {
		key := keyedlog.AppendInputKey(nil, &in)
		full := keyedlog.AppendInputValue(nil, &in)
		compact := keyedlog.AppendCompactValue(spec, nil, key, &in)
		if len(compact) >= len(full) {
			t.Errorf("%v: compact value %d bytes, full %d", in.Row, len(compact), len(full))
		}
		for _, val := range [][]byte{full, compact} {
			if err := decode(spec, key, val, &got); err != nil {
				t.Fatalf("%v: decode %x: %v", in.Row, val, err)
			}
			if got.Kind != in.Kind || !slices.EqualFunc(got.Row, in.Row, row.Value.Equal) {
				t.Errorf("%x decodes to %v %v, want %v %v", val, got.Kind, got.Row, in.Kind, in.Row)
			}
		}
	}
	// A record key that is not the row's own (never made by the Keyer):
	// the full form, and it decodes to the row as given.
	odd := ins[1]
	odd.JoinKey = pk(row.Int(2))
	key := keyedlog.AppendInputKey(nil, &odd)
	val := keyedlog.AppendCompactValue(spec, nil, key, &odd)
	if string(val) != string(keyedlog.AppendInputValue(nil, &odd)) {
		t.Errorf("mismatching key: got %x, want the full form", val)
	}
	if err := decode(spec, key, val, &got); err != nil || !slices.EqualFunc(got.Row, odd.Row, row.Value.Equal) {
		t.Errorf("mismatching key: %v %v", got.Row, err)
	}
	// A compact value with a column too many or too few is corrupt.
	key = keyedlog.AppendInputKey(nil, &ins[1])
	val = keyedlog.AppendCompactValue(spec, nil, key, &ins[1])
	for _, bad := range [][]byte{row.AppendRowValue(slices.Clone(val), row.Int(5)), val[:1]} {
		if err := decode(spec, key, bad, &got); err == nil {
			t.Errorf("%x decoded to %v", bad, got.Row)
		}
	}
}

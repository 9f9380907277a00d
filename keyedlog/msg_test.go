package keyedlog_test

import (
	"bytes"
	"testing"

	"github.com/cdcjoin/cdcjoin/keyedlog"
)

// TestStageRecord: an operator's own record ('S') decodes to KindStage
// with its bytes untouched (a tombstone's value nil, a key of the prefix
// alone allowed), and a key of another unknown kind still fails.
func TestStageRecord(t *testing.T) {
	for _, tc := range []struct{ key, value []byte }{
		{[]byte("L\x01join-key"), []byte("row")},
		{[]byte("W\x00\x00\x00\x07"), nil},
		{nil, []byte{1}},
	} {
		k := keyedlog.AppendStageKey(nil, tc.key)
		var m keyedlog.Msg
		if err := keyedlog.Decode(nil, k, tc.value, nil, &m); err != nil {
			t.Fatalf("%q: %v", k, err)
		}
		if m.Kind != keyedlog.KindStage || !bytes.Equal(m.Key, tc.key) || !bytes.Equal(m.Value, tc.value) || (m.Value == nil) != (tc.value == nil) {
			t.Fatalf("%q: got %s %q %q, want stage %q %q", k, m.Kind, m.Key, m.Value, tc.key, tc.value)
		}
	}
	var m keyedlog.Msg
	if err := keyedlog.Decode(nil, []byte("Zzz"), nil, nil, &m); err == nil {
		t.Fatalf("an unknown key type decoded as %s", m.Kind)
	}
}

// TestStepMarker: a step marker decodes to KindStep with its rows; a
// value without them fails.
func TestStepMarker(t *testing.T) {
	for _, rows := range []int{0, 1, 4096, 1 << 30} {
		var m keyedlog.Msg
		if err := keyedlog.Decode(nil, keyedlog.AppendStepKey(nil, "i0/3/17"), keyedlog.StepValue(rows), nil, &m); err != nil {
			t.Fatalf("%d rows: %v", rows, err)
		}
		if m.Kind != keyedlog.KindStep || m.Rows != rows {
			t.Fatalf("%d rows: got %s %d", rows, m.Kind, m.Rows)
		}
	}
	for _, v := range [][]byte{nil, {1}, {2, 5}, {1, 0x80}} {
		var m keyedlog.Msg
		if err := keyedlog.Decode(nil, keyedlog.AppendStepKey(nil, "w"), v, nil, &m); err == nil {
			t.Fatalf("value %x decoded as %s %d", v, m.Kind, m.Rows)
		}
	}
}

package nilbytes

import (
	"bytes"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, v := range [][]byte{nil, {}, []byte("a"), bytes.Repeat([]byte("x"), 300)} {
		enc := Append([]byte("pre"), v)
		got, rest, ok := Read(append(enc[3:], "tail"...))
		if !ok || string(rest) != "tail" || (got == nil) != (v == nil) || !bytes.Equal(got, v) {
			t.Fatalf("%q: got %q rest %q ok %v", v, got, rest, ok)
		}
	}
	enc := Append(nil, []byte("abc"))
	for i := 0; i < len(enc); i++ {
		if _, _, ok := Read(enc[:i]); ok {
			t.Fatalf("truncated to %d: ok", i)
		}
	}
}

package debezium

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestSWARSkips checks the eight-bytes-at-a-time skips against byte loops.
func TestSWARSkips(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("abc\"\\{}[]\x00\x1f\x20\x7f\x80\xff;:{[Zz")
	for n := 0; n < 20000; n++ {
		b := make([]byte, r.IntN(40))
		for i := range b {
			if r.IntN(4) == 0 {
				b[i] = alphabet[r.IntN(len(alphabet))]
			} else {
				b[i] = byte(r.IntN(256))
			}
		}
		start := 0
		if len(b) > 0 {
			start = r.IntN(len(b))
		}
		for _, tc := range []struct {
			name string
			fast func([]byte, int) int
			stop *[256]bool
		}{{"string", skipPlainString, &strStop}, {"structural", skipNonStructural, &structural}} {
			got := tc.fast(b, start)
			want := start
			for want < len(b) && !tc.stop[b[want]] {
				want++
			}
			// The fast path may stop early only at the last partial word.
			if got > want || (got < want && got+8 <= len(b)) {
				t.Fatalf("%s(%q, %d) = %d, want %d", tc.name, b, start, got, want)
			}
		}
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:              "plain",
		`a\"b\\c\/d`:         `a"b\c/d`,
		`\b\f\n\r\t`:         "\b\f\n\r\t",
		`\u0041\u00e9\u4e2d`: "Aé中",
		`\uD83D\uDE00`:       "😀",
		`\ud83d`:             "\uFFFD",
		`\ude00x`:            "\uFFFDx",
		`\ud83d\u0041`:       "\uFFFDA",
	} {
		got, err := unescape(nil, []byte(in))
		if err != nil || string(got) != want {
			t.Errorf("unescape(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{`\`, `\x`, `\u12`, `\u12g4`} {
		if _, err := unescape(nil, []byte(bad)); err == nil {
			t.Errorf("unescape(%s): no error", bad)
		}
	}
}

// FuzzMembers: Members never panics, and the raw values it reports are
// subslices that tile the object's members in order.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":"x","c":{"d":[1,{}]},"e":null}`, `{}`, ` { "k" : [ ] } `, `{"a":}`, `{"a":1`, `{"\u0041":true}`, `[1]`, `{"a":1}x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		last := 0
		_ = Members(b, func(name, raw []byte) error {
			if len(raw) == 0 {
				t.Fatalf("empty value for %q in %q", name, b)
			}
			i := bytes.Index(b[last:], raw)
			if i < 0 {
				t.Fatalf("value %q not found after byte %d of %q", raw, last, b)
			}
			last += i + len(raw)
			return nil
		})
	})
}

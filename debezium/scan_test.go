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

// checkSkipWords checks skipWords against skipOpenBytes on b from j at
// depth: when skipWords succeeds, skipOpenBytes must succeed at the same
// byte. It reports whether skipWords succeeded. At depth 0 b[j] must open
// a container (skipOpen's precondition); otherwise it reports true.
func checkSkipWords(t *testing.T, b []byte, j, depth int) bool {
	t.Helper()
	if depth == 0 && (j >= len(b) || b[j] != '{' && b[j] != '[') {
		return true
	}
	end, ok := skipWords(b, j, depth)
	s := scanner{b: b, i: j}
	err := s.skipOpenBytes(depth)
	if ok && (err != nil || s.i != end) {
		t.Fatalf("skipWords(%q, %d, %d) = %d, but skipOpenBytes: %v at %d", b, j, depth, end, err, s.i)
	}
	if !ok && err == nil {
		return false
	}
	return ok
}

// randomJSON appends a random value nested up to depth levels, with
// strings holding escapes, brackets and multi-byte text.
func randomJSON(r *rand.Rand, dst []byte, depth int) []byte {
	switch k := r.IntN(6); {
	case depth > 0 && k < 2:
		dst = append(dst, '{')
		for i := r.IntN(5); i > 0; i-- {
			dst = randomString(r, dst)
			dst = append(dst, ':')
			dst = randomJSON(r, dst, depth-1)
			if i > 1 {
				dst = append(dst, ',')
			}
		}
		return append(dst, '}')
	case depth > 0 && k < 4:
		dst = append(dst, '[')
		for i := r.IntN(5); i > 0; i-- {
			dst = randomJSON(r, dst, depth-1)
			if i > 1 {
				dst = append(dst, ", "[:1+r.IntN(2)]...)
			}
		}
		return append(dst, ']')
	case k == 4:
		return append(dst, []string{"null", "true", "-12.5e3", "0", "12345678901"}[r.IntN(5)]...)
	}
	return randomString(r, dst)
}

func randomString(r *rand.Rand, dst []byte) []byte {
	parts := []string{"a", "bcdefgh", `\"`, `\\`, `\u00e9`, "{", "}", "[", "]", "é", "\x7f", "\xff", " ", `\n`, "0123456789abcdef"}
	dst = append(dst, '"')
	for i := r.IntN(8); i > 0; i-- {
		dst = append(dst, parts[r.IntN(len(parts))]...)
	}
	return append(dst, '"')
}

// TestSkipWords: on valid JSON skipWords succeeds where skipOpenBytes
// does, at every starting offset inside a line; on corrupted JSON it never
// accepts what skipOpenBytes rejects or stops elsewhere.
func TestSkipWords(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for n := 0; n < 20000; n++ {
		pre := bytes.Repeat([]byte{' '}, r.IntN(9))
		v := randomJSON(r, pre, 1+r.IntN(5))
		if v[len(pre)] != '{' && v[len(pre)] != '[' {
			continue
		}
		b := append(v, `,"tail":{"x":[1]}}`[:r.IntN(18)]...)
		if !checkSkipWords(t, b, len(pre), 0) {
			t.Fatalf("skipWords gave up on valid %q", b)
		}
		// The rest of an open container (as image skips), from after its '{'.
		if v[len(pre)] == '{' && !checkSkipWords(t, b, len(pre)+1, 1) {
			t.Fatalf("skipWords gave up on valid %q from byte %d", b, len(pre)+1)
		}
		for m := 0; m < 4; m++ {
			c := bytes.Clone(b)
			for k := 1 + r.IntN(3); k > 0; k-- {
				c[r.IntN(len(c))] = "\"\\{}[]\x00\x1f\n a"[r.IntN(11)]
			}
			if r.IntN(4) == 0 {
				c = c[:r.IntN(len(c))]
			}
			checkSkipWords(t, c, min(len(pre), len(c)), 0)
		}
	}
	// Deep nesting: kinds are checked up to 64 levels, as skipOpenBytes does.
	for _, d := range []int{63, 64, 65, 70} {
		open := bytes.Repeat([]byte{'['}, d)
		ok := append(append(bytes.Clone(open), '{', '}'), bytes.Repeat([]byte{']'}, d)...)
		if !checkSkipWords(t, ok, 0, 0) {
			t.Fatalf("skipWords gave up on %d levels", d)
		}
		bad := append(append(bytes.Clone(open), '{', ']'), bytes.Repeat([]byte{']'}, d)...)
		checkSkipWords(t, bad, 0, 0)
	}
}

// FuzzSkipWords: skipWords never accepts input skipOpenBytes rejects nor
// stops at another byte.
func FuzzSkipWords(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":"x\"}","c":{"d":[1,{}]},"e":null}`, `{}`, `[{"\\":"]"}]`, `{"a":"\u0041\n"}`, "{\"a\":\"\x01\"}", `{"a":[}`} {
		f.Add([]byte(s), 0, 0)
	}
	f.Fuzz(func(t *testing.T, b []byte, j, depth int) {
		if j < 0 || j > len(b) || depth < 0 || depth > 1 { // skipOpen's callers: 0 and 1
			return
		}
		checkSkipWords(t, b, j, depth)
	})
}

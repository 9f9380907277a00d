package row

import (
	"bytes"
	"errors"
	"math"
	"math/rand"
	"sort"
	"testing"
)

func randValue(rng *rand.Rand) Value {
	switch rng.Intn(6) {
	case 0:
		return Null()
	case 1:
		return Int(rng.Int63() - math.MaxInt64/2)
	case 2:
		b := make([]byte, rng.Intn(6))
		for i := range b {
			b[i] = byte(rng.Intn(3)) // plenty of zero bytes
		}
		return String(string(b))
	case 3:
		return Float(rng.NormFloat64())
	case 4:
		return Decimal("12.50")
	default:
		return Timestamp(rng.Int63n(1 << 50))
	}
}

// Keys round-trip, and bytewise order of encoded ints/strings is value order.
func TestKeyEncoding(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		vals := []Value{randValue(rng), randValue(rng)}
		enc := AppendKey(nil, vals)
		got, n, err := DecodeKey(nil, enc, 2)
		if err != nil || n != len(enc) {
			t.Fatalf("decode %v: n=%d err=%v", vals, n, err)
		}
		for j := range vals {
			if !got[j].Equal(vals[j]) {
				t.Fatalf("round trip %v → %v", vals, got)
			}
		}
	}
	ints := []int64{math.MinInt64, -5, -1, 0, 1, 7, 1 << 40, math.MaxInt64}
	strs := []string{"", "\x00", "\x00\x00", "\x00a", "a", "a\x00", "ab", "b"}
	check := func(encs [][]byte) {
		if !sort.SliceIsSorted(encs, func(i, j int) bool { return bytes.Compare(encs[i], encs[j]) < 0 }) {
			t.Fatalf("encodings not in value order")
		}
		// Prefix-free: no encoding is a prefix of another.
		for i := range encs {
			for j := range encs {
				if i != j && bytes.HasPrefix(encs[j], encs[i]) {
					t.Fatalf("%x is a prefix of %x", encs[i], encs[j])
				}
			}
		}
	}
	var encs [][]byte
	for _, x := range ints {
		encs = append(encs, AppendKey(nil, []Value{Int(x)}))
	}
	check(encs)
	encs = nil
	for _, s := range strs {
		encs = append(encs, AppendKey(nil, []Value{String(s)}))
	}
	check(encs)
}

func TestRowEncoding(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for i := 0; i < 2000; i++ {
		vals := make([]Value, rng.Intn(8))
		for j := range vals {
			vals[j] = randValue(rng)
		}
		got, err := DecodeRow(nil, AppendRow(nil, vals))
		if err != nil || len(got) != len(vals) {
			t.Fatalf("row %v: %v %v", vals, got, err)
		}
		for j := range vals {
			if !got[j].Equal(vals[j]) {
				t.Fatalf("row round trip %v → %v", vals, got)
			}
		}
	}
}

// Corrupt bytes are errors wrapping ErrCorrupt, never panics.
func FuzzDecode(f *testing.F) {
	f.Add(AppendKey(nil, []Value{Int(1), String("a\x00b")}))
	f.Add(AppendRow(nil, []Value{Int(1), String("x"), Float(1.5)}))
	f.Add([]byte{0x06, 0, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, _, err := DecodeKey(nil, b, 3); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("key error does not wrap ErrCorrupt: %v", err)
		}
		if _, err := DecodeRow(nil, b); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("row error does not wrap ErrCorrupt: %v", err)
		}
	})
}

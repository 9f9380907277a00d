package joinstate

import (
	"bytes"
	"errors"
	"math"
	"math/rand"
	"sort"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/row"
)

func randValue(rng *rand.Rand) row.Value {
	switch rng.Intn(6) {
	case 0:
		return row.Null()
	case 1:
		return row.Int(rng.Int63() - math.MaxInt64/2)
	case 2:
		b := make([]byte, rng.Intn(6))
		for i := range b {
			b[i] = byte(rng.Intn(3)) // plenty of zero bytes
		}
		return row.String(string(b))
	case 3:
		return row.Float(rng.NormFloat64())
	case 4:
		return row.Decimal("12.50")
	default:
		return row.Timestamp(rng.Int63n(1 << 50))
	}
}

// Keys round-trip, and bytewise order of encoded ints/strings is value order.
func TestKeyEncoding(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		vals := []row.Value{randValue(rng), randValue(rng)}
		enc := row.AppendKey(nil, vals)
		got, n, err := row.DecodeKey(nil, enc, 2)
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
		encs = append(encs, row.AppendKey(nil, []row.Value{row.Int(x)}))
	}
	check(encs)
	encs = nil
	for _, s := range strs {
		encs = append(encs, row.AppendKey(nil, []row.Value{row.String(s)}))
	}
	check(encs)
}

func TestRowEncoding(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for i := 0; i < 2000; i++ {
		vals := make([]row.Value, rng.Intn(8))
		for j := range vals {
			vals[j] = randValue(rng)
		}
		got, err := row.DecodeRow(nil, row.AppendRow(nil, vals))
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
	f.Add(row.AppendKey(nil, []row.Value{row.Int(1), row.String("a\x00b")}))
	f.Add(row.AppendRow(nil, []row.Value{row.Int(1), row.String("x"), row.Float(1.5)}))
	f.Add([]byte{0x06, 0, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, _, err := row.DecodeKey(nil, b, 3); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("key error does not wrap ErrCorrupt: %v", err)
		}
		if _, err := row.DecodeRow(nil, b); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("row error does not wrap ErrCorrupt: %v", err)
		}
		if _, _, err := DecodeIndexEntry(b, nil); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("index error does not wrap ErrCorrupt: %v", err)
		}
	})
}

// State and positions commit together; an aborted Txn leaves nothing.
func TestTxnAtomicWithPositions(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s, err := Open(Options{Dir: "/st", FS: fs, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	jk := row.AppendKey(nil, []row.Value{row.Int(1)})
	ck := row.AppendKey(nil, []row.Value{row.Int(2)})
	tx := s.Begin()
	must(t, tx.PutParent(jk, &ParentRecord{Version: 3, Row: []row.Value{row.Int(1), row.String("Egor")}}))
	must(t, tx.PutChild(jk, ck, &ChildRecord{Version: 4, Row: []row.Value{row.Int(2)}}))
	must(t, tx.SetPosition("users", 0, 10))
	// Reads see the Txn's own writes.
	var p ParentRecord
	if ok, err := tx.Parent(jk, &p); !ok || err != nil || p.Row[1].Str != "Egor" {
		t.Fatalf("read own write: %v %v %+v", ok, err, p)
	}
	must(t, tx.Commit())

	tx = s.Begin()
	must(t, tx.DeleteParent(jk))
	must(t, tx.SetPosition("users", 0, 11))
	tx.Abort()
	if next, ok, err := s.Position("users", 0); !ok || err != nil || next != 10 {
		t.Fatalf("position after abort: %d %v %v", next, ok, err)
	}

	// A crash keeps exactly the committed (synced) state.
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	must(t, s.Close())
	s, err = Open(Options{Dir: "/st", FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tx = s.Begin()
	defer tx.Abort()
	if ok, err := tx.Parent(jk, &p); !ok || err != nil || p.Version != 3 {
		t.Fatalf("parent after crash: %v %v %+v", ok, err, p)
	}
	n := 0
	must(t, tx.Children(jk, func(ckey []byte, c *ChildRecord) error {
		n++
		if !bytes.Equal(ckey, ck) || c.Version != 4 {
			t.Errorf("child %x %+v", ckey, c)
		}
		return nil
	}))
	if n != 1 {
		t.Fatalf("%d children", n)
	}
	if next, ok, _ := s.Position("users", 0); !ok || next != 10 {
		t.Fatalf("position after crash: %d", next)
	}
}

// Children of one join key never include another key's children, even when
// one join key's encoding is a byte prefix candidate of another's.
func TestChildrenPrefixIsolation(t *testing.T) {
	s, err := Open(Options{Dir: "/st", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tx := s.Begin()
	defer tx.Abort()
	keys := []string{"a", "a\x00", "ab", "b"}
	for i, k := range keys {
		jk := row.AppendKey(nil, []row.Value{row.String(k)})
		ck := row.AppendKey(nil, []row.Value{row.Int(int64(i))})
		must(t, tx.PutChild(jk, ck, &ChildRecord{Version: 1}))
	}
	for i, k := range keys {
		jk := row.AppendKey(nil, []row.Value{row.String(k)})
		n := 0
		must(t, tx.Children(jk, func(ck []byte, _ *ChildRecord) error {
			n++
			got, _, _ := row.DecodeKey(nil, ck, 1)
			if got[0].Int != int64(i) {
				t.Errorf("key %q got child %d", k, got[0].Int)
			}
			return nil
		}))
		if n != 1 {
			t.Errorf("key %q: %d children", k, n)
		}
		has, err := tx.HasChildren(jk, row.AppendKey(nil, []row.Value{row.Int(int64(i))}))
		if err != nil || has {
			t.Errorf("HasChildren(%q, except its only child) = %v %v", k, has, err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

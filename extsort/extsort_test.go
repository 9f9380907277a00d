package extsort

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

type kv struct{ k, v string }

func randomRecords(rng *rand.Rand, n int) []kv {
	out := make([]kv, n)
	for i := range out {
		k := make([]byte, rng.IntN(20))
		for j := range k {
			k[j] = byte(rng.IntN(4)) // many shared prefixes and equal keys
		}
		out[i] = kv{string(k), fmt.Sprint(i)}
	}
	return out
}

// TestSortMatchesInMemory sorts random records under budgets from "all in
// memory" to "a run every few records" and compares with slices.Sort.
func TestSortMatchesInMemory(t *testing.T) {
	for _, budget := range []int{64 << 10, 256 << 10, 64 << 20} {
		for _, n := range []int{0, 1, 1000, 30000} {
			t.Run(fmt.Sprintf("budget=%d/n=%d", budget, n), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(n), uint64(budget)))
				recs := randomRecords(rng, n)
				fs := vfs.NewMem()
				s, err := New(Options{FS: fs, Dir: "/tmp/x", MemoryBytes: budget, ReadBufferBytes: 4 << 10})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range recs {
					if err := s.Add([]byte(r.k), []byte(r.v)); err != nil {
						t.Fatal(err)
					}
				}
				if s.Len() != uint64(n) {
					t.Fatalf("Len %d, want %d", s.Len(), n)
				}
				it, err := s.Sort()
				if err != nil {
					t.Fatal(err)
				}
				var got []kv
				for it.Next() {
					got = append(got, kv{string(it.Key()), string(it.Value())})
				}
				if err := it.Err(); err != nil {
					t.Fatal(err)
				}
				if budget == 64<<10 && n == 30000 && s.Runs() < 2 {
					t.Fatalf("expected spills, got %d runs", s.Runs())
				}
				it.Close()
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if left, _ := fs.List("/tmp/x"); len(left) != 0 {
					t.Fatalf("files left after Close: %v", left)
				}
				// Equal keys may come in any order: compare keys in order
				// and the multiset of records.
				want := slices.Clone(recs)
				cmp := func(a, b kv) int {
					if c := bytes.Compare([]byte(a.k), []byte(b.k)); c != 0 {
						return c
					}
					return bytes.Compare([]byte(a.v), []byte(b.v))
				}
				for i := 1; i < len(got); i++ {
					if got[i-1].k > got[i].k {
						t.Fatalf("out of order at %d: %q > %q", i, got[i-1].k, got[i].k)
					}
				}
				slices.SortFunc(want, cmp)
				slices.SortFunc(got, cmp)
				if !slices.Equal(want, got) {
					t.Fatalf("records differ: %d got, %d want", len(got), len(want))
				}
			})
		}
	}
}

func TestReset(t *testing.T) {
	fs := vfs.NewMem()
	s, err := New(Options{FS: fs, Dir: "d", MemoryBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 20000; i++ {
		s.Add([]byte(fmt.Sprintf("old%06d", i)), nil)
	}
	if err := s.Reset(); err != nil {
		t.Fatal(err)
	}
	s.Add([]byte("b"), []byte("2"))
	s.Add([]byte("a"), []byte("1"))
	it, err := s.Sort()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var got []string
	for it.Next() {
		got = append(got, string(it.Key())+"="+string(it.Value()))
	}
	if !slices.Equal(got, []string{"a=1", "b=2"}) {
		t.Fatalf("after Reset: %v", got)
	}
	if _, err := s.Sort(); err == nil {
		t.Fatal("Sort twice accepted")
	}
	if err := s.Add(nil, nil); err == nil {
		t.Fatal("Add after Sort accepted")
	}
}

func TestOptions(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Fatal("no Dir accepted")
	}
	if _, err := New(Options{Dir: "x", FS: vfs.NewMem(), MemoryBytes: 10}); err == nil {
		t.Fatal("tiny budget accepted")
	}
}

func BenchmarkSort(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([][]byte, 1<<18)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "\x02%08d%08d", rng.IntN(1e8), i)
	}
	val := make([]byte, 60)
	b.SetBytes(int64(len(keys)) * (int64(len(keys[0])) + 60))
	dir := b.TempDir()
	for b.Loop() {
		s, _ := New(Options{Dir: dir, MemoryBytes: 4 << 20})
		for _, k := range keys {
			s.Add(k, val)
		}
		it, _ := s.Sort()
		for it.Next() {
		}
		it.Close()
		s.Close()
	}
}

// Spill writes the buffer now and can release its memory; records added
// later are merged with the spilled ones.
func TestSpillRelease(t *testing.T) {
	s, err := New(Options{FS: vfs.NewMem(), Dir: "d", MemoryBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Add([]byte("b"), []byte("2"))
	if s.BufferedBytes() != 2+entryBytes {
		t.Fatalf("buffered %d", s.BufferedBytes())
	}
	if err := s.Spill(true); err != nil {
		t.Fatal(err)
	}
	if s.BufferedBytes() != 0 || s.Runs() != 1 {
		t.Fatalf("after Spill: %d buffered, %d runs", s.BufferedBytes(), s.Runs())
	}
	s.Add([]byte("a"), []byte("1"))
	s.Add([]byte("c"), []byte("3"))
	if err := s.Add(make([]byte, 2<<20), nil); err == nil {
		t.Fatal("a record larger than the memory accepted")
	}
	it, err := s.Sort()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for it.Next() {
		got = append(got, string(it.Key())+"="+string(it.Value()))
	}
	if !slices.Equal(got, []string{"a=1", "b=2", "c=3"}) || it.Err() != nil {
		t.Fatalf("got %v, %v", got, it.Err())
	}
	it.Close()
}

// Closing the Sorter under a live Iterator makes it fail, not read freed
// memory.
func TestCloseWhileIterating(t *testing.T) {
	s, _ := New(Options{FS: vfs.NewMem(), Dir: "d"})
	s.Add([]byte("a"), nil)
	s.Add([]byte("b"), nil)
	it, err := s.Sort()
	if err != nil {
		t.Fatal(err)
	}
	if !it.Next() {
		t.Fatal("no first record")
	}
	s.Close()
	if it.Next() || it.Err() == nil {
		t.Fatal("iteration went on after Close")
	}
}

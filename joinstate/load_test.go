package joinstate

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/row"
)

func intKey(i int64) []byte { return row.AppendKey(nil, []row.Value{row.Int(i)}) }

// loadSome loads n parents with two children each (and their index
// entries), metadata and a position.
func loadSome(t *testing.T, s *Store, n int64) *Load {
	t.Helper()
	l, err := s.BeginLoad("/load")
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= n; i++ {
		must(t, l.AddParent(intKey(i), []byte(fmt.Sprint("p", i))))
		for c := int64(0); c < 2; c++ {
			must(t, l.AddChild(intKey(i), intKey(10*i+c), []byte(fmt.Sprint("c", 10*i+c))))
		}
	}
	for c := int64(10); c < 10*(n+1); c++ {
		if c%10 < 2 {
			must(t, l.AddChildIndex(intKey(c), []byte(fmt.Sprint("i", c))))
		}
	}
	l.SetMeta("clock", []byte("c1"))
	l.SetPosition("users", 3, 42)
	return l
}

// A load is invisible until Commit and complete after it, across a crash;
// the row cache (complete while the state was empty) must not answer
// "absent" for loaded keys.
func TestLoadCommitAtomic(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s, err := Open(Options{Dir: "/st", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	// Warm the cache with an absence of a key the load will write.
	tx := s.Begin()
	if _, ok, _ := tx.Parent(intKey(5)); ok {
		t.Fatal("parent before load")
	}
	tx.Abort()
	l := loadSome(t, s, 1000)
	before := fs.CrashClone(vfs.CrashCloneCfg{})
	must(t, l.Commit())
	after := fs.CrashClone(vfs.CrashCloneCfg{})
	if left, _ := fs.List("/load"); len(left) != 0 {
		t.Fatalf("table files left: %v", left)
	}
	check := func(s *Store, want bool) {
		t.Helper()
		tx := s.Begin()
		defer tx.Abort()
		v, ok, err := tx.Parent(intKey(5))
		if err != nil || ok != want || (ok && string(v) != "p5") {
			t.Fatalf("parent 5: %q %v %v (want present %v)", v, ok, err, want)
		}
		n := 0
		must(t, tx.Children(intKey(5), func(ck, v []byte) error { n++; return nil }))
		if e, ok, _ := tx.ChildIndex(intKey(51)); ok != want || (ok && string(e) != "i51") {
			t.Fatalf("index 51: %q %v", e, ok)
		}
		pos, ok, _ := s.Position("users", 3)
		m, _ := s.Meta("clock")
		if want && (n != 2 || !ok || pos != 42 || string(m) != "c1") {
			t.Fatalf("after load: %d children, position %d %v, meta %q", n, pos, ok, m)
		}
		if !want && (n != 0 || ok || m != nil) {
			t.Fatalf("before load: %d children, position %v, meta %q", n, ok, m)
		}
	}
	check(s, true)
	must(t, s.Close())
	for _, c := range []struct {
		fs   *vfs.MemFS
		want bool
	}{{before, false}, {after, true}} {
		s, err := Open(Options{Dir: "/st", FS: c.fs})
		if err != nil {
			t.Fatal(err)
		}
		check(s, c.want)
		must(t, s.Close())
	}
}

func TestLoadOrderAndAbort(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open(Options{Dir: "/st", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.BeginLoad("/load")
	if err != nil {
		t.Fatal(err)
	}
	must(t, l.AddParent(intKey(2), nil))
	must(t, l.AddChild(intKey(1), intKey(1), nil)) // other keyspaces are independent
	l.Abort()
	if left, _ := fs.List("/load"); len(left) != 0 {
		t.Fatalf("files left after Abort: %v", left)
	}
	if err := l.Commit(); err == nil {
		t.Fatal("Commit after Abort accepted")
	}
	// Keys out of order fail the load (at a later add or at Commit) and
	// leave nothing behind.
	for _, k := range []int64{2, 1} {
		l, err := s.BeginLoad("/load")
		if err != nil {
			t.Fatal(err)
		}
		must(t, l.AddParent(intKey(2), nil))
		l.AddParent(intKey(k), nil)
		if err := l.Commit(); !errors.Is(err, ErrLoadOrder) {
			t.Fatalf("key %d after 2: Commit: %v", k, err)
		}
		if left, _ := fs.List("/load"); len(left) != 0 {
			t.Fatalf("files left after a failed load: %v", left)
		}
	}
	tx := s.Begin()
	defer tx.Abort()
	if _, ok, _ := tx.Parent(intKey(2)); ok {
		t.Fatal("aborted load visible")
	}
}

// A load that fits in the row cache leaves it warm and complete: reads of
// loaded and of absent keys are answered without pebble, and child scans
// still find the loaded children.
func TestLoadWarmsRowCache(t *testing.T) {
	s, err := Open(Options{Dir: "/st", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	must(t, loadSome(t, s, 100).Commit())
	before, _ := s.Stats()
	tx := s.Begin()
	defer tx.Abort()
	if v, ok, _ := tx.Parent(intKey(7)); !ok || string(v) != "p7" {
		t.Fatalf("parent 7: %q %v", v, ok)
	}
	if _, ok, _ := tx.Parent(intKey(1000)); ok {
		t.Fatal("parent 1000 exists")
	}
	if _, ok, _ := tx.ChildIndex(intKey(999)); ok {
		t.Fatal("index 999 exists")
	}
	n := 0
	must(t, tx.Children(intKey(7), func(ck, v []byte) error { n++; return nil }))
	if has, _ := tx.HasChildren(intKey(1000), nil); n != 2 || has {
		t.Fatalf("children of 7: %d; parent 1000 has children: %v", n, has)
	}
	after, _ := s.Stats()
	if after.RowCacheMisses != before.RowCacheMisses || after.RowCacheHits < before.RowCacheHits+3 {
		t.Fatalf("row cache after a small load: %d → %d hits, %d → %d misses", before.RowCacheHits, after.RowCacheHits,
			before.RowCacheMisses, after.RowCacheMisses)
	}
}

// A load that takes more than half of the row cache but no more than
// cacheKeepPct of it leaves the cache complete (reads of absent keys need
// no pebble lookup); one larger than that leaves it cold (the negative
// control: the same load and reads, a cache a third smaller).
func TestLoadWarmsRowCacheAboveHalf(t *testing.T) {
	const parents = 3000
	for _, tc := range []struct {
		name     string
		cache    int
		complete bool
	}{{"fits", 1 << 20, true}, {"too large", 640 << 10, false}} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(Options{Dir: "/st", FS: vfs.NewMem(), RowCacheBytes: tc.cache})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			l := loadSome(t, s, parents)
			must(t, l.Commit())
			share := float64(l.warmBytes) / float64(tc.cache) // the writer's: read once it has stopped
			if tc.complete && (share <= 0.5 || l.warmBytes > l.warmLimit) {
				t.Fatalf("the load takes %.2f of the cache, want (0.5, %.2f]: the test does not test what it says", share, cacheKeepPct/100.0)
			}
			if !tc.complete && l.warmBytes <= l.warmLimit {
				t.Fatalf("the load takes %.2f of the cache, want more than %.2f", share, cacheKeepPct/100.0)
			}
			if got := s.RowCacheHoldsAll(); got != tc.complete {
				t.Fatalf("load taking %.2f of the row cache: RowCacheHoldsAll %v, want %v", share, got, tc.complete)
			}
			before, _ := s.Stats()
			tx := s.Begin()
			defer tx.Abort()
			if v, ok, _ := tx.Parent(intKey(parents)); !ok || string(v) != fmt.Sprint("p", parents) {
				t.Fatalf("parent %d: %q %v", parents, v, ok)
			}
			if _, ok, _ := tx.Parent(intKey(parents + 1)); ok {
				t.Fatalf("parent %d exists", parents+1)
			}
			after, _ := s.Stats()
			if misses := after.RowCacheMisses - before.RowCacheMisses; (misses == 0) != tc.complete {
				t.Fatalf("load taking %.2f of the row cache: %d misses reading a loaded and an absent parent", share, misses)
			}
		})
	}
}

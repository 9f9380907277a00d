package joinstate

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/row"
)

// TestDurableReadsMetamorphic runs the same random writes, reads, commits,
// aborts, truncates and reopens against a store whose reads always walk the
// memtables and stores whose reads of keys not written since the last
// finished flush go to the tables only, flushing every few KiB (without a
// row cache, so that every read reaches pebble; with a tiny one, which
// evicts; with a large one; and with a large one whose hashes collide
// constantly: keyspaces stop being complete in the middle of a Txn, and
// the filter lacks their writes until a flush), and requires identical
// reads.
func TestDurableReadsMetamorphic(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		if msg := durableReadsMetamorphic(t, seed, false); msg != "" {
			t.Fatal(msg)
		}
	}
}

// TestDurableReadsNegativeControl: stores that do not distrust their
// recent-writes filter when the row cache stops holding a keyspace whose
// writes it skipped (noDistrust) read stale values from the tables, and
// the metamorphic check catches it.
func TestDurableReadsNegativeControl(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		msg := durableReadsMetamorphic(t, seed, true)
		if msg == "" {
			t.Fatalf("seed %d: stores that trust a filter lacking writes read like the one that always walks the memtables", seed)
		}
		t.Logf("seed %d caught: %s", seed, msg)
	}
}

// durableReadsMetamorphic runs TestDurableReadsMetamorphic's operations
// for seed and returns the first read that differs ("" when none);
// noDistrust breaks the stores (see recentWrites.noDistrust).
func durableReadsMetamorphic(t *testing.T, seed int64, noDistrust bool) string {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	variants := []struct {
		name    string
		every   int
		noCache bool
		cache   int
		collide bool
	}{{"memtables always", -1, true, 0, false}, {"durable, no row cache", 2 << 10, true, 0, false},
		{"durable, tiny row cache", 4 << 10, false, 2 << 10, false}, {"durable, row cache", 1 << 10, false, 64 << 20, false},
		{"durable, colliding row cache", 1 << 10, false, 64 << 20, true}}
	fss := make([]vfs.FS, len(variants))
	open := func(j int) *Store {
		v := variants[j]
		if fss[j] == nil {
			fss[j] = vfs.NewMem()
		}
		s, err := Open(Options{Dir: "/s", FS: fss[j], MemTableBytes: 1 << 20, DisableRowCache: v.noCache, RowCacheBytes: v.cache, flushEvery: v.every})
		if err != nil {
			t.Fatal(err)
		}
		if v.collide {
			s.cache.mask = 63 // 64 slots: keys collide all the time
		}
		s.recent.noDistrust = noDistrust
		return s
	}
	stores := make([]*Store, len(variants))
	txns := make([]*Txn, len(variants))
	for j := range variants {
		stores[j] = open(j)
		txns[j] = stores[j].Begin()
	}
	key := func() []byte { return row.AppendKey(nil, []row.Value{row.Int(int64(rng.Intn(400)))}) }
	durable := 0
	for i := 0; i < 20000; i++ {
		k, k2 := key(), key()
		op := rng.Intn(102)
		pv := []byte(fmt.Sprint("p", i, "-", string(make([]byte, rng.Intn(200)))))
		got := make([]string, len(variants))
		for j, tx := range txns {
			var err error
			read := func(v []byte, ok bool, e error) {
				err = e
				if ok {
					got[j] = string(v)
				}
			}
			switch {
			case op < 20:
				err = tx.PutParent(k, pv)
			case op < 26:
				err = tx.DeleteParent(k)
			case op < 36:
				err = tx.SetChildIndex(k, []byte(fmt.Sprint("i", i)))
			case op < 40:
				err = tx.DeleteChildIndex(k)
			case op < 48:
				err = tx.PutChild(k, k2, []byte(fmt.Sprint("c", i)))
			case op < 51:
				err = tx.DeleteChild(k, k2)
			case op < 58:
				err = tx.Commit()
				txns[j] = stores[j].Begin()
			case op < 59:
				tx.Abort()
				txns[j] = stores[j].Begin()
			case op < 60 && i%7 == 0: // commit, close, reopen: the WAL replays into a memtable
				if err = tx.Commit(); err == nil {
					err = stores[j].Close()
				}
				stores[j] = open(j)
				txns[j] = stores[j].Begin()
			case op == 100: // a truncate: a new generation, held completely
				err = tx.ClearParents()
			case op == 101:
				err = tx.ClearChildIndex()
			case op < 75:
				read(tx.Parent(k))
			case op < 88:
				read(tx.ChildIndex(k))
			default: // 88 … 99
				read(tx.Child(k, k2))
			}
			if err != nil {
				t.Fatalf("seed %d op %d: %s: %v", seed, i, variants[j].name, err)
			}
			if j == 1 && tx.dur != nil {
				durable++
			}
		}
		for j := 1; j < len(got); j++ {
			if got[j] != got[0] {
				for j, tx := range txns {
					tx.Abort()
					stores[j].Close()
				}
				return fmt.Sprintf("seed %d op %d (%d): %s read %q, %s %q", seed, i, op, variants[j].name, got[j], variants[0].name, got[0])
			}
		}
	}
	if durable == 0 {
		t.Errorf("seed %d: no read skipped the memtables: the test tests nothing", seed)
	}
	for j, tx := range txns {
		tx.Abort()
		stores[j].Close()
	}
	return ""
}

// TestWarmerInstallMetamorphic: a Warmer on another goroutine reads ahead
// random keys, in two rounds that repeat keys, while the Txn goes on writing, committing and flushing (and
// once before a bulk load, an ingest), and
// the Txn installs what it read; reads must stay those of a store without
// read-ahead or durable reads (negative control: installing every entry
// read, current or not, fails it).
func TestWarmerInstallMetamorphic(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		testWarmerInstall(t, seed, false)
	}
}

func testWarmerInstall(t *testing.T, seed int64, installAll bool) (installed int) {
	rng := rand.New(rand.NewSource(seed))
	ref, err := Open(Options{Dir: "/r", FS: vfs.NewMem(), DisableRowCache: true, flushEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	s, err := Open(Options{Dir: "/s", FS: vfs.NewMem(), MemTableBytes: 1 << 20, RowCacheBytes: 8 << 10, flushEvery: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rt, st := ref.Begin(), s.Begin()
	key := func() []byte { return row.AppendKey(nil, []row.Value{row.Int(int64(rng.Intn(300)))}) }
	var p Prefetch
	w := s.NewWarmer()
	var done chan struct{}
	defer func() { // every exit (the negative control returns early) waits for the read-ahead goroutine first
		if done != nil {
			<-done
		}
		w.Close()
	}()
	// A bulk load (an ingest, as a new state's snapshot) of half the
	// parents, after a read ahead whose view predates it: installing that
	// would put absences the load contradicts.
	rt.Abort()
	st.Abort()
	for deadline := time.Now().Add(10 * time.Second); !s.recent.readyAt.Load() && time.Now().Before(deadline); {
		s.Begin().Abort() // sees the flush Open asked for finish
		time.Sleep(time.Millisecond)
	}
	w.Begin(&p)
	for id := 0; id < 3000; id++ {
		w.Parent(row.AppendKey(nil, []row.Value{row.Int(int64(id))}))
	}
	w.Read()
	w.End()
	for _, store := range []*Store{ref, s} {
		l, err := store.BeginLoad("/load")
		if err != nil {
			t.Fatal(err)
		}
		for id := 0; id < 3000; id += 2 { // more than the row cache holds
			if err := l.AddParent(row.AppendKey(nil, []row.Value{row.Int(int64(id))}), []byte("loaded")); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	rt, st = ref.Begin(), s.Begin()
	if installAll {
		installed += st.installAll(&p)
	} else {
		installed += st.Install(&p)
	}
	for i := 0; i < 20000; i++ {
		k, k2 := key(), key()
		op := rng.Intn(100)
		both := func(f func(tx *Txn) error) {
			for _, tx := range []*Txn{rt, st} {
				if err := f(tx); err != nil {
					t.Fatalf("seed %d op %d: %v", seed, i, err)
				}
			}
		}
		switch {
		case op < 25:
			v := []byte(fmt.Sprint("p", i))
			both(func(tx *Txn) error { return tx.PutParent(k, v) })
		case op < 30:
			both(func(tx *Txn) error { return tx.DeleteParent(k) })
		case op < 40:
			v := []byte(fmt.Sprint("i", i))
			both(func(tx *Txn) error { return tx.SetChildIndex(k, v) })
		case op < 45:
			v := []byte(fmt.Sprint("c", i))
			both(func(tx *Txn) error { return tx.PutChild(k, k2, v) })
		case op < 47:
			both(func(tx *Txn) error { return tx.DeleteChild(k, k2) })
		case op < 55:
			if err := rt.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := st.Commit(); err != nil {
				t.Fatal(err)
			}
			rt, st = ref.Begin(), s.Begin()
		case op < 60 && done == nil: // read ahead on another goroutine while the Txn goes on
			keys := [][]byte{k, k2, key(), key(), key()}
			done = make(chan struct{})
			go func() {
				defer close(done)
				w.Begin(&p)
				for _, k := range keys {
					w.Parent(k)
					w.ChildIndex(k)
					w.Child(k, keys[0])
				}
				w.Read()
				// A second round, as engine.Warmer's, asks again for
				// some of the first's keys (shared, not looked up again).
				for _, k := range keys[:3] {
					w.Parent(k)
					w.Child(keys[1], k)
				}
				w.Read()
				w.End()
			}()
		case op < 70 && done != nil:
			<-done
			done = nil
			if installAll {
				installed += st.installAll(&p)
			} else {
				installed += st.Install(&p)
			}
		default:
			for _, rd := range []func(tx *Txn) ([]byte, bool, error){
				func(tx *Txn) ([]byte, bool, error) { return tx.Parent(k) },
				func(tx *Txn) ([]byte, bool, error) { return tx.ChildIndex(k) },
				func(tx *Txn) ([]byte, bool, error) { return tx.Child(k, k2) },
			} {
				a, aok, err := rd(rt)
				if err != nil {
					t.Fatal(err)
				}
				b, bok, err := rd(st)
				if err != nil {
					t.Fatal(err)
				}
				if aok != bok || string(a) != string(b) {
					if installAll {
						return -1
					}
					t.Fatalf("seed %d op %d: read %q %v, the store without read-ahead %q %v", seed, i, b, bok, a, aok)
				}
			}
		}
	}
	if done != nil {
		<-done
	}
	if !installAll && installed == 0 {
		t.Errorf("seed %d: nothing installed: the test tests nothing", seed)
	}
	rt.Abort()
	st.Abort()
	return installed
}

// installAll is Install without its currency checks (the negative control).
func (t *Txn) installAll(p *Prefetch) int {
	for i := 0; i < p.read; i++ {
		e := &p.ents[i]
		t.s.cache.fill(p.key(i), e.present, p.vals[e.v0:e.v1], t.spill)
	}
	return p.read
}

func TestWarmerInstallNegativeControl(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		if testWarmerInstall(t, seed, true) == -1 {
			return
		}
	}
	t.Error("installing stale read-ahead went unnoticed: the metamorphic test cannot catch a broken Install")
}

package joinstate

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/row"
)

// TestRowCacheMetamorphic runs the same random operations (puts, deletes,
// range clears, commits, aborts, reopens; parents, child index, children,
// positions, metadata, Aux entries, child scans, Aux scans and
// whole-keyspace scans; the cache's
// writes of point-read keyspaces are write-back) against a store without the row cache, one
// with a tiny cache (it evicts, so keyspaces stop being complete) and one
// with a cache that never evicts (misses are answered as absences), and two
// whose hashes collide constantly (one evicting), and requires identical
// reads.
func TestRowCacheMetamorphic(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		rng := rand.New(rand.NewSource(seed))
		variants := []string{"no cache", "evicting cache", "complete cache", "colliding cache", "colliding, evicting cache"}
		rcs := []int{0, 4 << 10, 64 << 20, 64 << 20, 1 << 10}
		fss := []vfs.FS{vfs.NewMem(), vfs.NewMem(), vfs.NewMem(), vfs.NewMem(), vfs.NewMem()}
		open := func(j int) *Store {
			s, err := Open(Options{Dir: "/s", FS: fss[j], RowCacheBytes: rcs[j], DisableRowCache: j == 0})
			if err != nil {
				t.Fatal(err)
			}
			if j >= 3 {
				s.cache.mask = 7 // eight slots: keys collide all the time
			}
			return s
		}
		stores := []*Store{open(0), open(1), open(2), open(3), open(4)}
		var txns []*Txn
		for _, s := range stores {
			txns = append(txns, s.Begin())
		}
		key := func() []byte { return row.AppendKey(nil, []row.Value{row.Int(int64(rng.Intn(50)))}) }
		for i := 0; i < 5400; i++ {
			k, k2 := key(), key()
			op := rng.Intn(143)
			var got [5]string
			for j, tx := range txns {
				var err error
				switch {
				case op < 30:
					err = tx.PutParent(k, []byte(fmt.Sprint(i)))
				case op < 45:
					err = tx.DeleteParent(k)
				case op < 55:
					err = tx.SetChildIndex(k, append(append([]byte(nil), k2...), fmt.Sprint(i)...))
				case op < 60:
					err = tx.DeleteChildIndex(k)
				case op < 62:
					err = tx.ClearParents()
				case op < 63:
					err = tx.ClearChildIndex()
				case op < 70:
					err = tx.Commit()
					txns[j] = stores[j].Begin()
				case op < 72:
					tx.Abort()
					txns[j] = stores[j].Begin()
				case op < 73: // commit, close, reopen: the cache starts cold
					if err = tx.Commit(); err == nil {
						err = stores[j].Close()
					}
					stores[j] = open(j)
					txns[j] = stores[j].Begin()
				case op < 87:
					v, ok, err2 := tx.Parent(k)
					err = err2
					if ok {
						got[j] = string(v)
					}
				case op < 100:
					e, ok, err2 := tx.ChildIndex(k)
					err = err2
					if ok {
						got[j] = string(e)
					}
				case op < 107:
					err = tx.PutChild(k, k2, []byte(fmt.Sprint(i)))
				case op < 111:
					err = tx.DeleteChild(k, k2)
				case op < 112:
					err = tx.ClearChildren()
				case op < 116: // scans see every write, through the child marks
					err = tx.Children(k, func(ck, v []byte) error {
						got[j] += fmt.Sprintf("%x@%s ", ck, v)
						return nil
					})
				case op >= 120 && op < 123: // a scan of the parents (write-back entries flushed first)
					err = tx.Groups(func(jk, p []byte, children ChildScan) error {
						got[j] += fmt.Sprintf("%x=%s[", jk, p)
						err := children(func(ck, v []byte) error {
							got[j] += fmt.Sprintf("%x@%s ", ck, v)
							return nil
						})
						got[j] += "] "
						return err
					})
				case op >= 123 && op < 125:
					err = tx.ChildIndexes(func(ck, e []byte) error {
						got[j] += fmt.Sprintf("%x=%s ", ck, e)
						return nil
					})
				case op >= 125 && op < 128:
					err = tx.SetPosition("t", int32(k[len(k)-1]%4), int64(i))
				case op >= 128 && op < 130:
					var n int64
					var ok bool
					n, ok, err = tx.Position("t", int32(k[len(k)-1]%4))
					got[j] = fmt.Sprint(n, ok)
				case op >= 132 && op < 136:
					err = tx.PutAux(k, []byte(fmt.Sprint(i)))
				case op >= 136 && op < 138:
					err = tx.DeleteAux(k)
				case op >= 138 && op < 142:
					v, ok, err2 := tx.Aux(k)
					err = err2
					if ok {
						got[j] = string(v)
					}
				case op == 142:
					err = tx.AuxScan(nil, nil, func(ak, v []byte) error {
						got[j] += fmt.Sprintf("%x=%s ", ak, v)
						return nil
					})
				case op >= 130:
					if op == 130 {
						err = tx.SetMeta(fmt.Sprint("m", k[len(k)-1]%3), []byte(fmt.Sprint(i)))
					} else {
						var v []byte
						v, err = tx.Meta(fmt.Sprint("m", k[len(k)-1]%3))
						got[j] = string(v)
					}
				default:
					has, err2 := tx.HasChildren(k, k2)
					err = err2
					got[j] = fmt.Sprint(has)
				}
				if err != nil {
					t.Fatalf("seed %d op %d: %v", seed, i, err)
				}
			}
			for j := 1; j < len(got); j++ {
				if got[j] != got[0] {
					t.Fatalf("seed %d op %d (%d): store %d (%s) read %q, the store without cache %q",
						seed, i, op, j, variants[j], got[j], got[0])
				}
			}
		}
		for j, tx := range txns {
			tx.Abort()
			stores[j].Close()
		}
	}
}

// A key displaced by a colliding key, or evicted, makes its keyspace
// incomplete; dropping entries of an old generation does not.
func TestRowCacheCompleteness(t *testing.T) {
	var g generations
	key := func(prefix byte, gen uint64, id int64) []byte {
		g[genSlot(prefix)] = gen
		return append(g.header(nil, prefix), row.AppendKey(nil, []row.Value{row.Int(id)})...)
	}
	c := newRowCache(1 << 20)
	c.mask = 0 // one slot: every key collides
	c.setComplete(prefixParent, 0)
	c.setComplete(prefixIndex, 0)
	c.write(key(prefixParent, 0, 1), true, false, []byte("a"), nil, nil)
	c.write(key(prefixIndex, 0, 2), true, false, []byte("b"), nil, nil) // displaces the parent
	if c.completeFor(prefixParent, 0) {
		t.Error("parents still complete after a parent was displaced")
	}
	if !c.completeFor(prefixIndex, 0) {
		t.Error("child index incomplete though nothing of it left")
	}
	if _, _, st := c.get(key(prefixParent, 0, 1)); st != cacheCollision {
		t.Errorf("lookup of the displaced key: status %d, want collision", st)
	}

	c = newRowCache(200)
	c.setComplete(prefixIndex, 1)
	for i := int64(0); i < 20; i++ {
		c.write(key(prefixIndex, 0, i), true, false, []byte("old generation"), nil, nil)
	}
	c.write(key(prefixIndex, 1, 7), true, false, []byte("x"), nil, nil)
	gens := generations{0, 0, 1, 0}
	c.evict(&gens)
	if !c.completeFor(prefixIndex, 1) {
		t.Error("evicting old-generation entries made the current generation incomplete")
	}
	if _, _, st := c.get(key(prefixIndex, 1, 7)); st != cacheHit {
		t.Errorf("current-generation entry lost: status %d", st)
	}
	for i := int64(0); i < 20; i++ {
		c.write(key(prefixIndex, 1, 100+i), true, false, []byte("current generation"), nil, nil)
	}
	c.evict(&gens)
	if c.completeFor(prefixIndex, 1) {
		t.Error("evicting current-generation entries left the keyspace complete")
	}
}

// A cache over budget whose live entries take at most cacheKeepPct of it
// only compacts: it loses no entry and stays complete. Above that share it
// evicts down to cacheEvictPct and is no longer complete (the negative
// control).
func TestRowCacheKeepsWhatFits(t *testing.T) {
	var g generations
	key := func(id int64) []byte {
		return append(g.header(nil, prefixParent), row.AppendKey(nil, []row.Value{row.Int(id)})...)
	}
	const max = 64 << 10
	c := newRowCache(max)
	c.setComplete(prefixParent, 0)
	val := make([]byte, 40)
	n := int64(0)
	for c.live+entrySize(key(n), val)+idxEntryBytes <= max/100*cacheKeepPct {
		c.write(key(n), true, false, val, nil, nil)
		n++
	}
	for round := 0; round < 10; round++ { // overwrite every key: the slabs outgrow the budget
		for i := int64(0); i < n; i++ {
			c.write(key(i), true, false, val, nil, nil)
		}
		c.evict(&g)
		if c.used+len(c.idx)*idxEntryBytes > max {
			t.Fatalf("round %d: %d bytes after evict, budget %d", round, c.used+len(c.idx)*idxEntryBytes, max)
		}
	}
	if !c.completeFor(prefixParent, 0) {
		t.Fatalf("%d keys taking %d of %d bytes: evict made the keyspace incomplete", n, c.live, max)
	}
	for i := int64(0); i < n; i++ {
		if _, _, st := c.get(key(i)); st != cacheHit {
			t.Fatalf("key %d of %d lost: status %d", i, n, st)
		}
	}
	for i := n; c.live <= max/100*cacheKeepPct; i++ { // grow past the share
		c.write(key(i), true, false, val, nil, nil)
	}
	for c.used+len(c.idx)*idxEntryBytes <= max {
		c.write(key(0), true, false, val, nil, nil)
	}
	c.evict(&g)
	if c.completeFor(prefixParent, 0) {
		t.Error("a cache whose live entries outgrew the kept share evicted nothing")
	}
	if c.live > max/100*cacheEvictPct {
		t.Errorf("after evicting: %d live bytes, want at most %d", c.live, max/100*cacheEvictPct)
	}
}

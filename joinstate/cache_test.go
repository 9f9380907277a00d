package joinstate

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestRowCacheMetamorphic runs the same random operations (puts, deletes,
// range clears, commits, aborts, reopens; parents, child index, children and
// child scans) against a store without the row cache, one
// with a tiny cache (it evicts, so keyspaces stop being complete) and one
// with a cache that never evicts (misses are answered as absences), and
// requires identical reads.
func TestRowCacheMetamorphic(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		rng := rand.New(rand.NewSource(seed))
		rcs := []int{-1, 4 << 10, 64 << 20}
		fss := []vfs.FS{vfs.NewMem(), vfs.NewMem(), vfs.NewMem()}
		open := func(j int) *Store {
			s, err := Open(Options{Dir: "/s", FS: fss[j], RowCacheBytes: rcs[j]})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		stores := []*Store{open(0), open(1), open(2)}
		var txns []*Txn
		for _, s := range stores {
			txns = append(txns, s.Begin())
		}
		key := func() []byte { return AppendKey(nil, []debezium.Value{debezium.Int(int64(rng.Intn(50)))}) }
		for i := 0; i < 5000; i++ {
			k, k2 := key(), key()
			op := rng.Intn(120)
			var got [3]string
			for j, tx := range txns {
				var err error
				switch {
				case op < 30:
					err = tx.PutParent(k, &ParentRecord{Version: uint64(i), Row: []debezium.Value{debezium.Int(int64(i))}})
				case op < 45:
					err = tx.DeleteParent(k)
				case op < 55:
					err = tx.SetChildIndex(k, AppendIndexEntry(nil, k2, []debezium.Value{debezium.Int(int64(i))}))
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
					var p ParentRecord
					ok, err2 := tx.Parent(k, &p)
					err = err2
					if ok {
						got[j] = debezium.Int(int64(p.Version)).Text()
					}
				case op < 100:
					jk, _, ok, err2 := tx.ChildIndex(nil, k, nil)
					err = err2
					if ok {
						got[j] = string(jk)
					}
				case op < 107:
					err = tx.PutChild(k, k2, &ChildRecord{Version: uint64(i)})
				case op < 111:
					err = tx.DeleteChild(k, k2)
				case op < 112:
					err = tx.ClearChildren()
				case op < 116: // scans see every write, through the child marks
					err = tx.Children(k, func(ck []byte, c *ChildRecord) error {
						got[j] += fmt.Sprintf("%x@%d ", ck, c.Version)
						return nil
					})
				default:
					has, err2 := tx.HasChildren(k, k2)
					err = err2
					got[j] = fmt.Sprint(has)
				}
				if err != nil {
					t.Fatalf("seed %d op %d: %v", seed, i, err)
				}
			}
			if got[0] != got[1] || got[0] != got[2] {
				t.Fatalf("seed %d op %d (%d): without cache %q, evicting cache %q, complete cache %q", seed, i, op, got[0], got[1], got[2])
			}
		}
		for j, tx := range txns {
			tx.Abort()
			stores[j].Close()
		}
	}
}

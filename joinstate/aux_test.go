package joinstate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/row"
)

// TestChildrenAfterAndAux: a resumed children scan starts after its cursor,
// and the Aux keyspace scans from a start key, sees the Txn's writes,
// survives truncates (ClearParents/ClearChildren) and commits with the rest.
func TestChildrenAfterAndAux(t *testing.T) {
	for _, cache := range []bool{true, false} {
		t.Run(fmt.Sprintf("row_cache=%v", cache), func(t *testing.T) {
			s, err := Open(Options{Dir: "/st", FS: vfs.NewMem(), DisableRowCache: !cache})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			k := func(v int64) []byte { return row.AppendKey(nil, []row.Value{row.Int(v)}) }
			tx := s.Begin()
			for c := int64(1); c <= 5; c++ {
				if err := tx.PutChild(k(7), k(c), []byte{byte(c)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.PutChild(k(8), k(1), []byte{9}); err != nil {
				t.Fatal(err)
			}
			scan := func(after []byte) string {
				var got []string
				if err := tx.ChildrenAfter(k(7), after, func(_, v []byte) error {
					got = append(got, fmt.Sprint(v[0]))
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				return strings.Join(got, ",")
			}
			if got := scan(nil); got != "1,2,3,4,5" {
				t.Errorf("from the start: %s", got)
			}
			if got := scan(k(2)); got != "3,4,5" {
				t.Errorf("after 2: %s", got)
			}
			if got := scan(k(5)); got != "" {
				t.Errorf("after the last: %q", got)
			}
			for _, e := range []string{"a1", "a2", "b1", "a3"} {
				if err := tx.PutAux([]byte(e), []byte("v"+e)); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			tx = s.Begin()
			defer tx.Abort()
			if err := tx.ClearChildren(); err != nil {
				t.Fatal(err)
			}
			if err := tx.ClearParents(); err != nil {
				t.Fatal(err)
			}
			if err := tx.DeleteAux([]byte("a2")); err != nil {
				t.Fatal(err)
			}
			var got []string
			if err := tx.AuxScan([]byte("a"), []byte("a15"), func(key, v []byte) error {
				got = append(got, string(key)+"="+string(v))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, " ") != "a3=va3" {
				t.Errorf("aux scan: %v", got)
			}
			if v, ok, err := tx.Aux([]byte("b1")); err != nil || !ok || string(v) != "vb1" {
				t.Errorf("aux b1 after truncates: %q %v %v", v, ok, err)
			}
			if got := scan(nil); got != "" {
				t.Errorf("children after the truncate: %q", got)
			}
		})
	}
}

// TestRowCacheAuxComplete: on a store opened with no Aux entries the row
// cache holds the Aux keyspace completely, so an absent Aux key is answered
// without pebble (no miss counted); once the cache evicts an Aux entry it
// is not complete any more and every entry still reads back from pebble; a
// store reopened with Aux entries starts incomplete. keepAux (the negative
// control: a cache that stays complete when it loses an Aux entry) reads
// an evicted entry as absent, which the same check catches.
func TestRowCacheAuxComplete(t *testing.T) {
	for _, keepAux := range []bool{false, true} {
		t.Run(fmt.Sprintf("keepAux=%v", keepAux), func(t *testing.T) {
			fs := vfs.NewMem()
			s, err := Open(Options{Dir: "/st", FS: fs, RowCacheBytes: 16 << 10})
			if err != nil {
				t.Fatal(err)
			}
			s.cache.keepAux = keepAux
			aux := func(i int) []byte { return []byte(fmt.Sprintf("count/%04d", i)) }
			misses := func() uint64 { st, _ := s.Stats(); return st.RowCacheMisses }
			tx := s.Begin()
			m0 := misses()
			for i := 0; i < 50; i++ {
				if _, ok, err := tx.Aux(aux(i)); err != nil || ok {
					t.Fatalf("fresh store: aux %d: ok %v, err %v", i, ok, err)
				}
			}
			if m := misses() - m0; m != 0 {
				t.Fatalf("fresh store: %d of 50 absent Aux reads went to pebble, want 0", m)
			}
			const n = 40
			for i := 0; i < n; i++ {
				if err := tx.PutAux(aux(i), []byte(fmt.Sprint("v", i))); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			// Parents enough to make the cache evict (16 KiB).
			for round := 0; round < 4; round++ {
				tx = s.Begin()
				for p := 0; p < 200; p++ {
					k := row.AppendKey(nil, []row.Value{row.Int(int64(round*1000 + p))})
					if err := tx.PutParent(k, make([]byte, 32)); err != nil {
						t.Fatal(err)
					}
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			if s.cache.dropped == 0 {
				t.Fatal("the cache evicted nothing: the test does not test eviction")
			}
			tx = s.Begin()
			m1 := misses()
			wrong := 0
			for i := 0; i < n; i++ {
				v, ok, err := tx.Aux(aux(i))
				if err != nil {
					t.Fatal(err)
				}
				if want := fmt.Sprint("v", i); !ok || string(v) != want {
					wrong++
					t.Logf("aux %d read %q (present %v), want %q", i, v, ok, want)
				}
			}
			tx.Abort()
			if keepAux {
				if wrong == 0 {
					t.Fatal("negative control: a cache that stays Aux-complete after evicting read every Aux entry right")
				}
				s.Close()
				return
			}
			if wrong > 0 {
				t.Fatalf("%d of %d Aux entries read wrong after eviction", wrong, n)
			}
			if s.cache.auxComplete || misses() == m1 {
				t.Fatalf("after evicting: Aux complete %v, %d reads went to pebble", s.cache.auxComplete, misses()-m1)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s, err = Open(Options{Dir: "/st", FS: fs, RowCacheBytes: 16 << 10}); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.cache.auxComplete {
				t.Fatal("reopened with Aux entries: the cache claims to hold them all")
			}
			tx = s.Begin()
			defer tx.Abort()
			m2 := misses()
			if _, ok, err := tx.Aux(aux(n + 1)); err != nil || ok {
				t.Fatalf("reopened: absent aux: ok %v, err %v", ok, err)
			}
			if misses() == m2 {
				t.Fatal("reopened: an absent Aux read was answered without pebble")
			}
		})
	}
}

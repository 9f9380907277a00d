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

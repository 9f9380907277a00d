package joinstate

import (
	"bytes"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/row"
)

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
	must(t, tx.PutParent(jk, []byte("Egor v3")))
	must(t, tx.PutChild(jk, ck, []byte("child v4")))
	must(t, tx.SetPosition("users", 0, 10))
	// Reads see the Txn's own writes.
	if p, ok, err := tx.Parent(jk); !ok || err != nil || string(p) != "Egor v3" {
		t.Fatalf("read own write: %v %v %q", ok, err, p)
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
	if p, ok, err := tx.Parent(jk); !ok || err != nil || string(p) != "Egor v3" {
		t.Fatalf("parent after crash: %v %v %q", ok, err, p)
	}
	n := 0
	must(t, tx.Children(jk, func(ckey, c []byte) error {
		n++
		if !bytes.Equal(ckey, ck) || string(c) != "child v4" {
			t.Errorf("child %x %q", ckey, c)
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
		must(t, tx.PutChild(jk, ck, []byte{1}))
	}
	for i, k := range keys {
		jk := row.AppendKey(nil, []row.Value{row.String(k)})
		n := 0
		must(t, tx.Children(jk, func(ck, _ []byte) error {
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

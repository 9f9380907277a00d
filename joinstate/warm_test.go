package joinstate

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/row"
)

// TestWarmerReadsEachKeyOnce: a batch of three rounds of reads ahead, with
// keys repeated within a round and across rounds (a record's parent named
// by its new row and again by its child index entry), looks up each
// distinct key once, and every entry's value is the store's. Negative
// control: TestWarmerReadsEachKeyOnceNegativeControl.
func TestWarmerReadsEachKeyOnce(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		if msg := warmerReadsOnce(t, seed, false); msg != "" {
			t.Fatal(msg)
		}
	}
}

// TestWarmerReadsEachKeyOnceNegativeControl: a Warmer that looks up again
// what an earlier round read (noShare, the Warmer before it shared them)
// fails the count.
func TestWarmerReadsEachKeyOnceNegativeControl(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		msg := warmerReadsOnce(t, seed, true)
		if msg == "" {
			t.Fatalf("seed %d: a Warmer reading keys twice passed the check", seed)
		}
		t.Logf("caught: %s", msg)
	}
}

func warmerReadsOnce(t *testing.T, seed int64, noShare bool) string {
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	s, err := Open(Options{Dir: "/s", FS: vfs.NewMem(), MemTableBytes: 1 << 20, DisableRowCache: true, flushEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := func(i int) []byte { return row.AppendKey(nil, []row.Value{row.Int(int64(i))}) }
	tx := s.Begin()
	for i := 0; i < 200; i += 2 { // half the keys exist, in each keyspace
		if err := tx.PutParent(key(i), []byte(fmt.Sprint("p", i))); err != nil {
			t.Fatal(err)
		}
		if err := tx.PutChild(key(i), key(i+1), []byte(fmt.Sprint("c", i))); err != nil {
			t.Fatal(err)
		}
		if err := tx.SetChildIndex(key(i+1), []byte(fmt.Sprint("i", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Flush(); err != nil { // the tables hold every entry
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !s.recent.readyAt.Load() && time.Now().Before(deadline); {
		s.Begin().Abort() // sees the flushes finish
		time.Sleep(time.Millisecond)
	}
	if !s.recent.readyAt.Load() {
		t.Fatal("the store's tables never became readable ahead")
	}
	w := s.NewWarmer()
	defer w.Close()
	w.noShare = noShare
	var p Prefetch
	w.Begin(&p)
	type req struct {
		kind int
		a, b int
	}
	var reqs []req
	distinct := map[string]bool{}
	for round := 0; round < 3; round++ {
		for n := 0; n < 60; n++ {
			r := req{kind: rng.Intn(3), a: rng.Intn(40), b: rng.Intn(40)}
			switch r.kind {
			case 0:
				w.Parent(key(r.a))
				distinct[fmt.Sprint("P", r.a)] = true
			case 1:
				w.Child(key(r.a), key(r.b))
				distinct[fmt.Sprint("C", r.a, ",", r.b)] = true
			default:
				w.ChildIndex(key(r.a))
				distinct[fmt.Sprint("I", r.a)] = true
			}
			reqs = append(reqs, r)
		}
		w.Read()
	}
	defer w.End()
	if len(reqs) != p.Len() {
		t.Fatalf("seed %d: %d entries for %d requests", seed, p.Len(), len(reqs))
	}
	ref := s.Begin()
	defer ref.Abort()
	found := 0
	for i, r := range reqs {
		var want []byte
		var ok bool
		switch r.kind {
		case 0:
			want, ok, err = ref.Parent(key(r.a))
		case 1:
			want, ok, err = ref.Child(key(r.a), key(r.b))
		default:
			want, ok, err = ref.ChildIndex(key(r.a))
		}
		if err != nil {
			t.Fatal(err)
		}
		got, gok := p.Value(i)
		if gok != ok || string(got) != string(want) {
			t.Fatalf("seed %d: entry %d (%+v) read %q %v, the store holds %q %v", seed, i, r, got, gok, want, ok)
		}
		if ok {
			found++
		}
	}
	if found == 0 || found == len(reqs) {
		t.Fatalf("seed %d: %d of %d entries present: the test needs both", seed, found, len(reqs))
	}
	if w.seeks != len(distinct) {
		return fmt.Sprintf("seed %d: %d lookups for %d distinct keys (%d entries)", seed, w.seeks, len(distinct), len(reqs))
	}
	return ""
}

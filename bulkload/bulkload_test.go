package bulkload

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
)

func testSpec(t testing.TB, left bool) *keyed.Spec {
	t.Helper()
	s, err := keyed.NewSpec(keyed.Shape{
		Left: left, ParentKey: []string{"id"}, ChildKey: []string{"id"}, ChildParentKey: []string{"user_id"},
		Select: []keyed.Column{
			{Side: row.Parent, Source: "id", Name: "user_id"}, {Side: row.Parent, Source: "name", Name: "name"},
			{Side: row.Child, Source: "id", Name: "domain_id"}, {Side: row.Child, Source: "name", Name: "domain"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rowOf builds a row in the spec's column order for side.
func rowOf(s *keyed.Spec, side row.Side, vals map[string]row.Value) []row.Value {
	cols := s.ParentColumns
	if side == row.Child {
		cols = s.ChildColumns
	}
	out := make([]row.Value, len(cols))
	for i, c := range cols {
		out[i] = vals[c]
	}
	return out
}

// rmt models a ReplacingMergeTree: per row key the latest version, which
// must strictly increase.
type rmt struct {
	rows map[string]rmtRow
}

type rmtRow struct {
	ver     uint64
	vals    string
	deleted bool
}

func newRMT() *rmt { return &rmt{rows: map[string]rmtRow{}} }

func (m *rmt) emit(c *row.Change) error {
	k := fmt.Sprint(c.ParentKey, c.ChildKey == nil, c.ChildKey)
	if old, ok := m.rows[k]; ok && c.Version <= old.ver {
		return fmt.Errorf("row %s: version %d after %d", k, c.Version, old.ver)
	}
	m.rows[k] = rmtRow{ver: c.Version, vals: fmt.Sprint(c.Values), deleted: c.Op == row.Retract}
	return nil
}

// live renders the visible rows with their versions.
func (m *rmt) live() []string {
	var out []string
	for k, r := range m.rows {
		if !r.deleted {
			out = append(out, fmt.Sprintf("%s v%d %s", k, r.ver, r.vals))
		}
	}
	slices.Sort(out)
	return out
}

// memWriter writes a load into a MemState, checking each keyspace's order.
type memWriter struct {
	t    testing.TB
	m    *keyed.MemState
	last [3][]byte
}

func (w *memWriter) order(i int, k []byte) {
	if w.last[i] != nil && bytes.Compare(k, w.last[i]) <= 0 {
		w.t.Fatalf("keyspace %d: %x after %x", i, k, w.last[i])
	}
	w.last[i] = slices.Clone(k)
}

func (w *memWriter) AddParent(jk, v []byte) error { w.order(0, jk); return w.m.PutParent(jk, v) }
func (w *memWriter) AddChild(jk, ck, v []byte) error {
	w.order(1, append(slices.Clone(jk), ck...))
	return w.m.PutChild(jk, ck, v)
}
func (w *memWriter) AddChildIndex(ck, e []byte) error {
	w.order(2, ck)
	return w.m.SetChildIndex(ck, e)
}

func key(i int64) []byte { return row.AppendKey(nil, []row.Value{row.Int(i)}) }

// dump renders a state's records over the key universe 1..n (parents
// childless in a LEFT join keep their pad version; others' is not
// compared: the Join never reads it while children exist).
func dump(t testing.TB, m *keyed.MemState, n int64, index bool) string {
	var b strings.Builder
	for i := int64(0); i <= n; i++ {
		children := 0
		for j := int64(0); j <= n; j++ {
			if v, ok, _ := m.Child(key(i), key(j)); ok {
				var c keyed.ChildRecord
				if err := keyed.DecodeChild(v, &c); err != nil {
					t.Fatal(err)
				}
				children++
				fmt.Fprintf(&b, "C %d/%d v%d %v\n", i, j, c.Version, c.Row)
			}
		}
		if v, ok, _ := m.Parent(key(i)); ok {
			var p keyed.ParentRecord
			if err := keyed.DecodeParent(v, &p); err != nil {
				t.Fatal(err)
			}
			if children > 0 {
				p.PadVersion = 0
			}
			fmt.Fprintf(&b, "P %d v%d pad%d part%d %v\n", i, p.Version, p.PadVersion, p.Partition, p.Row)
		}
		if e, ok, _ := m.ChildIndex(key(i)); ok && index {
			part, jk, vals, err := keyed.DecodeIndexEntry(e, nil)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "I %d → %x part%d %v\n", i, jk, part, vals)
		}
	}
	return b.String()
}

func randText(rng *rand.Rand) row.Value {
	switch rng.IntN(8) {
	case 0:
		return row.Value{Kind: row.KindUnavailable}
	case 1:
		return row.Value{}
	}
	return row.String([]string{"a", "b", "c"}[rng.IntN(3)])
}

// seeds is the number of random cases per test (fewer with -short, which
// runs under -race).
func seeds() uint64 {
	if testing.Short() {
		return 12
	}
	return 40
}

// TestSnapshotMatchesRecordByRecord feeds random snapshot reads (repeated
// rows, changed rows and moved children as in a snapshot rerun, TOAST
// placeholders, NULL foreign keys, orphans) to the Keyer and Join one by one
// and to a Loader: the states and the visible output, versions included,
// must be equal.
func TestSnapshotMatchesRecordByRecord(t *testing.T) {
	for seed := uint64(1); seed <= seeds(); seed++ {
		for _, left := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed=%d/left=%v", seed, left), func(t *testing.T) {
				t.Parallel()
				rng := rand.New(rand.NewPCG(seed, 9))
				spec := testSpec(t, left)
				n := int64(5 + rng.IntN(40))
				records := 20 + rng.IntN(400)
				big := seed%20 == 10
				if big {
					records = 40000 // spill runs (1 MiB budget)
				}
				ms, want := keyed.NewMemState(), newRMT()
				keyer, join := keyed.NewKeyer(spec), keyed.NewJoin(spec)
				keyer.PartitionInputs = true
				l, err := New(spec, Options{Mode: Snapshot, FS: vfs.NewMem(), Dir: "/bulk", MemoryBytes: 1 << 20})
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				var k []byte
				for i := 0; i < records; i++ {
					version := uint64(100 + i)
					side := row.Parent
					id := 1 + rng.Int64N(n)
					vals := map[string]row.Value{"id": row.Int(id), "name": randText(rng)}
					if rng.IntN(3) > 0 {
						side = row.Child
						fk := row.Int(rng.Int64N(n + 1)) // 0 is never a parent: an orphan
						switch rng.IntN(10) {
						case 0:
							fk = row.Value{}
						case 1:
							fk = row.Value{Kind: row.KindUnavailable}
						}
						vals["user_id"] = fk
					}
					ev := debezium.Event{Op: debezium.OpRead, After: debezium.Row{Present: true, Values: rowOf(spec, side, vals)}}
					part := int32(rng.IntN(3))
					err := keyer.Key(ms, side, part, &ev, func(in *keyed.Input) error { return join.Apply(ms, in, version, want.emit) })
					if err != nil {
						t.Fatal(err)
					}
					if k, err = spec.SnapshotKey(k[:0], side, &ev); err != nil {
						t.Fatal(err)
					}
					if side == row.Parent {
						err = l.Parent(k, version, part, ev.After.Values)
					} else {
						err = l.Child(k, version, part, ev.After.Values)
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				got, gotOut := keyed.NewMemState(), newRMT()
				res, err := l.Finish(&memWriter{t: t, m: got}, gotOut.emit)
				if err != nil {
					t.Fatal(err)
				}
				if big && res.SpilledBytes == 0 {
					t.Fatal("expected spilled runs")
				}
				if w, g := dump(t, ms, n, true), dump(t, got, n, true); w != g {
					t.Fatalf("state differs:\nrecord by record:\n%s\nbulk:\n%s", w, g)
				}
				if w, g := want.live(), gotOut.live(); !slices.Equal(w, g) {
					t.Fatalf("visible output differs:\nrecord by record:\n%s\nbulk:\n%s", strings.Join(w, "\n"), strings.Join(g, "\n"))
				}
			})
		}
	}
}

// TestRebuildMatchesRecordByRecord applies random keyed inputs (upserts,
// deletes, moves, truncates of either side, placeholders) to the Join one by
// one and to a Loader in Rebuild mode.
func TestRebuildMatchesRecordByRecord(t *testing.T) {
	for seed := uint64(1); seed <= seeds(); seed++ {
		for _, left := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed=%d/left=%v", seed, left), func(t *testing.T) {
				t.Parallel()
				rng := rand.New(rand.NewPCG(seed, 7))
				spec := testSpec(t, left)
				n := int64(4 + rng.IntN(30))
				records := 20 + rng.IntN(500)
				if seed%20 == 10 {
					records = 20000
				}
				ms, want := keyed.NewMemState(), newRMT()
				join := keyed.NewJoin(spec)
				l, err := New(spec, Options{Mode: Rebuild, FS: vfs.NewMem(), Dir: "/bulk", MemoryBytes: 1 << 20})
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				loads := seed%2 == 0 // loaded rows are not emitted one by one: compare outputs without them
				for i := 0; i < records; i++ {
					version := uint64(1000 + 3*i)
					jk := key(1 + rng.Int64N(n))
					var in keyed.Input
					switch r := rng.IntN(100); {
					case r < 30:
						in = keyed.Input{Kind: keyed.ParentUpsert, Side: row.Parent, JoinKey: jk,
							Row: rowOf(spec, row.Parent, map[string]row.Value{"id": row.Int(0), "name": randText(rng)})}
					case r < 40:
						in = keyed.Input{Kind: keyed.ParentDelete, Side: row.Parent, JoinKey: jk}
					case r < 80:
						ck := rng.Int64N(n)
						in = keyed.Input{Kind: keyed.ChildUpsert, Side: row.Child, JoinKey: jk, ChildKey: key(ck),
							Row: rowOf(spec, row.Child, map[string]row.Value{"id": row.Int(ck), "user_id": row.Int(0), "name": randText(rng)})}
					case r < 90:
						in = keyed.Input{Kind: keyed.ChildDelete, Side: row.Child, JoinKey: jk, ChildKey: key(rng.Int64N(n))}
					case r < 94 && loads:
						// A row handed over from a replay: stored as is, with
						// the (older) versions it was emitted with.
						in = keyed.Input{Kind: keyed.ParentLoad, Side: row.Parent, JoinKey: jk, Version: 1 + rng.Uint64N(900),
							PadVersion: rng.Uint64N(900), Row: rowOf(spec, row.Parent, map[string]row.Value{"id": row.Int(0), "name": randText(rng)})}
					case r < 98 && loads:
						ck := rng.Int64N(n)
						in = keyed.Input{Kind: keyed.ChildLoad, Side: row.Child, JoinKey: jk, ChildKey: key(ck), Version: 1 + rng.Uint64N(900),
							Row: rowOf(spec, row.Child, map[string]row.Value{"id": row.Int(ck), "user_id": row.Int(0), "name": randText(rng)})}
					default:
						side := row.Parent
						if rng.IntN(2) == 0 {
							side = row.Child
						}
						in = keyed.Input{Kind: keyed.Truncate, Side: side}
					}
					if err := join.Apply(ms, &in, version, want.emit); err != nil {
						t.Fatal(err)
					}
					if err := l.Apply(&in, version); err != nil {
						t.Fatal(err)
					}
				}
				got, gotOut := keyed.NewMemState(), newRMT()
				if _, err := l.Finish(&memWriter{t: t, m: got}, gotOut.emit); err != nil {
					t.Fatal(err)
				}
				if w, g := dump(t, ms, n, false), dump(t, got, n, false); w != g {
					t.Fatalf("state differs:\nrecord by record:\n%s\nbulk:\n%s", w, g)
				}
				if w, g := want.live(), gotOut.live(); !loads && !slices.Equal(w, g) {
					t.Fatalf("visible output differs:\nrecord by record:\n%s\nbulk:\n%s", strings.Join(w, "\n"), strings.Join(g, "\n"))
				}
			})
		}
	}
}

// TestNegativeControl: the comparison above can fail. A loader that lost
// one record must differ.
func TestNegativeControl(t *testing.T) {
	spec := testSpec(t, true)
	ms, want := keyed.NewMemState(), newRMT()
	join := keyed.NewJoin(spec)
	l, err := New(spec, Options{Mode: Rebuild, FS: vfs.NewMem(), Dir: "/bulk"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ins := []keyed.Input{
		{Kind: keyed.ParentUpsert, Side: row.Parent, JoinKey: key(1), Row: rowOf(spec, row.Parent, map[string]row.Value{"name": row.String("x")})},
		{Kind: keyed.ChildUpsert, Side: row.Child, JoinKey: key(1), ChildKey: key(2), Row: rowOf(spec, row.Child, map[string]row.Value{"name": row.String("y")})},
		{Kind: keyed.ChildDelete, Side: row.Child, JoinKey: key(1), ChildKey: key(2)},
	}
	for i := range ins {
		if err := join.Apply(ms, &ins[i], uint64(10+i), want.emit); err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			continue // dropped
		}
		if err := l.Apply(&ins[i], uint64(10+i)); err != nil {
			t.Fatal(err)
		}
	}
	got, gotOut := keyed.NewMemState(), newRMT()
	if _, err := l.Finish(&memWriter{t: t, m: got}, gotOut.emit); err != nil {
		t.Fatal(err)
	}
	if dump(t, ms, 3, false) == dump(t, got, 3, false) || slices.Equal(want.live(), gotOut.live()) {
		t.Fatal("a dropped delete went unnoticed")
	}
}

func TestOptionsAndMisuse(t *testing.T) {
	spec := testSpec(t, false)
	if _, err := New(spec, Options{Mode: Snapshot}); err == nil {
		t.Fatal("no Dir accepted")
	}
	if _, err := New(spec, Options{Mode: 9, Dir: "/x", FS: vfs.NewMem()}); err == nil {
		t.Fatal("bad mode accepted")
	}
	l, err := New(spec, Options{Mode: Snapshot, Dir: "/x", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Apply(&keyed.Input{Kind: keyed.ParentDelete}, 1); err == nil {
		t.Fatal("Apply in Snapshot mode accepted")
	}
	vals := rowOf(spec, row.Parent, map[string]row.Value{"id": row.Int(1)})
	if err := l.Parent(key(1), 5, 0, vals); err != nil {
		t.Fatal(err)
	}
	if err := l.Parent(key(1), 4, 0, vals); err == nil {
		t.Fatal("a decreasing version accepted")
	}
}

package stage

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
)

// TestHandoverRecords: the state a Pipeline (replay) leaves over seeded
// interleavings of the exhaustive scripts, for chains of every join kind
// (FULL and RIGHT ones materialize), given to `run`'s stages as
// HandoverRecords and installed by each stage's Operator on an empty
// state per partition, is exactly the replay's state: every stage row with
// its version, every pad epoch, every materializer entry, on the partition
// the stage's inputs for it go to — and nothing is emitted. The tables'
// index entries (IndexEntries) carry the source partition each was last
// written from (SetPartition). Negative control: a load record without its
// version (the version the run's clock gives it instead) differs.
func TestHandoverRecords(t *testing.T) {
	seed := int64(20)
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d", seed)
	kinds := []string{"JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"}
	const parts = 3
	cases := 0
	var pads, mats int // load records with a pad epoch, of the materializer
	for _, k1 := range kinds {
		for _, k2 := range kinds {
			sql := "SELECT u.id AS uid, u.name AS uname, d.id AS did, d.name AS dname, r.id AS rid, r.rtype FROM users u " +
				k1 + " domains d ON d.user_id = u.id AND u.name <> 'x' " + k2 + " records r ON r.domain_id = d.id AND r.rtype <> 'TXT'"
			q, p := compileQuery(t, sql)
			for range 6 {
				h := newHarness(t, q, p)
				h.pl.RecordPartitions()
				runs := []tableRun{
					{name: "users", ops: userScripts[pickScript(rng, userScripts)]},
					{name: "domains", ops: domainScripts[pickScript(rng, domainScripts)]},
					{name: "records", ops: recordScripts[pickScript(rng, recordScripts)]},
				}
				lastPart := map[string]int32{} // table + pk → partition of its last event
				pos := make([]int, len(runs))
				for {
					var open []int
					for i, r := range runs {
						if pos[i] < len(r.ops) {
							open = append(open, i)
						}
					}
					if len(open) == 0 {
						break
					}
					i := open[rng.Intn(len(open))]
					o := runs[i].ops[pos[i]]
					pos[i]++
					part := int32(rng.Intn(parts))
					h.pl.SetPartition(part)
					if err := h.step(runs[i].name, o, rng.Intn(2) == 0, false); err != nil {
						t.Fatal(err)
					}
					if o.kind != 't' && o.kind != 'd' {
						lastPart[runs[i].name+fmtVals(o.vals[:1])] = part
					}
				}
				cases++
				for _, control := range []bool{false, true} {
					got, emitted, np, nm := installLoads(t, h, parts, control)
					if !control {
						pads, mats = pads+np, mats+nm
					}
					want := &MemState{rows: map[string][]byte{}, vals: h.kv.vals}
					for k, v := range h.kv.rows {
						if k[0] != 'i' {
							want.rows[k] = v
						}
					}
					same := maps.EqualFunc(want.rows, got.rows, slices.Equal) && maps.EqualFunc(want.vals, got.vals, slices.Equal)
					switch {
					case !control && emitted > 0:
						t.Fatalf("%s: loading emitted %d changes", sql, emitted)
					case !control && !same:
						t.Fatalf("seed %d: %s: the stages' loaded state differs from the replay's:\n%s", seed, sql, stateDiff(want, got))
					case control && same && len(want.rows) > 0:
						t.Fatalf("seed %d: %s: negative control: loads without their versions give the same state", seed, sql)
					}
				}
				err := IndexEntries(p, h.kv, func(it int, part int32, key, rb []byte) error {
					v, ok := h.kv.rows[string(key)]
					if !ok || !strings.HasSuffix(string(v), string(rb)) {
						return fmt.Errorf("index entry %q: row bytes %x, state %x", key, rb, v)
					}
					vals, err := row.DecodeRow(nil, rb)
					if err != nil {
						return err
					}
					name := p.Tables[it].Name
					if want := lastPart[name+fmtVals(vals[:1])]; want != part {
						return fmt.Errorf("index entry of %s %s: partition %d, its last event's was %d", name, fmtVals(vals[:1]), part, want)
					}
					return nil
				})
				if err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
		}
	}
	t.Logf("%d histories, each over 16 plans: %d loads with a pad epoch, %d materializer loads", cases/16, pads, mats)
	if pads == 0 || mats == 0 {
		t.Fatalf("seed %d: the histories load no pad epoch (%d) or no materializer row (%d)", seed, pads, mats)
	}
}

func pickScript(rng *rand.Rand, m map[string][]op) string {
	names := sortedNames(m)
	return names[rng.Intn(len(names))]
}

// installLoads applies h's HandoverRecords through each stage's Operator,
// one state per stage partition, and returns their union and how many
// changes they emitted, and how many loads had a pad epoch and were the
// materializer's. control: the records lose their versions (the
// version of the message is used, as for an ordinary input).
func installLoads(t *testing.T, h *harness, parts int32, control bool) (_ *MemState, emitted, pads, mats int) {
	t.Helper()
	type sp struct{ n, p int }
	states := map[sp]*MemState{}
	ops := map[sp]*Operator{}
	out := keyedlog.Out{Emit: func(*row.Change) error { emitted++; return nil }, Quiet: true}
	var pos int64
	err := HandoverRecords(h.p, h.kv, parts, func(n int, partition int32, key, value []byte) error {
		if key[0] != 'S' {
			return fmt.Errorf("load record key %q is not an operator's record", key)
		}
		k := sp{n, int(partition)}
		if states[k] == nil {
			op, err := NewOperator(h.p, n, parts)
			if err != nil {
				return err
			}
			states[k], ops[k] = NewMemState(), op
		}
		pos++
		m := &keyedlog.Msg{Kind: keyedlog.KindStage, Key: key[1:], Value: value, Pos: pos, Version: 1 << 40}
		switch {
		case value[0] == matLoad:
			mats++
		case value[0]&flagPad != 0:
			pads++
		}
		if control {
			m.Value = controlValue(value)
		}
		// The partition a stage's ordinary input of this row would take.
		if key[1] == recInput {
			jk, id, err := splitLen(key[3:])
			if err != nil {
				return err
			}
			if want := InputPartition(jk, id, parts); want != partition {
				return fmt.Errorf("load of %q on partition %d, its inputs go to %d", key, partition, want)
			}
		}
		return ops[k].Step(memKeyed{states[k]}, m, out)
	})
	if err != nil {
		t.Fatal(err)
	}
	union := NewMemState()
	for _, s := range states {
		maps.Copy(union.rows, s.rows)
		maps.Copy(union.vals, s.vals)
	}
	return union, emitted, pads, mats
}

// controlValue turns a load record's value into the ordinary input of
// the same row (its flags and row, no versions): what a handover that does
// not carry the replay's versions would write.
func controlValue(v []byte) []byte {
	if v[0] == matLoad {
		_, n := uvarint(v[1:])
		return v[1+n:]
	}
	f := v[0]
	_, n := uvarint(v[1:])
	rest := v[1+n:]
	if f&flagPad != 0 {
		_, m := uvarint(rest)
		rest = rest[m:]
	}
	return append([]byte{f & flagMatchable}, rest...)
}

func stateDiff(want, got *MemState) string {
	var b strings.Builder
	mapDiff(&b, "row", want.rows, got.rows)
	mapDiff(&b, "value", want.vals, got.vals)
	return b.String()
}

// mapDiff writes to b each entry of want that got lacks or holds with
// other bytes, then each entry of got that want lacks, in key order.
func mapDiff(b *strings.Builder, kind string, want, got map[string][]byte) {
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok || string(g) != string(want[k]) {
			fmt.Fprintf(b, "%s %q: want %x, got %x (%v)\n", kind, k, want[k], g, ok)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			fmt.Fprintf(b, "extra %s %q\n", kind, k)
		}
	}
}

// memKeyed is a keyed.State over a MemState as KeyedState maps it (rows
// in the child keyspace, values in the parent keyspace); only what the
// operators call.
type memKeyed struct{ m *MemState }

var _ keyed.State = memKeyed{}

func (k memKeyed) Parent(key []byte) ([]byte, bool, error)              { return k.m.Value(key) }
func (k memKeyed) PutParent(key, v []byte) error                        { return k.m.PutValue(key, v) }
func (k memKeyed) DeleteParent(key []byte) error                        { return k.m.DeleteValue(key) }
func (k memKeyed) Child(g, id []byte) ([]byte, bool, error)             { return k.m.Row(g, id) }
func (k memKeyed) PutChild(g, id, v []byte) error                       { return k.m.PutRow(g, id, v) }
func (k memKeyed) DeleteChild(g, id []byte) error                       { return k.m.DeleteRow(g, id) }
func (k memKeyed) Children(g []byte, fn func(id, v []byte) error) error { return k.m.Rows(g, fn) }
func (k memKeyed) ScanChildren(prefix []byte, fn func(key, v []byte) error) error {
	return k.m.ScanRows(prefix, fn)
}
func (k memKeyed) ChildrenAfter([]byte, []byte, func([]byte, []byte) error) error { panic("unused") }
func (k memKeyed) HasChildren([]byte, []byte) (bool, error)                       { panic("unused") }
func (k memKeyed) Groups(func([]byte, []byte, keyed.ChildScan) error) error       { panic("unused") }
func (k memKeyed) ClearParents() error                                            { panic("unused") }
func (k memKeyed) ClearChildren() error                                           { panic("unused") }
func (k memKeyed) Aux([]byte) ([]byte, bool, error)                               { panic("unused") }
func (k memKeyed) PutAux([]byte, []byte) error                                    { panic("unused") }
func (k memKeyed) DeleteAux([]byte) error                                         { panic("unused") }
func (k memKeyed) AuxScan([]byte, []byte, func([]byte, []byte) error) error       { panic("unused") }

func uvarint(b []byte) (uint64, int) { return binary.Uvarint(b) }

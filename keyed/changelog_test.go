package keyed_test

import (
	"testing"

	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
)

// TestChangelogOnlyChanges: the keyer reports an index write to its
// Changelog only when the entry changes; a redelivered create, a snapshot
// re-run's read or an equal row writes nothing, while its keyed input is
// still passed on.
func TestChangelogOnlyChanges(t *testing.T) {
	spec := exhaustiveSpec(t, false)
	k := keyed.NewKeyer(spec)
	k.ResolveParents = true
	writes := 0
	k.Changelog = func(row.Side, int32, []byte, []byte) error { writes++; return nil }
	st := keyed.NewMemState()
	ev := func(o debezium.Op, vals ...row.Value) *debezium.Event {
		e := &debezium.Event{Op: o, Key: debezium.Row{Present: true, Values: []row.Value{vals[0]}}}
		if o == debezium.OpDelete {
			e.Key.Values = append(e.Key.Values, make([]row.Value, len(vals)-1)...)
			return e
		}
		e.After = debezium.Row{Present: true, Values: vals}
		return e
	}
	steps := []struct {
		name       string
		side       row.Side
		ev         *debezium.Event
		wantWrites int
		wantInputs int
	}{
		{"parent create", row.Parent, ev(debezium.OpCreate, row.Int(1), row.String("Egor")), 1, 1},
		{"parent create redelivered", row.Parent, ev(debezium.OpCreate, row.Int(1), row.String("Egor")), 0, 1},
		{"parent snapshot read, same row", row.Parent, ev(debezium.OpRead, row.Int(1), row.String("Egor")), 0, 1},
		{"parent renamed", row.Parent, ev(debezium.OpUpdate, row.Int(1), row.String("Egor2")), 1, 1},
		{"child create", row.Child, ev(debezium.OpCreate, row.Int(10), row.Int(1), row.String("a.com")), 1, 1},
		{"child create redelivered", row.Child, ev(debezium.OpCreate, row.Int(10), row.Int(1), row.String("a.com")), 0, 1},
		{"child snapshot read, same row", row.Child, ev(debezium.OpRead, row.Int(10), row.Int(1), row.String("a.com")), 0, 1},
		{"child renamed", row.Child, ev(debezium.OpUpdate, row.Int(10), row.Int(1), row.String("b.com")), 1, 1},
		{"child moved", row.Child, ev(debezium.OpUpdate, row.Int(10), row.Int(2), row.String("b.com")), 1, 2},
		{"child deleted", row.Child, ev(debezium.OpDelete, row.Int(10), row.Value{}, row.Value{}), 1, 1},
		{"child re-created", row.Child, ev(debezium.OpCreate, row.Int(10), row.Int(2), row.String("b.com")), 1, 1},
	}
	for _, s := range steps {
		writes = 0
		inputs := 0
		if err := k.Key(st, s.side, 0, s.ev, func(*keyed.Input) error { inputs++; return nil }); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if writes != s.wantWrites || inputs != s.wantInputs {
			t.Errorf("%s: %d changelog writes, %d keyed inputs; want %d, %d", s.name, writes, inputs, s.wantWrites, s.wantInputs)
		}
	}
}

// Package keyed is the keyed one-to-many co-process join: a Keyer turns
// decoded Debezium events into keyed Inputs (resolving each child's current
// join key from the child index), and a Join applies Inputs to the state and
// emits the resulting upserts and retractions of joined rows.
//
// Both are pure state machines: no goroutines, clocks or I/O of their own.
// All state lives in the joinstate.Txn the caller passes in, and the caller
// supplies each Input's version, so the same inputs applied to the same state
// always produce the same changes with the same versions.
package keyed

import (
	"fmt"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/row"
)

// Spec is the compiled shape of a join: projections and where each output
// column comes from. It is immutable and safe to share.
type Spec struct {
	Join config.JoinKind
	// ParentColumns / ChildColumns are the decoders' projections.
	ParentColumns []string
	ChildColumns  []string
	// ParentKey: positions of the parent's key columns in the parent row.
	ParentKey []int
	// ChildKey: positions of the child's key columns in the child row.
	ChildKey []int
	// ChildFK: positions of the child's parent_key columns in the child row.
	ChildFK []int
	// Out: for each select item, its side and position in that side's row.
	Out []OutColumn
	// Names are the output column names.
	Names []string
}

// OutColumn locates one output column.
type OutColumn struct {
	Side  row.Side
	Index int
}

// NewSpec compiles a validated configuration.
func NewSpec(c *config.Config) *Spec {
	s := &Spec{
		Join:          c.Join,
		ParentColumns: c.ParentColumns(),
		ChildColumns:  c.ChildColumns(),
		Names:         c.OutputNames(),
	}
	s.ParentKey = positions(s.ParentColumns, c.Parent.Key)
	s.ChildKey = positions(s.ChildColumns, c.Child.Key)
	s.ChildFK = positions(s.ChildColumns, c.Child.ParentKey)
	for _, it := range c.Select {
		if it.Side == row.Parent {
			s.Out = append(s.Out, OutColumn{row.Parent, indexOf(s.ParentColumns, it.Column)})
		} else {
			s.Out = append(s.Out, OutColumn{row.Child, indexOf(s.ChildColumns, it.Column)})
		}
	}
	return s
}

func positions(cols, names []string) []int {
	out := make([]int, len(names))
	for i, n := range names {
		out[i] = indexOf(cols, n)
	}
	return out
}

func indexOf(cols []string, name string) int {
	for i, c := range cols {
		if c == name {
			return i
		}
	}
	panic(fmt.Sprintf("keyed: column %q not in projection %v", name, cols)) // unreachable: projections are built from the same config
}

// Columns returns the projection of side.
func (s *Spec) Columns(side row.Side) []string {
	if side == row.Parent {
		return s.ParentColumns
	}
	return s.ChildColumns
}

// Output fills dst with the select-list values of a joined row. child may be
// nil (LEFT join padding). Unresolved TOAST placeholders render as NULL.
func (s *Spec) Output(dst, parent, child []row.Value) []row.Value {
	dst = dst[:0]
	for _, o := range s.Out {
		var v row.Value
		if o.Side == row.Parent {
			v = parent[o.Index]
		} else if child != nil {
			v = child[o.Index]
		}
		if v.Kind == row.KindUnavailable {
			v = row.Value{}
		}
		dst = append(dst, v)
	}
	return dst
}

// pick appends row's values at idx to dst.
func pick(dst, vals []row.Value, idx []int) []row.Value {
	for _, i := range idx {
		dst = append(dst, vals[i])
	}
	return dst
}

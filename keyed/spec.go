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
	"strings"

	"github.com/cdcjoin/cdcjoin/row"
)

// Shape describes a join in plain column lists: what NewSpec compiles.
type Shape struct {
	// Left keeps parents without children, padded with NULLs (LEFT JOIN);
	// false is an INNER JOIN.
	Left bool
	// ParentKey is the parent's primary key column(s), the join key.
	ParentKey []string
	// ChildKey is the child's primary key column(s).
	ChildKey []string
	// ChildParentKey is the child's foreign key column(s), referencing
	// ParentKey one to one.
	ChildParentKey []string
	// Select is the output, in order.
	Select []Column
}

// Column is one output column: Source of Side, named Name in the output.
type Column struct {
	Side   row.Side
	Source string
	Name   string
}

// Spec is the compiled shape of a join: projections and where each output
// column comes from. It is immutable and safe to share.
type Spec struct {
	// Left: parents without children are emitted padded (LEFT JOIN).
	Left bool
	// ParentColumns / ChildColumns are the decoders' projections: the
	// key columns, then the child's foreign key, then the selected
	// columns, without duplicates. State stores exactly these.
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

// NewSpec compiles a join shape. It fails when the shape is incomplete
// (no keys, a foreign key that does not match the parent key, an empty or
// ambiguous select list); configurations validated by package config never
// fail here.
func NewSpec(sh Shape) (*Spec, error) {
	var errs []string
	if len(sh.ParentKey) == 0 {
		errs = append(errs, "no parent key")
	}
	if len(sh.ChildKey) == 0 {
		errs = append(errs, "no child key")
	}
	if len(sh.ChildParentKey) != len(sh.ParentKey) {
		errs = append(errs, fmt.Sprintf("the child's foreign key has %d column(s), the parent key %d", len(sh.ChildParentKey), len(sh.ParentKey)))
	}
	if len(sh.Select) == 0 {
		errs = append(errs, "empty select list")
	}
	seen := map[string]bool{}
	for _, c := range sh.Select {
		if c.Side != row.Parent && c.Side != row.Child {
			errs = append(errs, fmt.Sprintf("output column %q has no side", c.Name))
		}
		if seen[c.Name] {
			errs = append(errs, fmt.Sprintf("output column %q appears twice", c.Name))
		}
		seen[c.Name] = true
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("cdcjoin: join shape: %s", strings.Join(errs, "; "))
	}
	s := &Spec{Left: sh.Left}
	s.ParentColumns = append([]string(nil), sh.ParentKey...)
	s.ChildColumns = appendUnique(append([]string(nil), sh.ChildKey...), sh.ChildParentKey...)
	for _, c := range sh.Select {
		if c.Side == row.Parent {
			s.ParentColumns = appendUnique(s.ParentColumns, c.Source)
		} else {
			s.ChildColumns = appendUnique(s.ChildColumns, c.Source)
		}
		s.Names = append(s.Names, c.Name)
	}
	s.ParentKey = positions(s.ParentColumns, sh.ParentKey)
	s.ChildKey = positions(s.ChildColumns, sh.ChildKey)
	s.ChildFK = positions(s.ChildColumns, sh.ChildParentKey)
	for _, c := range sh.Select {
		s.Out = append(s.Out, OutColumn{c.Side, indexOf(s.Columns(c.Side), c.Source)})
	}
	return s, nil
}

func appendUnique(s []string, vs ...string) []string {
	for _, v := range vs {
		if indexOf(s, v) < 0 {
			s = append(s, v)
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
	return -1
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

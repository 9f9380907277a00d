package plan

import "slices"

// LegacyShape is a plan that today's two-table join (package keyed: a
// parent and a child on a foreign key) runs as is: FROM parent [LEFT] JOIN
// child ON child.fk = parent.key, nothing else in ON, no WHERE, only plain
// columns selected.
type LegacyShape struct {
	Left bool
	// ChildFK are the child's columns equated with the parent's key
	// columns, in the order of the parent's key.
	ChildFK []string
	// Select: for each output column, whether it is the child's, and its
	// column.
	Select []LegacyColumn
}

// LegacyColumn is one select-list column of a LegacyShape.
type LegacyColumn struct {
	Child        bool
	Column, Name string
}

// Legacy reports whether p is the two-table join of today's parent/child
// form, and its shape.
func (p *Plan) Legacy() (LegacyShape, bool) {
	var sh LegacyShape
	if len(p.Stages) != 1 || len(p.Query.Where) > 0 {
		return sh, false
	}
	st := &p.Stages[0]
	if (st.Kind != Inner && st.Kind != Left) || st.L.Filter != nil || st.L.Match != nil ||
		st.R.Filter != nil || st.R.Match != nil || st.Residual != nil {
		return sh, false
	}
	if len(p.Query.Joins[0].On) != len(st.L.Key) {
		return sh, false
	}
	key := p.Tables[0].Key
	if len(st.L.Key) != len(key) {
		return sh, false
	}
	sh.Left = st.Kind == Left
	sh.ChildFK = make([]string, len(key))
	for i, li := range st.L.Key {
		ki := slices.Index(key, st.L.Layout[li].Column)
		if ki < 0 || sh.ChildFK[ki] != "" {
			return sh, false
		}
		sh.ChildFK[ki] = st.R.Layout[st.R.Key[i]].Column
	}
	for _, fk := range sh.ChildFK {
		if fk == "" {
			return sh, false
		}
	}
	for _, o := range p.Select {
		if o.Source == nil {
			return sh, false
		}
		sh.Select = append(sh.Select, LegacyColumn{Child: o.Source.Table == 1, Column: o.Source.Column, Name: o.Name})
	}
	return sh, true
}

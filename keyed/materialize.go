package keyed

import "github.com/cdcjoin/cdcjoin/row"

// Materialize streams the join held in t: every joined row, sorted by row
// key (join key, then child key), with a LEFT join's parents without
// children as one padded row (childKey nil). The slices passed to fn are
// reused between calls: fn copies what it keeps. It is the final table a
// sink holds after applying every change the Join emitted on the same
// state.
func Materialize(t State, spec *Spec, fn func(parentKey, childKey, vals []row.Value) error) error {
	var p ParentRecord
	var c ChildRecord
	var vals, pk, ck []row.Value
	return t.Groups(func(jk, pv []byte, children ChildScan) error {
		if err := DecodeParent(pv, &p); err != nil {
			return err
		}
		var err error
		if pk, _, err = row.DecodeKey(pk[:0], jk, len(spec.ParentKey)); err != nil {
			return err
		}
		any := false
		err = children(func(ckb, cv []byte) error {
			any = true
			if err := DecodeChild(cv, &c); err != nil {
				return err
			}
			var err error
			if ck, _, err = row.DecodeKey(ck[:0], ckb, len(spec.ChildKey)); err != nil {
				return err
			}
			vals = spec.Output(vals, p.Row, c.Row)
			return fn(pk, ck, vals)
		})
		if err != nil || any || !spec.Left {
			return err
		}
		vals = spec.Output(vals, p.Row, nil)
		return fn(pk, nil, vals)
	})
}

// OutputTypes returns the select list's column types, in select order,
// given each side's projected column types (in the order of ParentColumns
// and ChildColumns; nil or short when unknown, which leaves zero entries).
func (s *Spec) OutputTypes(parent, child []row.ColumnType) []row.ColumnType {
	out := make([]row.ColumnType, len(s.Out))
	for i, o := range s.Out {
		ts := parent
		if o.Side == row.Child {
			ts = child
		}
		if o.Index < len(ts) {
			out[i] = ts[o.Index]
		}
	}
	return out
}

package keyed

import (
	"fmt"

	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/row"
)

// Helpers for bulk loads (package bulkload), which apply a snapshot or a
// rebuild by sorting instead of record by record, and must reach the state
// and the output the Keyer and the Join would.

// CompleteRow copies vals into dst[:0], replacing TOAST placeholders with
// the values of old (the row's last complete values, if had), and reports
// whether the result equals old. It is the merge both the Keyer (from the
// child index) and the Join (from the stored record) apply to an upsert:
// an upsert whose result equals the stored row changes nothing.
func CompleteRow(dst, vals, old []row.Value, had bool) ([]row.Value, bool) {
	return complete(dst, vals, old, had)
}

// ForeignKey appends the encoded join key a child row refers to; ok is
// false when a part of it is NULL (or a placeholder): the child joins
// nothing.
func (s *Spec) ForeignKey(dst []byte, child []row.Value) (_ []byte, ok bool) {
	return keyOf(dst, child, s.ChildFK)
}

// SnapshotKey appends the encoded primary key of a snapshot read (op=r) of
// side: the join key of a parent, the child key of a child, as the Keyer
// would compute it. Errors are *KeyError (no `after`, a NULL key, another
// op).
func (s *Spec) SnapshotKey(dst []byte, side row.Side, ev *debezium.Event) ([]byte, error) {
	if ev.Op != debezium.OpRead {
		return dst, &KeyError{side, ev.Op, "not a snapshot read"}
	}
	if !ev.After.Present {
		return dst, &KeyError{side, ev.Op, "no `after` row"}
	}
	idx := s.ParentKey
	if side == row.Child {
		idx = s.ChildKey
	}
	b, ok := keyOf(dst, ev.After.Values, idx)
	if !ok {
		return dst, &KeyError{side, ev.Op, fmt.Sprintf("primary key %v is NULL in `after`", s.Columns(side)[:len(idx)])}
	}
	return b, nil
}

// EventKey appends the encoded primary key of a decoded event of side (the
// join key of a parent, the child key of a child): from `after`, else from
// `before`, else from the record key; ok is false when none has it. It is
// a hint for reading ahead; the Keyer decides what an event means.
func (s *Spec) EventKey(dst []byte, side row.Side, ev *debezium.Event) (_ []byte, ok bool) {
	idx := s.ParentKey
	if side == row.Child {
		idx = s.ChildKey
	}
	for _, r := range []*debezium.Row{&ev.After, &ev.Before, &ev.Key} {
		if r.Present {
			if b, ok := keyOf(dst, r.Values, idx); ok {
				return b, true
			}
		}
	}
	return dst, false
}

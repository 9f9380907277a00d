package keyed

import (
	"bytes"
	"fmt"

	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/row"
)

// KeyError is a decoded event that cannot be keyed (a NULL primary key, say).
// It is a bad-record error: callers apply their bad-record policy to it.
type KeyError struct {
	Side   row.Side
	Op     debezium.Op
	Reason string
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("cdcjoin: cannot key %s event (op %s): %s", e.Side, e.Op, e.Reason)
}

// Keyer turns decoded Debezium events into keyed Inputs. For the child side
// it keeps a child index (child key → join key and last row) in the state and
// resolves from it, never from `before` (which REPLICA IDENTITY DEFAULT leaves
// out): updates and deletes retract from the right key, a foreign-key move
// becomes a ChildDelete on the old key plus a ChildUpsert on the new one, and
// TOAST placeholders are filled in, so child Inputs always carry complete
// rows. Child upserts that change nothing projected emit nothing.
// Not safe for concurrent use.
type Keyer struct {
	// ResolveParents makes the keyer keep a parent index too (parent key →
	// last row) and fill parents' TOAST placeholders from it, so parent
	// Inputs carry complete rows. A keying stage whose output is a compacted
	// topic needs it (compaction may remove the earlier complete row the join
	// would otherwise merge with); a join on the same state does not.
	ResolveParents bool

	// Changelog, if set, receives every index write as it is made: side's
	// index key and entry (the bytes stored), entry nil for a delete, and
	// the source partition of the event that made it. A keying stage
	// mirrors them to its index changelog topics. Clears (a
	// truncate) are not reported. An upsert whose entry equals the stored
	// one (a redelivery, a snapshot re-run) is not written at all, so not
	// reported either: the changelog's latest record for the key already
	// is that entry. The slices are only valid during the call. An error
	// aborts Key.
	Changelog func(side row.Side, partition int32, key, entry []byte) error

	// PartitionInputs passes the event's source partition on in parent
	// upserts (Input.PartitionKnown), for a join on the same state (the
	// engine: the join keeps it in parent records).
	PartitionInputs bool

	spec *Spec
	part int32 // the source partition of the event being keyed

	in          Input
	jk, ojk     []byte
	ck, ock     []byte
	vals, ovals []row.Value
	entry       []byte
	// oentry is the stored entry the last childIndex or parentIndex found
	// (empty when none).
	oentry []byte
}

// NewKeyer returns a keyer for spec.
func NewKeyer(spec *Spec) *Keyer { return &Keyer{spec: spec} }

// Key emits the Inputs for ev, read from partition of side's topic,
// updating the child index in t. Index entries record the partition (every
// event of a row comes from one). The Input passed to out is reused after
// out returns. Errors are *KeyError for events that cannot be keyed, state
// errors, or out's.
func (k *Keyer) Key(t Index, side row.Side, partition int32, ev *debezium.Event, out func(*Input) error) error {
	k.part = partition
	if ev.Op == debezium.OpTruncate {
		if side == row.Child {
			if err := t.ClearChildIndex(); err != nil {
				return err
			}
		} else if k.ResolveParents {
			if err := t.ClearParentIndex(); err != nil {
				return err
			}
		}
		k.in = Input{Kind: Truncate, Side: side}
		return out(&k.in)
	}
	if side == row.Parent {
		return k.parent(t, ev, out)
	}
	return k.child(t, ev, out)
}

// keyOf encodes the tuple at idx of row; ok is false if any part is NULL (or
// an unavailable placeholder).
func keyOf(dst []byte, vals []row.Value, idx []int) ([]byte, bool) {
	for _, i := range idx {
		if vals[i].Kind == row.KindNull || vals[i].Kind == row.KindUnavailable {
			return dst, false
		}
	}
	for _, i := range idx {
		dst = row.AppendKey(dst, vals[i:i+1])
	}
	return dst, true
}

// pkOf returns the encoded primary key of a delete (or an update's old row):
// from `before` if it has the key, else from the record key.
func pkOf(dst []byte, ev *debezium.Event, idx []int) ([]byte, bool) {
	if ev.Before.Present {
		if b, ok := keyOf(dst, ev.Before.Values, idx); ok {
			return b, true
		}
	}
	if ev.Key.Present {
		return keyOf(dst, ev.Key.Values, idx)
	}
	return dst, false
}

func (k *Keyer) parent(t Index, ev *debezium.Event, out func(*Input) error) error {
	s := k.spec
	switch ev.Op {
	case debezium.OpCreate, debezium.OpRead, debezium.OpUpdate:
		if !ev.After.Present {
			return &KeyError{row.Parent, ev.Op, "no `after` row"}
		}
		var ok bool
		k.jk, ok = keyOf(k.jk[:0], ev.After.Values, s.ParentKey)
		if !ok {
			return &KeyError{row.Parent, ev.Op, fmt.Sprintf("primary key %v is NULL in `after`", s.Columns(row.Parent)[:len(s.ParentKey)])}
		}
		// An update that changes the primary key in place (Debezium normally
		// splits it into delete + create): delete the old key first.
		if ev.Op == debezium.OpUpdate && ev.Before.Present {
			if old, ok := keyOf(k.ojk[:0], ev.Before.Values, s.ParentKey); ok && string(old) != string(k.jk) {
				k.ojk = old
				if k.ResolveParents {
					if err := k.deleteIndex(t, row.Parent, k.ojk); err != nil {
						return err
					}
				}
				k.in = Input{Kind: ParentDelete, Side: row.Parent, JoinKey: k.ojk}
				if err := out(&k.in); err != nil {
					return err
				}
			}
		}
		after := ev.After.Values
		if k.ResolveParents {
			var had bool
			var err error
			k.ovals, had, err = k.parentIndex(t, k.jk)
			if err != nil {
				return err
			}
			var same bool
			k.vals, same = complete(k.vals, after, k.ovals, had)
			if same && ev.Op == debezium.OpUpdate {
				return nil // an update of unprojected columns only, or a redelivery
			}
			k.entry = AppendParentIndexEntry(k.entry[:0], k.part, k.vals)
			if err := k.setIndexIfChanged(t, row.Parent, k.jk, k.entry, had); err != nil {
				return err
			}
			after = k.vals
		}
		k.in = Input{Kind: ParentUpsert, Side: row.Parent, JoinKey: k.jk, Row: after,
			Partition: k.part, PartitionKnown: k.PartitionInputs}
		return out(&k.in)
	case debezium.OpDelete:
		var ok bool
		k.jk, ok = pkOf(k.jk[:0], ev, s.ParentKey)
		if !ok {
			return &KeyError{row.Parent, ev.Op, "delete without primary key in `before` or the record key"}
		}
		if k.ResolveParents {
			if err := k.deleteIndex(t, row.Parent, k.jk); err != nil {
				return err
			}
		}
		k.in = Input{Kind: ParentDelete, Side: row.Parent, JoinKey: k.jk}
		return out(&k.in)
	}
	return &KeyError{row.Parent, ev.Op, "unsupported op"}
}

func (k *Keyer) child(t Index, ev *debezium.Event, out func(*Input) error) error {
	s := k.spec
	switch ev.Op {
	case debezium.OpCreate, debezium.OpRead, debezium.OpUpdate:
		if !ev.After.Present {
			return &KeyError{row.Child, ev.Op, "no `after` row"}
		}
		var ok bool
		k.ck, ok = keyOf(k.ck[:0], ev.After.Values, s.ChildKey)
		if !ok {
			return &KeyError{row.Child, ev.Op, fmt.Sprintf("primary key %v is NULL in `after`", s.Columns(row.Child)[:len(s.ChildKey)])}
		}
		if ev.Op == debezium.OpUpdate && ev.Before.Present {
			if old, ok := keyOf(k.ock[:0], ev.Before.Values, s.ChildKey); ok && string(old) != string(k.ck) {
				k.ock = old
				if err := k.childGone(t, k.ock, out); err != nil {
					return err
				}
			}
		}
		var had bool
		var err error
		had, err = k.childIndex(t, k.ck)
		if err != nil {
			return err
		}
		// Resolve TOAST placeholders from the indexed row, which is complete
		// even when this update also moves the child to another join key.
		var same bool
		k.vals, same = complete(k.vals, ev.After.Values, k.ovals, had)
		var hasKey bool
		k.jk, hasKey = keyOf(k.jk[:0], k.vals, s.ChildFK)
		// Skip updates that change nothing projected. Creates and snapshot
		// reads are always passed on: after a truncate, another partition's
		// index may still hold a stale entry equal to the re-inserted row.
		if had && hasKey && same && string(k.ojk) == string(k.jk) && ev.Op == debezium.OpUpdate {
			return nil
		}
		if had && len(k.ojk) > 0 && (!hasKey || string(k.ojk) != string(k.jk)) {
			k.in = Input{Kind: ChildDelete, Side: row.Child, JoinKey: k.ojk, ChildKey: k.ck}
			if err := out(&k.in); err != nil {
				return err
			}
		}
		if !hasKey {
			// NULL foreign key: the child joins nothing.
			if had {
				return k.deleteIndex(t, row.Child, k.ck)
			}
			return nil
		}
		k.entry = AppendIndexEntry(k.entry[:0], k.part, k.jk, k.vals)
		if err := k.setIndexIfChanged(t, row.Child, k.ck, k.entry, had); err != nil {
			return err
		}
		k.in = Input{Kind: ChildUpsert, Side: row.Child, JoinKey: k.jk, ChildKey: k.ck, Row: k.vals,
			Absent: !had || string(k.ojk) != string(k.jk)}
		return out(&k.in)
	case debezium.OpDelete:
		var ok bool
		k.ck, ok = pkOf(k.ck[:0], ev, s.ChildKey)
		if !ok {
			return &KeyError{row.Child, ev.Op, "delete without primary key in `before` or the record key"}
		}
		return k.childGone(t, k.ck, out)
	}
	return &KeyError{row.Child, ev.Op, "unsupported op"}
}

// childGone emits a ChildDelete for ck at its indexed join key, if any, and
// forgets it.
func (k *Keyer) childGone(t Index, ck []byte, out func(*Input) error) error {
	var had bool
	var err error
	had, err = k.childIndex(t, ck)
	if err != nil || !had {
		return err
	}
	if err := k.deleteIndex(t, row.Child, ck); err != nil {
		return err
	}
	k.in = Input{Kind: ChildDelete, Side: row.Child, JoinKey: k.ojk, ChildKey: ck}
	return out(&k.in)
}

// complete copies vals into dst[:0], replacing TOAST placeholders with the
// values of old (the last complete row, if had), and reports whether the
// result equals old.
func complete(dst, vals, old []row.Value, had bool) ([]row.Value, bool) {
	dst = append(dst[:0], vals...)
	same := had
	for i, v := range dst {
		if v.Kind == row.KindUnavailable && had {
			dst[i] = old[i]
		}
		if same && !dst[i].Equal(old[i]) {
			same = false
		}
	}
	return dst, same
}

// childIndex reads ck's index entry into k.ojk (the join key it lives
// under) and k.ovals (its last row).
func (k *Keyer) childIndex(t Index, ck []byte) (bool, error) {
	e, ok, err := t.ChildIndex(ck)
	k.oentry = append(k.oentry[:0], e...)
	if !ok || err != nil {
		k.oentry = k.oentry[:0]
		return false, err
	}
	var jk []byte
	if _, jk, k.ovals, err = DecodeIndexEntry(e, k.ovals); err != nil {
		return false, err
	}
	k.ojk = append(k.ojk[:0], jk...)
	return true, nil
}

// parentIndex reads pk's last row from the parent index.
func (k *Keyer) parentIndex(t Index, pk []byte) ([]row.Value, bool, error) {
	e, ok, err := t.ParentIndex(pk)
	k.oentry = append(k.oentry[:0], e...)
	if !ok || err != nil {
		k.oentry = k.oentry[:0]
		return k.ovals, false, err
	}
	_, vals, err := DecodeParentIndexEntry(e, k.ovals)
	return vals, err == nil, err
}

// setIndex stores side's index entry for key and reports it to Changelog.
func (k *Keyer) setIndex(t Index, side row.Side, key, entry []byte) error {
	var err error
	if side == row.Parent {
		err = t.SetParentIndex(key, entry)
	} else {
		err = t.SetChildIndex(key, entry)
	}
	if err == nil && k.Changelog != nil {
		err = k.Changelog(side, k.part, key, entry)
	}
	return err
}

// setIndexIfChanged is setIndex unless had and the stored entry (read last,
// into oentry) is entry already.
func (k *Keyer) setIndexIfChanged(t Index, side row.Side, key, entry []byte, had bool) error {
	if had && bytes.Equal(entry, k.oentry) {
		return nil
	}
	return k.setIndex(t, side, key, entry)
}

// deleteIndex deletes side's index entry for key and reports it to
// Changelog.
func (k *Keyer) deleteIndex(t Index, side row.Side, key []byte) error {
	var err error
	if side == row.Parent {
		err = t.DeleteParentIndex(key)
	} else {
		err = t.DeleteChildIndex(key)
	}
	if err == nil && k.Changelog != nil {
		err = k.Changelog(side, k.part, key, nil)
	}
	return err
}

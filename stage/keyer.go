package stage

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/plan"
	"github.com/cdcjoin/cdcjoin/row"
)

// KeyError is an event that cannot be keyed (a NULL primary key, an
// unsupported op): a bad record.
type KeyError struct {
	Table  string
	Op     debezium.Op
	Reason string
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("cdcjoin: cannot key %s event (op %s): %s", e.Table, e.Op, e.Reason)
}

// Keyer turns the decoded Debezium events of one FROM item's table
// (projected to plan.Table.Columns, key columns first) into changes of its
// rows, keeping an index primary key → last complete row in the State
// ('i' item pk). An update or delete never relies on `before` (REPLICA
// IDENTITY DEFAULT leaves it out): the index has the previous row; TOAST
// placeholders are filled from it; an update that changes nothing the
// query reads emits nothing. Not safe for concurrent use.
//
// With Partitions set (a driver that keys every source partition on one
// State: `replay`), each index entry also records the source partition of
// the event that last wrote it (AppendIndexEntry), so that a handover can
// split the index by partition as `run` keeps it; Partition is the
// partition of the events keyed next. Without it (run's keying stage: one
// State per source partition) an entry is the row alone.
type Keyer struct {
	item  byte
	table *plan.Table
	nkey  int

	Partitions bool
	Partition  int32
	oldPart    int32

	key, ikey []byte
	old, vals []row.Value
	enc       []byte
	delta     Delta
}

// NewKeyer returns the keyer of FROM item t of p.
func NewKeyer(p *plan.Plan, t int) *Keyer {
	return &Keyer{item: byte(t), table: &p.Tables[t], nkey: len(p.Tables[t].Key)}
}

// indexGroup is the group of the index's rows ('i' item).
func (k *Keyer) indexGroup() []byte {
	k.ikey = append(k.ikey[:0], 'i', k.item)
	return k.ikey
}

// pkOf encodes the key columns of vals (the first nkey); false when one is
// NULL or a placeholder.
func (k *Keyer) pkOf(dst []byte, vals []row.Value) ([]byte, bool) {
	if len(vals) < k.nkey {
		return dst, false
	}
	for _, v := range vals[:k.nkey] {
		if v.Kind == row.KindNull || v.Kind == row.KindUnavailable {
			return dst, false
		}
	}
	return row.AppendKey(dst[:0], vals[:k.nkey]), true
}

// Key emits the changes ev makes to the table's rows (emit), or calls
// truncate for a truncate after clearing the index. Errors are *KeyError
// for events that cannot be keyed, the KV's, or emit's.
func (k *Keyer) Key(kv State, ev *debezium.Event, emit Emit, truncate func() error) error {
	switch ev.Op {
	case debezium.OpTruncate:
		group := []byte{'i', k.item}
		err := kv.Rows(group, func(pk, _ []byte) error { return kv.DeleteRow(group, pk) })
		if err != nil {
			return err
		}
		return truncate()
	case debezium.OpCreate, debezium.OpRead, debezium.OpUpdate:
		if !ev.After.Present {
			return &KeyError{k.table.Name, ev.Op, "no `after` row"}
		}
		var ok bool
		if k.key, ok = k.pkOf(k.key, ev.After.Values); !ok {
			return &KeyError{k.table.Name, ev.Op, fmt.Sprintf("primary key %v is NULL in `after`", k.table.Key)}
		}
		if ev.Op == debezium.OpUpdate && ev.Before.Present {
			// An update that changes the key in place (Debezium normally
			// splits it into delete + create): the old key goes first.
			if old, ok := k.pkOf(nil, ev.Before.Values); ok && string(old) != string(k.key) {
				if err := k.gone(kv, old, emit); err != nil {
					return err
				}
			}
		}
		had, err := k.load(kv, k.key)
		if err != nil {
			return err
		}
		same := had
		k.vals = append(k.vals[:0], ev.After.Values...)
		for i, v := range k.vals {
			if v.Kind == row.KindUnavailable && had {
				k.vals[i] = k.old[i]
			}
			if same && !k.vals[i].Equal(k.old[i]) {
				same = false
			}
		}
		moved := k.Partitions && had && k.oldPart != k.Partition
		if same && ev.Op == debezium.OpUpdate && !moved {
			return nil // unprojected columns only, or a redelivery
		}
		if !(same && had) || moved {
			k.enc = k.encode(k.enc[:0], k.vals)
			if err := kv.PutRow(k.indexGroup(), k.key, k.enc); err != nil {
				return err
			}
		}
		if same && ev.Op == debezium.OpUpdate {
			return nil // the same row, now from another source partition
		}
		k.delta = Delta{Op: row.Upsert, ID: k.key, Row: k.vals}
		if had {
			k.delta.Prev = k.old
		}
		return emit(&k.delta)
	case debezium.OpDelete:
		var pk []byte
		var ok bool
		if ev.Before.Present {
			pk, ok = k.pkOf(nil, ev.Before.Values)
		}
		if !ok && ev.Key.Present {
			pk, ok = k.pkOf(nil, ev.Key.Values)
		}
		if !ok {
			return &KeyError{k.table.Name, ev.Op, "delete without primary key in `before` or the record key"}
		}
		return k.gone(kv, pk, emit)
	}
	return &KeyError{k.table.Name, ev.Op, "unsupported op"}
}

// encode appends the index entry of vals.
func (k *Keyer) encode(dst []byte, vals []row.Value) []byte {
	if k.Partitions {
		return AppendIndexEntry(dst, k.Partition, vals)
	}
	return row.AppendRow(dst, vals)
}

// load reads pk's indexed row into k.old (and its partition into
// k.oldPart, with Partitions).
func (k *Keyer) load(kv State, pk []byte) (bool, error) {
	v, ok, err := kv.Row(k.indexGroup(), pk)
	if !ok || err != nil {
		return false, err
	}
	if k.Partitions {
		if k.oldPart, v, err = SplitIndexEntry(v); err != nil {
			return false, err
		}
	}
	k.old, err = row.DecodeRow(k.old[:0], v)
	return err == nil, err
}

// AppendIndexEntry appends a Keyer's index entry that records its source
// partition (Keyer.Partitions): uvarint(partition), then the row.
func AppendIndexEntry(dst []byte, partition int32, vals []row.Value) []byte {
	return row.AppendRow(binary.AppendUvarint(dst, uint64(partition)), vals)
}

// SplitIndexEntry splits an entry of AppendIndexEntry into its partition
// and its row's encoding (row.AppendRow's: what run's keying index keeps).
func SplitIndexEntry(v []byte) (partition int32, rowBytes []byte, err error) {
	p, n := binary.Uvarint(v)
	if n <= 0 || p > math.MaxInt32 {
		return 0, nil, fmt.Errorf("%w: index entry partition", row.ErrCorrupt)
	}
	return int32(p), v[n:], nil
}

// gone retracts pk's row, if indexed, and forgets it.
func (k *Keyer) gone(kv State, pk []byte, emit Emit) error {
	had, err := k.load(kv, pk)
	if err != nil || !had {
		return err
	}
	if err := kv.DeleteRow(k.indexGroup(), pk); err != nil {
		return err
	}
	k.delta = Delta{Op: row.Retract, ID: pk, Row: k.old}
	return emit(&k.delta)
}

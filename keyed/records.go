package keyed

import (
	"encoding/binary"
	"fmt"

	"github.com/cdcjoin/cdcjoin/row"
)

// ParentRecord is the join's stored parent row (its value state).
type ParentRecord struct {
	// Version of the input that last changed the row.
	Version uint64
	// PadVersion is the version at which a LEFT join's padded row for this
	// parent was last emitted (0 if never).
	PadVersion uint64
	// Row is the projected parent row.
	Row []row.Value
	// Partition is the source partition of the parent's events, when the
	// driver knows it (Input.PartitionKnown), else -1. A replay's state
	// keeps it so that kafkarun.Handover can place the parent's index
	// entry.
	Partition int32
}

// ChildRecord is the join's stored child row (an entry of its map state).
type ChildRecord struct {
	Version uint64
	Row     []row.Value
}

// Stored encodings (the State's values):
//
//	parent: uvarint version, uvarint pad version, row.AppendRow(row), or with
//	        a known source partition 0x00, uvarint partition, then the same
//	child:  uvarint version, row.AppendRow(row)
//	child index entry:  0x00, uvarint partition, uvarint len(joinKey), joinKey, row.AppendRow(row)
//	parent index entry: 0x00, uvarint partition, row.AppendRow(row)
//
// An index entry records the source partition whose events change the row
// (Debezium sends every event of one row to one partition), so that an
// index can be split by partition (kafkarun.Handover). Entries written by
// cdcjoin ≤ wave 1 lack the 0x00 tag and the partition (it decodes as -1):
// a child entry began with its join key's length (never 0), a parent entry
// with the kind of its key column (never NULL, kind 0).
const (
	indexTag  = 0x00
	recordTag = 0x00
)

// AppendParent appends rec's stored encoding to dst.
func AppendParent(dst []byte, rec *ParentRecord) []byte {
	if rec.Partition >= 0 {
		dst = binary.AppendUvarint(append(dst, recordTag), uint64(rec.Partition))
	}
	dst = binary.AppendUvarint(dst, rec.Version)
	dst = binary.AppendUvarint(dst, rec.PadVersion)
	return row.AppendRow(dst, rec.Row)
}

// DecodeParent decodes a stored parent into rec, reusing rec.Row.
func DecodeParent(v []byte, rec *ParentRecord) error {
	rec.Partition = -1
	if len(v) > 0 && v[0] == recordTag { // versions are ≥ 1: never a 0x00 first byte
		p, n := binary.Uvarint(v[1:])
		if n <= 0 || p > 1<<31-1 {
			return fmt.Errorf("%w: parent partition", row.ErrCorrupt)
		}
		rec.Partition, v = int32(p), v[1+n:]
	}
	ver, n := binary.Uvarint(v)
	if n <= 0 {
		return fmt.Errorf("%w: parent version", row.ErrCorrupt)
	}
	pad, m := binary.Uvarint(v[n:])
	if m <= 0 {
		return fmt.Errorf("%w: parent pad version", row.ErrCorrupt)
	}
	rec.Version, rec.PadVersion = ver, pad
	var err error
	rec.Row, err = row.DecodeRow(rec.Row[:0], v[n+m:])
	return err
}

// AppendChild appends rec's stored encoding to dst.
func AppendChild(dst []byte, rec *ChildRecord) []byte {
	dst = binary.AppendUvarint(dst, rec.Version)
	return row.AppendRow(dst, rec.Row)
}

// DecodeChild decodes a stored child into rec, reusing rec.Row.
func DecodeChild(v []byte, rec *ChildRecord) error {
	ver, n := binary.Uvarint(v)
	if n <= 0 {
		return fmt.Errorf("%w: child version", row.ErrCorrupt)
	}
	rec.Version = ver
	var err error
	rec.Row, err = row.DecodeRow(rec.Row[:0], v[n:])
	return err
}

// AppendIndexEntry appends a child-index entry to dst: the source
// partition of the child's events, the join key the child lives under and
// its projected row (complete, placeholders resolved), so that a later
// update carrying TOAST placeholders can be completed even when it moves
// the child to another join key.
func AppendIndexEntry(dst []byte, partition int32, joinKey []byte, vals []row.Value) []byte {
	dst = binary.AppendUvarint(append(dst, indexTag), uint64(uint32(partition)))
	dst = binary.AppendUvarint(dst, uint64(len(joinKey)))
	dst = append(dst, joinKey...)
	return row.AppendRow(dst, vals)
}

// DecodeIndexEntry splits an entry made by AppendIndexEntry; the row is
// appended to vals[:0] and joinKey aliases entry. partition is -1 for an
// entry of cdcjoin ≤ wave 1.
func DecodeIndexEntry(entry []byte, vals []row.Value) (partition int32, joinKey []byte, _ []row.Value, err error) {
	partition, entry, err = indexPartition(entry)
	if err != nil {
		return -1, nil, vals, err
	}
	n, m := binary.Uvarint(entry)
	if m <= 0 || uint64(len(entry)-m) < n {
		return -1, nil, vals, fmt.Errorf("%w: child index entry", row.ErrCorrupt)
	}
	joinKey = entry[m : m+int(n)]
	vals, err = row.DecodeRow(vals[:0], entry[m+int(n):])
	return partition, joinKey, vals, err
}

// AppendParentIndexEntry appends a parent-index entry to dst: the source
// partition of the parent's events and its last complete row.
func AppendParentIndexEntry(dst []byte, partition int32, vals []row.Value) []byte {
	dst = binary.AppendUvarint(append(dst, indexTag), uint64(uint32(partition)))
	return row.AppendRow(dst, vals)
}

// DecodeParentIndexEntry decodes an entry made by AppendParentIndexEntry,
// appending the row to vals[:0] (partition -1 for cdcjoin ≤ wave 1).
func DecodeParentIndexEntry(entry []byte, vals []row.Value) (int32, []row.Value, error) {
	partition, entry, err := indexPartition(entry)
	if err != nil {
		return -1, vals, err
	}
	vals, err = row.DecodeRow(vals[:0], entry)
	return partition, vals, err
}

// indexPartition strips an index entry's tag and partition.
func indexPartition(entry []byte) (int32, []byte, error) {
	if len(entry) == 0 || entry[0] != indexTag {
		return -1, entry, nil
	}
	p, n := binary.Uvarint(entry[1:])
	if n <= 0 || p > 1<<31-1 {
		return -1, nil, fmt.Errorf("%w: index entry partition", row.ErrCorrupt)
	}
	return int32(p), entry[1+n:], nil
}

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
}

// ChildRecord is the join's stored child row (an entry of its map state).
type ChildRecord struct {
	Version uint64
	Row     []row.Value
}

// Stored encodings (the State's values):
//
//	parent: uvarint version, uvarint pad version, row.AppendRow(row)
//	child:  uvarint version, row.AppendRow(row)
//	child index entry: uvarint len(joinKey), joinKey, row.AppendRow(row)
//	parent index entry: row.AppendRow(row)

// AppendParent appends rec's stored encoding to dst.
func AppendParent(dst []byte, rec *ParentRecord) []byte {
	dst = binary.AppendUvarint(dst, rec.Version)
	dst = binary.AppendUvarint(dst, rec.PadVersion)
	return row.AppendRow(dst, rec.Row)
}

// DecodeParent decodes a stored parent into rec, reusing rec.Row.
func DecodeParent(v []byte, rec *ParentRecord) error {
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

// AppendIndexEntry appends a child-index entry to dst: the join key the
// child lives under and its projected row (complete, placeholders
// resolved), so that a later update carrying TOAST placeholders can be
// completed even when it moves the child to another join key.
func AppendIndexEntry(dst, joinKey []byte, vals []row.Value) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(joinKey)))
	dst = append(dst, joinKey...)
	return row.AppendRow(dst, vals)
}

// DecodeIndexEntry splits an entry made by AppendIndexEntry; the row is
// appended to vals[:0] and joinKey aliases entry.
func DecodeIndexEntry(entry []byte, vals []row.Value) (joinKey []byte, _ []row.Value, err error) {
	n, m := binary.Uvarint(entry)
	if m <= 0 || uint64(len(entry)-m) < n {
		return nil, vals, fmt.Errorf("%w: child index entry", row.ErrCorrupt)
	}
	joinKey = entry[m : m+int(n)]
	vals, err = row.DecodeRow(vals[:0], entry[m+int(n):])
	return joinKey, vals, err
}

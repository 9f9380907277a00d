package keyedlog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
)

// Records the hot-key router (package skew) writes into the keyed log next
// to the keying stage's:
//
//	key   'F' side salt(2) joinKey [childKey]    a forwarded op for replica (joinKey, salt)
//	      'L' joinKey                            a layout change of joinKey (own partition)
//	      'A' salt(2) joinKey                    a replica's release confirmation (to joinKey's partition)
//	value forward: nil (a delete: a tombstone), 0x01 row (an input's row),
//	      0x02 pad version row (a copy: a row and, with the header's
//	      version, the versions it was last emitted with), 0x03 (a release)
//	      layout: 0x01 op (LayoutSalt or LayoutCool)
//	      ack: 0x01 origin(8) (the release's)
//	header ForwardHeader (forwards): mode, version, origin offset, sub
//
// A forward's key is unique per replica row, so log compaction keeps each
// replica row's latest state (deletes are tombstones), and a replica
// rebuilt from the compacted topic is the replica (like keyed records are
// the join state's changelog). A release shares its replica's parent key
// only in 'F' … salt joinKey with side 'R', so it does not hide the
// parent. A layout record's key is the join key: the latest layout of
// each key survives compaction; an ack's is the replica.
const (
	recForward = 'F'
	recLayout  = 'L'
	recAck     = 'A'
	valRow     = 0x01
	valLoad    = 0x02
	valRelease = 0x03
)

// ForwardHeader is the Kafka header key of a forwarded record.
const ForwardHeader = "cdcjoin-fwd"

// Mode is what a forward asks of a replica. The values are the wire's (a
// forward's header) and package skew's op kinds.
type Mode uint8

// Forward modes.
const (
	// ModeApply applies the row's change with the forward's version,
	// emitting the replica's rows.
	ModeApply Mode = 1
	// ModeCopy loads the row into the replica as is, with the versions it
	// was last emitted with, or deletes it there, emitting nothing.
	ModeCopy Mode = 2
	// ModeRelease asks the replica to confirm (an ack) once everything
	// forwarded to it before is done.
	ModeRelease Mode = 5
)

// LayoutOp is a layout change of a hot key: salting or cooling. The values
// are the wire's and package skew's op kinds.
type LayoutOp uint8

// Layout changes.
const (
	LayoutSalt LayoutOp = 3
	LayoutCool LayoutOp = 4
)

// Forward is one op sent by a hot key's partition to one of its replicas.
type Forward struct {
	// Mode is ModeApply (emit), ModeCopy or ModeRelease.
	Mode Mode
	// Side is the row's table; JoinKey and ChildKey (child side) name the
	// row; Salt the replica.
	Side     row.Side
	JoinKey  []byte
	ChildKey []byte
	Salt     uint16
	// Delete: the row is deleted; else Row is its new content.
	Delete bool
	Row    []row.Value
	// Version is the version ModeApply applies with; for ModeCopy the
	// version the row was last changed at, and PadVersion (a parent) the
	// one its LEFT join padded row was last emitted with.
	Version, PadVersion uint64
	// Origin and Sub order the forwards of one source partition: the
	// offset of the record whose processing made the forward, and its
	// number among the forwards made then. A replica drops a forward not
	// after the last one it applied.
	Origin int64
	Sub    uint32
}

// AppendForwardKey appends f's record key to dst.
func AppendForwardKey(dst []byte, f *Forward) []byte {
	side := byte('P')
	switch {
	case f.Mode == ModeRelease:
		side = 'R'
	case f.Side == row.Child:
		side = 'C'
	}
	dst = binary.BigEndian.AppendUint16(append(dst, recForward, side), f.Salt)
	dst = append(dst, f.JoinKey...)
	if f.Side == row.Child {
		dst = append(dst, f.ChildKey...)
	}
	return dst
}

// AppendForwardValue appends f's record value to dst; nil for a delete.
func AppendForwardValue(dst []byte, f *Forward) []byte {
	switch {
	case f.Delete:
		return nil
	case f.Mode == ModeCopy:
		dst = binary.AppendUvarint(append(dst, valLoad), f.PadVersion)
		return row.AppendRow(dst, f.Row)
	case f.Mode == ModeRelease:
		return append(dst, valRelease)
	}
	return row.AppendRow(append(dst, valRow), f.Row)
}

// AppendForwardHeader appends f's ForwardHeader value to dst.
func AppendForwardHeader(dst []byte, f *Forward) []byte {
	dst = append(dst, byte(f.Mode))
	dst = binary.BigEndian.AppendUint64(dst, f.Version)
	dst = binary.BigEndian.AppendUint64(dst, uint64(f.Origin))
	return binary.BigEndian.AppendUint32(dst, f.Sub)
}

// decodeForward parses a forwarded record into f, reusing f.Row; the byte
// slices alias key, value and header.
func decodeForward(spec *keyed.Spec, key, value, header []byte, f *Forward) error {
	bad := func(what string) error { return errors.New("forwarded record: " + what) }
	if len(key) < 4 {
		return bad("bad key")
	}
	if len(header) != 21 {
		return bad("missing or bad " + ForwardHeader + " header")
	}
	*f = Forward{Row: f.Row[:0], Mode: Mode(header[0]), Salt: binary.BigEndian.Uint16(key[2:4]),
		Version: binary.BigEndian.Uint64(header[1:9]), Origin: int64(binary.BigEndian.Uint64(header[9:17])),
		Sub: binary.BigEndian.Uint32(header[17:21])}
	switch f.Mode {
	case ModeApply, ModeCopy, ModeRelease:
	default:
		return bad(fmt.Sprintf("unknown mode %d", f.Mode))
	}
	rest := key[4:]
	switch key[1] {
	case 'P', 'R':
		f.Side, f.JoinKey = row.Parent, rest
	case 'C':
		f.Side = row.Child
		_, n, err := row.DecodeKey(nil, rest, len(spec.ParentKey))
		if err != nil {
			return fmt.Errorf("forwarded record: %w", err)
		}
		f.JoinKey, f.ChildKey = rest[:n], rest[n:]
	default:
		return bad("bad side")
	}
	switch {
	case f.Mode == ModeRelease:
		if key[1] != 'R' || len(value) != 1 || value[0] != valRelease {
			return bad("bad release")
		}
	case value == nil:
		f.Delete = true
	case len(value) > 0 && value[0] == valLoad && f.Mode == ModeCopy:
		pad, n := binary.Uvarint(value[1:])
		if n <= 0 {
			return bad("bad pad version")
		}
		var err error
		if f.Row, err = row.DecodeRow(f.Row, value[1+n:]); err != nil {
			return fmt.Errorf("forwarded record: %w", err)
		}
		f.PadVersion = pad
	case len(value) > 0 && value[0] == valRow && f.Mode != ModeCopy:
		var err error
		if f.Row, err = row.DecodeRow(f.Row, value[1:]); err != nil {
			return fmt.Errorf("forwarded record: %w", err)
		}
	default:
		return bad("bad value")
	}
	return nil
}

// AppendLayoutKey appends the record key of a layout change of joinKey.
func AppendLayoutKey(dst, joinKey []byte) []byte { return append(append(dst, recLayout), joinKey...) }

// LayoutValue returns the record value of a layout change.
func LayoutValue(op LayoutOp) []byte { return []byte{valRow, byte(op)} }

// decodeLayout parses a layout record; joinKey aliases key.
func decodeLayout(key, value []byte) (joinKey []byte, op LayoutOp, err error) {
	if len(key) < 2 || len(value) != 2 || value[0] != valRow {
		return nil, 0, errors.New("layout record: bad encoding")
	}
	op = LayoutOp(value[1])
	if op != LayoutSalt && op != LayoutCool {
		return nil, 0, fmt.Errorf("layout record: unknown op %d", op)
	}
	return key[1:], op, nil
}

// AppendAckKey appends the record key of replica (joinKey, salt)'s release
// confirmation.
func AppendAckKey(dst, joinKey []byte, salt uint16) []byte {
	return append(binary.BigEndian.AppendUint16(append(dst, recAck), salt), joinKey...)
}

// AckValue returns the value of a release confirmation of the release
// with origin.
func AckValue(origin int64) []byte {
	return binary.BigEndian.AppendUint64([]byte{valRow}, uint64(origin))
}

// decodeAck parses a release confirmation; joinKey aliases key.
func decodeAck(key, value []byte) (joinKey []byte, salt uint16, origin int64, err error) {
	if len(key) < 4 || len(value) != 9 || value[0] != valRow {
		return nil, 0, 0, errors.New("release confirmation record: bad encoding")
	}
	return key[3:], binary.BigEndian.Uint16(key[1:3]), int64(binary.BigEndian.Uint64(value[1:])), nil
}

package skew

import (
	"encoding/binary"
	"fmt"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
)

// Records the router writes into the keyed topic next to the keying
// stage's (package keyed's format):
//
//	key   'F' side salt(2) joinKey [childKey]    a forwarded op for replica (joinKey, salt)
//	      'L' joinKey                            a layout change of joinKey (own partition)
//	      'A' salt(2) joinKey                    a replica's release confirmation (to joinKey's partition)
//	value forward: nil (a delete: a tombstone), 0x01 row (an input's row),
//	      0x02 pad version row (a copy: a row and, with the header's
//	      version, the versions it was last emitted with), 0x03 (a release)
//	      layout: 0x01 op (OpSalt or OpCool)
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

// Forward is one op sent by a hot key's partition to one of its replicas.
type Forward struct {
	// Mode is OpApply (emit), OpCopy or OpRelease.
	Mode OpKind
	// Side is the row's table; JoinKey and ChildKey (child side) name the
	// row; Salt the replica.
	Side     row.Side
	JoinKey  []byte
	ChildKey []byte
	Salt     uint16
	// Delete: the row is deleted; else Row is its new content.
	Delete bool
	Row    []row.Value
	// Version is the version OpApply applies with; for OpCopy the
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

// RecordKind says which of the router's records a keyed-topic record is.
type RecordKind uint8

// Router record kinds.
const (
	NotRouter RecordKind = iota // package keyed's record
	ForwardRecord
	LayoutRecord
	AckRecord
)

// KindOf classifies a keyed-topic record by its key.
func KindOf(key []byte) RecordKind {
	if len(key) == 0 {
		return NotRouter
	}
	switch key[0] {
	case recForward:
		return ForwardRecord
	case recLayout:
		return LayoutRecord
	case recAck:
		return AckRecord
	}
	return NotRouter
}

// AppendForwardKey appends f's record key to dst.
func AppendForwardKey(dst []byte, f *Forward) []byte {
	side := byte('P')
	switch {
	case f.Mode == OpRelease:
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
	case f.Mode == OpCopy:
		dst = binary.AppendUvarint(append(dst, valLoad), f.PadVersion)
		return row.AppendRow(dst, f.Row)
	case f.Mode == OpRelease:
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

// DecodeForward parses a forwarded record into f, reusing f.Row; the byte
// slices alias key, value and header.
func DecodeForward(spec *keyed.Spec, key, value, header []byte, f *Forward) error {
	bad := func(what string) error { return fmt.Errorf("cdcjoin: forwarded record: %s", what) }
	if len(key) < 4 || key[0] != recForward {
		return bad("bad key")
	}
	if len(header) != 21 {
		return bad("missing or bad " + ForwardHeader + " header")
	}
	*f = Forward{Row: f.Row[:0], Mode: OpKind(header[0]), Salt: binary.BigEndian.Uint16(key[2:4]),
		Version: binary.BigEndian.Uint64(header[1:9]), Origin: int64(binary.BigEndian.Uint64(header[9:17])),
		Sub: binary.BigEndian.Uint32(header[17:21])}
	switch f.Mode {
	case OpApply, OpCopy, OpRelease:
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
			return fmt.Errorf("cdcjoin: forwarded record: %w", err)
		}
		f.JoinKey, f.ChildKey = rest[:n], rest[n:]
	default:
		return bad("bad side")
	}
	switch {
	case f.Mode == OpRelease:
		if key[1] != 'R' || len(value) != 1 || value[0] != valRelease {
			return bad("bad release")
		}
	case value == nil:
		f.Delete = true
	case len(value) > 0 && value[0] == valLoad && f.Mode == OpCopy:
		pad, n := binary.Uvarint(value[1:])
		if n <= 0 {
			return bad("bad pad version")
		}
		var err error
		if f.Row, err = row.DecodeRow(f.Row, value[1+n:]); err != nil {
			return fmt.Errorf("cdcjoin: forwarded record: %w", err)
		}
		f.PadVersion = pad
	case len(value) > 0 && value[0] == valRow && f.Mode != OpCopy:
		var err error
		if f.Row, err = row.DecodeRow(f.Row, value[1:]); err != nil {
			return fmt.Errorf("cdcjoin: forwarded record: %w", err)
		}
	default:
		return bad("bad value")
	}
	return nil
}

// AppendLayoutKey appends the record key of a layout change of joinKey.
func AppendLayoutKey(dst, joinKey []byte) []byte { return append(append(dst, recLayout), joinKey...) }

// LayoutValue returns the record value of a layout change (OpSalt, OpCool).
func LayoutValue(op OpKind) []byte { return []byte{valRow, byte(op)} }

// DecodeLayout parses a layout record; joinKey aliases key.
func DecodeLayout(key, value []byte) (joinKey []byte, op OpKind, err error) {
	if len(key) < 2 || key[0] != recLayout || len(value) != 2 || value[0] != valRow {
		return nil, 0, fmt.Errorf("cdcjoin: layout record: bad encoding")
	}
	op = OpKind(value[1])
	if op != OpSalt && op != OpCool {
		return nil, 0, fmt.Errorf("cdcjoin: layout record: unknown op %d", op)
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

// DecodeAck parses a release confirmation; joinKey aliases key.
func DecodeAck(key, value []byte) (joinKey []byte, salt uint16, origin int64, err error) {
	if len(key) < 4 || key[0] != recAck || len(value) != 9 || value[0] != valRow {
		return nil, 0, 0, fmt.Errorf("cdcjoin: release confirmation record: bad encoding")
	}
	return key[3:], binary.BigEndian.Uint16(key[1:3]), int64(binary.BigEndian.Uint64(value[1:])), nil
}

// SaltOf returns the salt of a child key among salts: FNV-1a 32 of the
// encoded key, modulo salts.
func SaltOf(childKey []byte, salts int) uint16 {
	h := uint32(2166136261)
	for _, c := range childKey {
		h ^= uint32(c)
		h *= 16777619
	}
	return uint16(h % uint32(salts))
}

// SaltPartition returns the keyed partition of joinKey's replica salt: the
// partitions after the key's own, in turn, so that up to n salts land on
// n different partitions (salt 0 on the key's own).
func SaltPartition(joinKey []byte, salt uint16, n int32) int32 {
	return (keyed.Partition(joinKey, n) + int32(salt)%n) % n
}

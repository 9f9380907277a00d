package skew

import (
	"encoding/binary"
	"fmt"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
)

// OpKind says what an Op does.
type OpKind uint8

// Op kinds.
const (
	// OpApply applies In with Version through the join, emitting.
	OpApply OpKind = iota + 1
	// OpApplySilent applies In with Version without emitting (a salted
	// replica's child input: the hot key's own partition emits its rows).
	OpApplySilent
	// OpCopy stores Record as the replica's parent (In.Side Parent) or the
	// child In.ChildKey (Side Child) as is, versions included, emitting
	// nothing: a child moved into a salted replica. Record nil deletes it.
	OpCopy
	// OpSalt and OpCool change the layout of the key (In.JoinKey): they
	// start or end its salted fan-out (see Router).
	OpSalt
	OpCool
)

// Op is one unit of work on one key. Ops of a key run in the order they
// were submitted; while the key has a task in progress (a fan-out done in
// chunks) they wait in the state.
type Op struct {
	Kind    OpKind
	In      keyed.Input
	Version uint64
	// Origin is the driver's position of the input that caused the op (a
	// keyed-topic offset); forwarded records carry it so that their target
	// drops duplicates.
	Origin int64
	// Record is an OpCopy's stored record (keyed.AppendParent /
	// AppendChild encoding).
	Record []byte
}

// AppendOp appends op's encoding to dst. In.Absent is not kept (a waiting
// op re-reads the state).
func AppendOp(dst []byte, op *Op) []byte {
	dst = append(dst, byte(op.Kind), byte(op.In.Kind), byte(op.In.Side))
	dst = binary.AppendUvarint(dst, op.Version)
	dst = binary.AppendVarint(dst, op.Origin)
	dst = appendBytes(dst, op.In.JoinKey)
	dst = appendBytes(dst, op.In.ChildKey)
	dst = appendBytes(dst, op.Record)
	if op.In.Row == nil {
		return append(dst, 0)
	}
	return row.AppendRow(append(dst, 1), op.In.Row)
}

// DecodeOp decodes an encoding made by AppendOp into op, reusing op.In.Row;
// the byte slices alias b.
func DecodeOp(b []byte, op *Op) error {
	bad := fmt.Errorf("%w: skew op", row.ErrCorrupt)
	if len(b) < 3 {
		return bad
	}
	rowBuf := op.In.Row[:0]
	*op = Op{Kind: OpKind(b[0])}
	op.In.Kind, op.In.Side = keyed.InputKind(b[1]), row.Side(b[2])
	b = b[3:]
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return bad
	}
	op.Version, b = v, b[n:]
	o, n := binary.Varint(b)
	if n <= 0 {
		return bad
	}
	op.Origin, b = o, b[n:]
	var ok bool
	if op.In.JoinKey, b, ok = readBytes(b); !ok {
		return bad
	}
	if op.In.ChildKey, b, ok = readBytes(b); !ok {
		return bad
	}
	if op.Record, b, ok = readBytes(b); !ok || len(b) < 1 {
		return bad
	}
	if b[0] == 1 {
		var err error
		if op.In.Row, err = row.DecodeRow(rowBuf, b[1:]); err != nil {
			return err
		}
	}
	return nil
}

// appendBytes appends uvarint(len(b)+1) and b; nil is uvarint 0.
func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return append(dst, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b))+1)
	return append(dst, b...)
}

func readBytes(b []byte) (v, rest []byte, ok bool) {
	l, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, b, false
	}
	b = b[n:]
	if l == 0 {
		return nil, b, true
	}
	if uint64(len(b)) < l-1 {
		return nil, b, false
	}
	return b[: l-1 : l-1], b[l-1:], true
}

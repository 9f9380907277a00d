package skew

import (
	"encoding/binary"
	"fmt"

	"github.com/cdcjoin/cdcjoin/internal/nilbytes"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
)

// OpKind says what an Op does. Its values are stored with waiting ops and
// are the keyed log's forward modes and layout changes
// (keyedlog.Mode, keyedlog.LayoutOp), so that a forwarded or read-back op
// keeps its kind.
type OpKind uint8

// Op kinds.
const (
	// OpApply applies In with Version through the join, emitting.
	OpApply = OpKind(keyedlog.ModeApply)
	// OpCopy loads a row into a salted replica as is, with the versions it
	// was last emitted with (In is a keyed.ParentLoad or ChildLoad), or
	// deletes it there (In is a ParentDelete or ChildDelete), emitting
	// nothing: a row moved into or out of a replica.
	OpCopy = OpKind(keyedlog.ModeCopy)
	// OpSalt and OpCool are layout changes of an own key (In.JoinKey)
	// read back from the log (see Router).
	OpSalt = OpKind(keyedlog.LayoutSalt)
	OpCool = OpKind(keyedlog.LayoutCool)
	// OpRelease asks a replica to confirm, once everything forwarded to
	// it before is done, that it emits nothing more (see Router).
	OpRelease = OpKind(keyedlog.ModeRelease)
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
}

// AppendOp appends op's encoding to dst: kind, input kind, side,
// partition known, varint partition, uvarint version, varint origin, join
// key, child key, uvarint load version and pad version, row. In.Absent is
// not kept (a waiting op re-reads the state).
func AppendOp(dst []byte, op *Op) []byte {
	known := byte(0)
	if op.In.PartitionKnown {
		known = 1
	}
	dst = append(dst, byte(op.Kind), byte(op.In.Kind), byte(op.In.Side), known)
	dst = binary.AppendVarint(dst, int64(op.In.Partition))
	dst = binary.AppendUvarint(dst, op.Version)
	dst = binary.AppendVarint(dst, op.Origin)
	dst = nilbytes.Append(dst, op.In.JoinKey)
	dst = nilbytes.Append(dst, op.In.ChildKey)
	dst = binary.AppendUvarint(dst, op.In.Version)
	dst = binary.AppendUvarint(dst, op.In.PadVersion)
	if op.In.Row == nil {
		return append(dst, 0)
	}
	return row.AppendRow(append(dst, 1), op.In.Row)
}

// DecodeOp decodes an encoding made by AppendOp into op, reusing op.In.Row;
// the byte slices alias b.
func DecodeOp(b []byte, op *Op) error {
	bad := fmt.Errorf("%w: skew op", row.ErrCorrupt)
	if len(b) < 4 {
		return bad
	}
	rowBuf := op.In.Row[:0]
	*op = Op{Kind: OpKind(b[0])}
	op.In.Kind, op.In.Side, op.In.PartitionKnown = keyed.InputKind(b[1]), row.Side(b[2]), b[3] == 1
	rd := newReader(b[4:])
	op.In.Partition = int32(rd.varint())
	op.Version = rd.uvarint()
	op.Origin = rd.varint()
	op.In.JoinKey = rd.bytes()
	op.In.ChildKey = rd.bytes()
	op.In.Version, op.In.PadVersion = rd.uvarint(), rd.uvarint()
	if b = rd.b; !rd.ok || len(b) < 1 {
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

// reader decodes a sequence of varints and byte strings; a decode error
// sticks (ok turns false) and later reads return zero values.
type reader struct {
	b  []byte
	ok bool
}

func newReader(b []byte) *reader { return &reader{b: b, ok: true} }

func (r *reader) uvarint() uint64 {
	if !r.ok {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.ok = false
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if !r.ok {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.ok = false
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	if !r.ok {
		return nil
	}
	v, rest, ok := nilbytes.Read(r.b)
	r.b, r.ok = rest, ok
	return v
}

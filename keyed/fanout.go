package keyed

import (
	"encoding/binary"
	"fmt"

	"github.com/cdcjoin/cdcjoin/row"
)

// FanOut is a parent input's fan-out in progress (see Join.Start): the rows
// of the children of JoinKey after After still have to be emitted (or, for
// a delete, retracted) with Version.
type FanOut struct {
	// Kind is ParentUpsert or ParentDelete.
	Kind    InputKind
	JoinKey []byte
	Version uint64
	// Had says a parent existed before the input (upsert): Old is set and
	// its rows are the previous values.
	Had bool
	// Old is the parent before the input (a delete retracts its rows).
	Old ParentRecord
	// New is the parent's new row (upsert).
	New []row.Value
	// After is the last child whose row was emitted (nil: none yet).
	After []byte
}

func (f *FanOut) clone() FanOut {
	c := *f
	c.JoinKey = append([]byte(nil), f.JoinKey...)
	c.Old.Row = append([]row.Value(nil), f.Old.Row...)
	c.New = append([]row.Value(nil), f.New...)
	if f.After != nil {
		c.After = append([]byte(nil), f.After...)
	}
	return c
}

// AppendFanOut appends f's encoding to dst:
//
//	kind, uvarint version, had, uvarint len(joinKey) joinKey,
//	uvarint len(after)+1 after (0: none), parent record Old, new row
func AppendFanOut(dst []byte, f *FanOut) []byte {
	had := byte(0)
	if f.Had {
		had = 1
	}
	dst = append(dst, byte(f.Kind))
	dst = binary.AppendUvarint(dst, f.Version)
	dst = append(dst, had)
	dst = binary.AppendUvarint(dst, uint64(len(f.JoinKey)))
	dst = append(dst, f.JoinKey...)
	if f.After == nil {
		dst = binary.AppendUvarint(dst, 0)
	} else {
		dst = binary.AppendUvarint(dst, uint64(len(f.After))+1)
		dst = append(dst, f.After...)
	}
	old := AppendParent(nil, &f.Old)
	dst = binary.AppendUvarint(dst, uint64(len(old)))
	dst = append(dst, old...)
	return row.AppendRow(dst, f.New)
}

// DecodeFanOut decodes an encoding made by AppendFanOut into f (which then
// owns copies of everything).
func DecodeFanOut(b []byte, f *FanOut) error {
	bad := func(what string) error { return fmt.Errorf("%w: fan-out %s", row.ErrCorrupt, what) }
	if len(b) < 1 {
		return bad("kind")
	}
	f.Kind = InputKind(b[0])
	if f.Kind != ParentUpsert && f.Kind != ParentDelete {
		return bad("kind")
	}
	b = b[1:]
	v, n := binary.Uvarint(b)
	if n <= 0 || len(b) < n+1 {
		return bad("version")
	}
	f.Version, f.Had, b = v, b[n] == 1, b[n+1:]
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return bad("join key")
	}
	f.JoinKey, b = append([]byte(nil), b[n:n+int(l)]...), b[n+int(l):]
	l, n = binary.Uvarint(b)
	if n <= 0 || (l > 0 && uint64(len(b)-n) < l-1) {
		return bad("cursor")
	}
	f.After = nil
	if l > 0 {
		f.After, b = append([]byte{}, b[n:n+int(l-1)]...), b[n+int(l-1):]
	} else {
		b = b[n:]
	}
	l, n = binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return bad("old parent")
	}
	f.Old.Row = nil
	if err := DecodeParent(b[n:n+int(l)], &f.Old); err != nil {
		return err
	}
	var err error
	f.New, err = row.DecodeRow(nil, b[n+int(l):])
	return err
}

// Package version defines the versions of emitted rows, shared by both
// drivers (engine for replay and bench, kafkarun for run).
//
// A version is epoch<<SeqBits | seq (40 bits of epoch, 24 of seq). Per output row key, versions strictly
// increase in processing order, and reprocessing the same input from the
// same committed state reproduces the same versions: ClickHouse's
// ReplacingMergeTree(_version) then always keeps the latest row and absorbs
// replays.
//
// seq comes from a position in an ordered input: a keyed partition's offset
// (run) or the count of keyed inputs applied (replay). The epoch is
// assigned by cdcjoin, never by hand: it starts at the wall-clock
// millisecond (since 2025-01-01 UTC) at which the input began, and an epoch
// marker
// raises it whenever positions stop being comparable — the keyed topic was
// recreated or repartitioned, rows moved between partitions, or `run`
// follows a `replay` into the same table. A raise always lands above every
// version given before it on that input (Clock.Raise), so versions keep
// increasing whatever the proposal; a proposal from the wall clock makes a
// later input's versions exceed an earlier input's (a `run` started after
// a `replay` was created). When seq would overflow (2^24-1 positions), the
// epoch advances by one on its own, deterministically: an input would have
// to number 16.7 million positions per millisecond for its epochs to run
// ahead of the wall clock.
//
// Before this scheme (cdcjoin ≤ wave 1) run used kafka.epoch<<48 |
// offset+1 and replay a counter; a Clock that has seen no marker keeps that
// legacy form (Legacy), and the first marker lifts it above all legacy
// versions.
package version

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

const (
	// SeqBits is the width of the position part of a version.
	SeqBits = 24
	// EpochBits is the width of the epoch part: epochs are milliseconds
	// since 2025-01-01 UTC, which lasts until 2059.
	EpochBits = 64 - SeqBits
	// seqSpan is how many positions one epoch numbers (seq 1..seqSpan).
	seqSpan = 1<<SeqBits - 1
	// epochZero is 2025-01-01T00:00:00Z in Unix milliseconds.
	epochZero   = 1735689600000
	legacyShift = 48
)

// Propose returns the epoch proposal for a new input starting at now: whole
// milliseconds since 2025-01-01 UTC (at least 1).
func Propose(now time.Time) uint64 {
	s := now.UnixMilli() - epochZero
	if s < 1 {
		s = 1
	}
	return uint64(s)
}

// Make returns the version epoch<<SeqBits | seq.
func Make(epoch, seq uint64) uint64 { return epoch<<SeqBits | seq&seqSpan }

// Epoch returns v's epoch part.
func Epoch(v uint64) uint64 { return v >> SeqBits }

// Clock numbers the positions of one ordered input. The zero Clock is the
// legacy clock of epoch 0 (version = position+1). A Clock is a small value:
// copy it to snapshot it, persist it with MarshalBinary next to the
// position it belongs to.
type Clock struct {
	marked bool   // a marker was applied: epoch/base are the current epoch
	epoch  uint64 // legacy epoch (unmarked) or current epoch (marked)
	base   int64  // position of the last marker (marked)
}

// Legacy returns the clock of an input that has seen no marker:
// version = epoch<<48 | position+1.
func Legacy(epoch uint64) Clock { return Clock{epoch: epoch} }

// Start returns a clock whose versions begin at epoch for positions at and
// after base.
func Start(epoch uint64, base int64) Clock { return Clock{marked: true, epoch: epoch, base: base} }

// At returns the version of position pos (pos ≥ the last marker's).
func (c Clock) At(pos int64) uint64 {
	if !c.marked {
		return c.epoch<<legacyShift | uint64(pos+1)
	}
	n := uint64(pos - c.base)
	return Make(c.epoch+n/seqSpan, n%seqSpan+1)
}

// Raise applies an epoch marker at position pos proposing epoch proposed:
// from pos on, versions use epoch max(proposed, e+1), where e is the epoch
// of position pos-1 (so they exceed every version given before pos).
func (c *Clock) Raise(pos int64, proposed uint64) {
	need := Epoch(c.At(max(pos-1, c.base))) + 1
	if !c.marked {
		need = Epoch(c.At(pos-1)) + 1
	}
	c.marked, c.epoch, c.base = true, max(proposed, need), pos
}

// Marked reports whether the clock has seen a marker (false: legacy).
func (c Clock) Marked() bool { return c.marked }

// String describes the clock for logs.
func (c Clock) String() string {
	if !c.marked {
		return fmt.Sprintf("legacy epoch %d", c.epoch)
	}
	return fmt.Sprintf("epoch %d from position %d", c.epoch, c.base)
}

// MarshalBinary encodes the clock (for the state it is committed with).
func (c Clock) MarshalBinary() ([]byte, error) {
	b := []byte{0}
	if c.marked {
		b[0] = 1
	}
	b = binary.AppendUvarint(b, c.epoch)
	return binary.AppendVarint(b, c.base), nil
}

// ErrBadClock is returned (wrapped) for bytes UnmarshalBinary cannot read.
var ErrBadClock = errors.New("cdcjoin: bad version clock encoding")

// UnmarshalBinary decodes a clock encoded by MarshalBinary.
func (c *Clock) UnmarshalBinary(b []byte) error {
	if len(b) < 1 || b[0] > 1 {
		return ErrBadClock
	}
	e, n := binary.Uvarint(b[1:])
	if n <= 0 {
		return ErrBadClock
	}
	base, m := binary.Varint(b[1+n:])
	if m <= 0 || 1+n+m != len(b) {
		return ErrBadClock
	}
	*c = Clock{marked: b[0] == 1, epoch: e, base: base}
	return nil
}

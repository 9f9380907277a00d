// Package keyedlog is the protocol of the keyed log (the internal,
// compacted "<name>.keyed" topic, and the in-process input of `replay`):
// every kind of record in it, their encodings, and Msg, the one message
// type a driver decodes them into and hands to a stage's operator. Out is
// where an operator's effects go during a driver's call.
//
// Records, by the first byte of their key:
//
//	'P' joinKey                          a parent row (keyed.ParentUpsert, ParentDelete, ParentLoad)
//	'C' joinKey childKey                 a child row (ChildUpsert, ChildDelete, ChildLoad)
//	'T' side                             a truncate of side ('P' or 'C')
//	'E' epoch(8) writer                  a version epoch marker (the driver's clock)
//	'F' side salt(2) joinKey [childKey]  a hot key's forward to one of its replicas (package skew)
//	'L' joinKey                          a hot key's layout change (salting, cooling)
//	'A' salt(2) joinKey                  a replica's release confirmation
//	'X' side time jk pk                  a time join's event (time.go)
//	'W' side partition writer            a time join's source partition watermark (time.go)
//	'S' bytes                            an operator's own record (KindStage: Msg.Key, Msg.Value)
//	'K' writer                           a step marker: budget for work in progress (KindStep: Msg.Rows)
//
// Values of 'P' and 'C': nil (a tombstone) for deletes; 0x01 row
// (row.AppendRow) for upserts; 0x03 the row without the columns the key
// carries (the parent key; the child's foreign key and key), for upserts
// whose key holds exactly those values (AppendCompactValue: what the keying
// stage writes; 0x01 records written before stay readable); 0x02 with the
// versions a row was last emitted with, then the row (load records, from a
// handover or a move). Values of 'T' and 'E': 0x01. 'F', 'L', 'A': see
// router.go. 'K': 0x01 uvarint(rows). 'S': the operator's (keyedlog does not look inside; an
// operator with several kinds of records tags them in its key bytes, and
// gives markers unique keys so that compaction keeps them).
//
// The key of a row record is unique per live source row, so log compaction
// keeps exactly the live rows (plus the latest truncate marker per side),
// and the topic doubles as the join state's changelog; markers have unique
// keys and survive compaction. Partition places a join key's records.
//
// Nothing here keeps state, starts goroutines or does I/O.
package keyedlog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/timejoin"
)

// Kind says what a Msg is.
type Kind uint8

// Message kinds.
const (
	// KindInput is a keyed input of the stage's own keys (Msg.In): a row's
	// change, a truncate or a load record.
	KindInput Kind = iota + 1
	// KindEpoch proposes a version epoch (Msg.Epoch). It changes no state: the
	// driver raises its version clock; operators never see one.
	KindEpoch
	// KindForward is a hot key's op for one of this partition's replicas
	// (Msg.Fwd).
	KindForward
	// KindLayout is a hot key's layout change, read back at its home
	// partition (Msg.JoinKey, Msg.Layout).
	KindLayout
	// KindAck is a replica's confirmation of a release round (Msg.JoinKey,
	// Msg.Salt, Msg.Origin), read at the key's home partition.
	KindAck
	// KindStage is an operator's own record ('S' key: Msg.Key, Msg.Value),
	// for operators whose inputs are not the keying stage's rows (the
	// stages of a multi-table plan, a time join's watermarks): written by
	// the operator's upstream (another stage's Out.Send, a keying stage of
	// its own), decoded by the operator.
	KindStage
	// KindStep is a step marker (Msg.Rows): a driver that steps its
	// operator's work in progress by input (a sink.Positioned) writes one
	// to its own partition when it has work and no input, and reading it
	// back advances the work by Rows; the log, not the time, decides the
	// steps. It changes no state; operators never see one.
	KindStep
)

func (k Kind) String() string {
	switch k {
	case KindInput:
		return "input"
	case KindEpoch:
		return "epoch"
	case KindForward:
		return "forward"
	case KindLayout:
		return "layout"
	case KindAck:
		return "ack"
	case KindTime:
		return "time"
	case KindWatermark:
		return "watermark"
	case KindStage:
		return "stage"
	case KindStep:
		return "step"
	}
	return "invalid"
}

// Msg is one message of a partition's keyed log: a decoded record (Decode)
// or, in process, an input a driver keyed itself. Its byte slices alias the
// record it was decoded from; a driver reuses one Msg for every message.
type Msg struct {
	Kind Kind
	// Pos is the message's position in its partition's log (the keyed
	// offset in `run`, the count of keyed inputs in `replay`); Version is
	// the version the changes a KindInput makes carry (the driver's clock at
	// Pos). The driver sets both; Decode leaves them alone.
	Pos     int64
	Version uint64

	// In is a KindInput's input.
	In keyed.Input
	// Epoch is a KindEpoch's proposed epoch.
	Epoch uint64
	// Fwd is a KindForward's op.
	Fwd Forward
	// JoinKey is the hot key of a KindLayout or a KindAck; Layout its change.
	JoinKey []byte
	Layout  LayoutOp
	// Salt and Origin name a KindAck's replica and release round.
	Salt   uint16
	Origin int64

	// Time and Source are a KindTime's record (time.go); Watermark a
	// KindWatermark's.
	Time      timejoin.Record
	Source    TimeSource
	Watermark Watermark
	// Rows is a KindStep's budget.
	Rows int
	// Key (without its 'S') and Value are a KindStage record's bytes
	// (Value nil for a tombstone).
	Key, Value []byte
}

// Decode parses a record of the keyed log into m (every field but Pos and
// Version), reusing m's row buffers. header is the value of the record's
// ForwardHeader header (nil when it has none). An error says what is wrong
// with the record; the caller names the record ("keyed record p/3@17: …").
func Decode(spec *keyed.Spec, key, value, header []byte, m *Msg) error {
	return decode(spec, key, value, header, m)
}

func decode(spec *keyed.Spec, key, value, header []byte, m *Msg) error {
	if len(key) > 0 && key[0] == recStage {
		m.Kind, m.Key, m.Value = KindStage, key[1:], value
		return nil
	}
	if len(key) < 2 {
		return fmt.Errorf("key too short (%d bytes)", len(key))
	}
	switch key[0] {
	case recParent, recChild, recTruncate:
		m.Kind = KindInput
		return decodeInput(spec, key, value, &m.In)
	case recEpoch:
		if len(key) < 9 {
			return fmt.Errorf("epoch marker key too short (%d bytes)", len(key))
		}
		m.Kind, m.Epoch = KindEpoch, binary.BigEndian.Uint64(key[1:9])
		return nil
	case recForward:
		m.Kind = KindForward
		return decodeForward(spec, key, value, header, &m.Fwd)
	case recLayout:
		m.Kind = KindLayout
		var err error
		m.JoinKey, m.Layout, err = decodeLayout(key, value)
		return err
	case recAck:
		m.Kind = KindAck
		var err error
		m.JoinKey, m.Salt, m.Origin, err = decodeAck(key, value)
		return err
	case recTime:
		m.Kind = KindTime
		return decodeTime(key, value, m)
	case recWatermark:
		m.Kind = KindWatermark
		return decodeWatermark(key, value, m)
	case recStep:
		if len(value) < 2 || value[0] != valueV1 {
			return fmt.Errorf("step marker value: want 0x01 uvarint")
		}
		n, k := binary.Uvarint(value[1:])
		if k <= 0 || n > 1<<31 {
			return fmt.Errorf("step marker rows: bad uvarint")
		}
		m.Kind, m.Rows = KindStep, int(n)
		return nil
	}
	return fmt.Errorf("unknown key type %q", key[0])
}

// recStage is the first byte of an operator's own record (KindStage).
const recStage = 'S'

// recStep is the first byte of a step marker (KindStep).
const recStep = 'K'

// AppendStepKey appends the record key of a step marker written by writer
// (unique per write, like an epoch marker's, so that compaction keeps it).
func AppendStepKey(dst []byte, writer string) []byte { return append(append(dst, recStep), writer...) }

// StepValue returns the value of a step marker buying rows.
func StepValue(rows int) []byte { return binary.AppendUvarint([]byte{valueV1}, uint64(rows)) }

// AppendStageKey appends the key of an operator's own record with the
// given bytes (KindStage) to dst.
func AppendStageKey(dst, key []byte) []byte { return append(append(dst, recStage), key...) }

// IsRouter reports whether a record key is one of the hot-key router's
// records ('F', 'L', 'A'), which only the router rebuilds (a bulk rebuild
// of a partition stops at the first).
func IsRouter(key []byte) bool {
	return len(key) > 0 && (key[0] == recForward || key[0] == recLayout || key[0] == recAck)
}

// Out is where an operator's effects go during one call of its driver.
// The driver makes it per batch and per kind of position (see Quiet); the
// operator passes it on and keeps nothing of it.
type Out struct {
	// Emit receives the changes of joined rows, in order: the driver's
	// sink buffer, or nothing where the sink holds them already.
	Emit keyed.Emit
	// Send writes records to the keyed log of the operator's own stage
	// (any of its partitions) in the driver's batch in progress: durable
	// before the batch's state commits, dropped with an aborted batch.
	// Nil where the driver has no log to write to: an operator that needs
	// to send fails with ErrNoSender.
	Send Sender
	// Next writes records to the keyed log of the next stage of a
	// multi-stage plan (any of its partitions; the operator picks them),
	// in the same batch and transaction as Send: durable before the
	// batch's state commits, dropped with an aborted batch. A crash between
	// the two sends them again: the next stage must converge on repeated
	// sequences. Nil where there is no next stage.
	Next Sender
	// Quiet: the messages of this call were applied before, by an earlier
	// owner of the partition that sent their records and committed (a
	// partition rebuilt below the group's committed offset). The operator
	// sends nothing, reports nothing, and does its work at once.
	Quiet bool
	// Reject takes a message the operator refuses as a bad record (a time
	// join's late record: reason "late", the record's time and the
	// watermark it was judged against), for the driver's bad-record policy.
	// Nil where the driver has none.
	Reject func(m *Msg, reason string, time, watermark int64) error
}

// Sender writes a record to a partition of the keyed log (see Out.Send).
// key, value and header (ForwardHeader's value, or nil) are only valid
// during the call.
type Sender interface {
	Send(partition int32, key, value, header []byte) error
}

// ErrNoSender is an operator's error when it has records to send and its
// driver gave it no Sender.
var ErrNoSender = errors.New("cdcjoin: the operator has records to send and its driver has no keyed log to send them to")

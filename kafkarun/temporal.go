package kafkarun

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/timejoin"
)

// A temporal join's right side (a CDC table) in run: its rows are keyed by
// their join key, which may be any column, so a row's changes reach
// different keyed partitions as its join key moves. The keying stage keeps,
// per right source partition, an index pk → (the keyed partitions it has
// ever sent an upsert of the row to; the time of the row's newest change
// and, if that was an upsert, its values) — the child index of
// keyingindex.go: a local pebble store mirrored to partition p of the
// compacted "<group>.child-index" topic in the keying transaction,
// restored from it when p is assigned — and sends every change of a row
// to every keyed partition the row has been in (temporalRouter.route):
//
//   - an upsert under key K goes to K's keyed partition and to every other
//     partition the row has been in. There its version is under K, which
//     their left rows' keys are not: a left row of the old key at or after
//     the change's time finds the row's newest version with time ≤ its own
//     under another key, and joins nothing (timejoin's temporal rule), so
//     a key move ends the old key's version. Each partition then has all
//     of the row's versions since the row first reached it, so it resolves
//     unchanged TOAST columns and orders changes of the same time exactly
//     as replay's single state does; the upsert that first brings the row
//     to a partition carries the values of the row's newest change in place
//     of its unchanged TOAST columns (the versions before it are
//     elsewhere);
//   - a delete (a key-only before image is enough) or an upsert with a NULL
//     join key goes to every partition the row has been in (none: to the
//     partition of its primary key, to be judged late or not and change
//     nothing);
//   - a redelivered change (after a connector restart, maybe older than the
//     row's newest) is routed the same way: its partitions have the row's
//     versions of its time.
//
// The partitions a row has been in are never forgotten, not even when the
// row is deleted: the join stage judges each record late or not in the
// keyed partition it reaches and refuses a late one, which the keying
// stage cannot know; a partition that refused a change still gets the
// row's next one. That costs one index entry per row ever seen and, for
// each change, one keyed record per partition the row has been in (one
// for a row that never moved); each of those partitions keeps the row's
// newest version below the watermark. A truncate goes to every keyed
// partition (the caller) and leaves the index alone.
//
// Where run can differ from replay (README: temporal joins in run): the
// records of one change are judged late apart, in each keyed partition it
// reaches; a change that is older than the row's newest one without being
// a redelivery (Debezium sends a row's changes in commit order) and brings
// the row to a partition for the first time leaves that partition without
// the row's later versions; the upsert that first brings a row to a
// partition after a truncate, or after a late (refused) change, takes its
// unchanged TOAST columns from the row as the index has it.

// temporalIndex is a right source partition's index (joinstate.Txn's
// child index; mirroredIndex mirrors its writes to the changelog).
type temporalIndex interface {
	ChildIndex(pk []byte) ([]byte, bool, error)
	SetChildIndex(pk, entry []byte) error
}

// temporalRouter routes a temporal join's right changes to keyed
// partitions. Not safe for concurrent use (the keying goroutine owns it).
type temporalRouter struct {
	parts int32 // keyed partitions
	// targetOnly sends an upsert only to its key's partition: the negative
	// control of the tests (a key move then leaves the old key's version
	// valid, and the output must differ).
	targetOnly bool

	ent   indexEntry // the row being routed
	entry []byte
	vals  []row.Value
	first timejoin.Record
}

// indexEntry is a row's entry in a temporal right index, encoded as
// uvarint(len(in)), in as uvarints, the newest time (8 bytes big-endian),
// then the newest change's row (row.AppendRow) if it is an upsert.
type indexEntry struct {
	in     []int32 // the keyed partitions the row has been in, sorted
	newest int64   // the time of its newest change
	row    []row.Value
	hasRow bool // the newest change is an upsert (with a join key)
}

func (e *indexEntry) append(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(e.in)))
	for _, p := range e.in {
		dst = binary.AppendUvarint(dst, uint64(p))
	}
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.newest))
	if e.hasRow {
		dst = row.AppendRow(dst, e.row)
	}
	return dst
}

func (e *indexEntry) parse(b []byte) error {
	bad := errors.New("cdcjoin: keying: corrupt temporal index entry")
	next := func() (int64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > 1<<31-1 {
			return 0, false
		}
		b = b[n:]
		return int64(v), true
	}
	n, ok := next()
	if !ok || n > int64(len(b)) {
		return bad
	}
	e.in = e.in[:0]
	for range n {
		p, ok := next()
		if !ok {
			return bad
		}
		e.in = append(e.in, int32(p))
	}
	if len(b) < 8 {
		return bad
	}
	e.newest, b = int64(binary.BigEndian.Uint64(b)), b[8:]
	e.hasRow = len(b) > 0
	var err error
	if e.row, err = row.DecodeRow(e.row[:0], b); err != nil {
		return fmt.Errorf("%w: %w", bad, err)
	}
	return nil
}

// route sends rec (a decoded change of the right side, not a truncate) to
// the keyed partitions that must see it (send, in partition order; the
// records passed are valid only during the call) and updates ix. It
// returns how many partitions other than an upsert's key's it sent it to.
func (tr *temporalRouter) route(ix temporalIndex, rec *timejoin.Record, send func(p int32, r *timejoin.Record) error) (others int, err error) {
	b, known, err := ix.ChildIndex(rec.PK)
	if err != nil {
		return 0, err
	}
	e := &tr.ent
	*e = indexEntry{in: e.in[:0], newest: timejoin.MinTime, row: e.row[:0]}
	if known {
		if err := e.parse(b); err != nil {
			return 0, err
		}
	}
	n := len(e.in)
	newest := rec.Time >= e.newest
	upsert := rec.Op == timejoin.Insert && !rec.KeyNull
	if !upsert {
		if len(e.in) == 0 {
			// No version anywhere: judged (late or not), changing nothing.
			err = send(keyedlog.Partition(rec.PK, tr.parts), rec)
		}
		for _, p := range e.in {
			if err == nil {
				err = send(p, rec)
			}
		}
		if err != nil || !known || !newest {
			return 0, err
		}
		e.newest, e.hasRow = rec.Time, false
		tr.entry = e.append(tr.entry[:0])
		return 0, ix.SetChildIndex(rec.PK, tr.entry)
	}
	// The row's values as of this change: unchanged TOAST columns from the
	// newest change's.
	tr.vals = append(tr.vals[:0], rec.Row...)
	toast := false
	for i, v := range tr.vals {
		if v.Kind == row.KindUnavailable && e.hasRow && i < len(e.row) {
			tr.vals[i], toast = e.row[i], true
		}
	}
	to := keyedlog.Partition(rec.Key, tr.parts)
	i, joined := slices.BinarySearch(e.in, to)
	if !joined {
		e.in = slices.Insert(e.in, i, to)
	}
	for _, p := range e.in {
		switch {
		case p == to && !joined && toast:
			// The row's first record here: the versions it would take
			// its unchanged TOAST columns from are elsewhere.
			tr.first = *rec
			tr.first.Row = tr.vals
			err = send(p, &tr.first)
		case p == to:
			err = send(p, rec)
		case !tr.targetOnly:
			err = send(p, rec)
			others++
		}
		if err != nil {
			return others, err
		}
	}
	if !newest && len(e.in) == n {
		return others, nil
	}
	if newest {
		e.newest, e.hasRow, e.row = rec.Time, true, append(e.row[:0], tr.vals...)
	}
	tr.entry = e.append(tr.entry[:0])
	return others, ix.SetChildIndex(rec.PK, tr.entry)
}

// mirroredIndex is a right source partition's index in a keying
// transaction: each write also goes to the index's changelog partition.
type mirroredIndex struct {
	t    *joinstate.Txn
	kt   *keyingTxn
	part int32
}

func (m mirroredIndex) ChildIndex(pk []byte) ([]byte, bool, error) { return m.t.ChildIndex(pk) }

func (m mirroredIndex) SetChildIndex(pk, entry []byte) error {
	if err := m.t.SetChildIndex(pk, entry); err != nil {
		return err
	}
	return m.kt.changelog(row.Child, m.part, pk, entry)
}

// temporalShape identifies the layout of a temporal join's right index
// (driver.MetaIndexShape): a local index of another shape is rebuilt from
// the changelog.
func temporalShape(cfg *config.Config) []byte {
	return fmt.Appendf(nil, "temporal-index-v1|%s|%v", cfg.TimeJoin.Right.Topic, cfg.TimeJoin.Right.Key)
}

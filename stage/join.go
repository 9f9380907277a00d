package stage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cdcjoin/cdcjoin/plan"
	"github.com/cdcjoin/cdcjoin/row"
)

// Side names a stage's input.
type Side byte

// Sides of a stage.
const (
	L Side = 'L'
	R Side = 'R'
)

func (s Side) other() Side {
	if s == L {
		return R
	}
	return L
}

// Unmatchable is the position key of a row that can never match.
const Unmatchable = 0xFE

// Input is one keyed change of a side's row: where the row lives now
// (Key: its join key, or []byte{Unmatchable}), its identity and, for an
// upsert, its row and whether it may match (its key has no NULL and its
// match condition is TRUE; a row at Unmatchable never matches).
//
// Absent, on an upsert, says the side holds no row with the identity at
// Key (a new row, or one that moved to Key or came back through the
// side's filter), so the Join skips reading it: the Feeder knows it from
// the change (no Prev, or Prev at another position or filtered out). A
// caller that does not know leaves it false (the Join reads).
type Input struct {
	Delete    bool
	Key       []byte
	ID        []byte
	Row       []row.Value
	Matchable bool
	Absent    bool
}

// Delta is one change of a row: a base row (Keyer), or an output row of a
// stage (Join, Materializer). Upsert: the row ID now has Row; Prev is its
// previous values when it existed (nil: a new row). Retract: ID no longer
// exists; Row are the values it was last emitted with. The slices are
// valid only during the emit call that received it.
type Delta struct {
	Op                   row.ChangeOp
	ID                   []byte
	Row, Prev            []row.Value
	Version, PrevVersion uint64
}

// Emit receives one Delta; an error aborts the call that emitted it.
type Emit func(*Delta) error

// Stats counts what a Join did.
type Stats struct {
	Inputs, Upserts, Retractions, NoOps uint64
	MaxFanOut                           uint64
}

// Join is one stage of a plan. Not safe for concurrent use (it holds
// scratch buffers); any number of Joins may share a plan.
type Join struct {
	st    *plan.Stage
	n     byte
	Stats Stats

	padL, padR bool
	nullID     [3][]byte // by Side: the identity of a padded side
	// unique by Side: the side is a table whose join key is its primary
	// key, so its one row at a key has the key as its identity: a point
	// read (the row cache's, absences included) instead of a scan.
	unique [3]bool

	old, orec  record
	key, key2  []byte
	outID      []byte
	out, prev  []row.Value
	enc        []byte
	delta      Delta
	fan        uint64
	scanPrefix []byte
	// resumeFromStart (tests: the negative control of ApplyChunked) makes
	// a continued fan-out start over instead of after its last row.
	resumeFromStart bool

	// verifyAbsent: read an Absent input's row anyway and fail if it
	// exists (the tests' check of the Feeders' hints).
	verifyAbsent bool
}

type record struct {
	matchable bool
	version   uint64
	row       []row.Value
}

// NewJoin returns the operator of stage st.
func NewJoin(st *plan.Stage) *Join {
	j := &Join{st: st, n: byte(st.N)}
	j.padL = st.Kind == plan.Left || st.Kind == plan.Full
	j.padR = st.Kind == plan.Right || st.Kind == plan.Full
	for _, s := range []Side{L, R} {
		nulls := make([]row.Value, len(j.side(s).ID))
		j.nullID[j.slot(s)] = row.AppendKey(nil, nulls)
		sd := j.side(s)
		j.unique[j.slot(s)] = sd.Stage == 0 && len(sd.Key) > 0 && slices.Equal(sd.Key, sd.ID)
	}
	return j
}

func (j *Join) slot(s Side) int {
	if s == L {
		return 1
	}
	return 2
}

func (j *Join) side(s Side) *plan.Side {
	if s == L {
		return &j.st.L
	}
	return &j.st.R
}

func (j *Join) pads(s Side) bool {
	if s == L {
		return j.padL
	}
	return j.padR
}

// group builds the group of side s's rows at key, 's' n 'r' key side, in
// dst.
func (j *Join) group(dst, key []byte, s Side) []byte {
	dst = append(append(dst[:0], 's', j.n, 'r'), key...)
	return append(dst, byte(s))
}

func (j *Join) padKey(dst, key []byte, s Side) []byte {
	return append(append(append(dst[:0], 's', j.n, 'p'), key...), byte(s))
}

func appendRecord(dst []byte, r *record) []byte {
	flags := byte(0)
	if r.matchable {
		flags = 1
	}
	dst = binary.AppendUvarint(append(dst, flags), r.version)
	return row.AppendRow(dst, r.row)
}

func decodeRecord(v []byte, r *record) error {
	if len(v) < 2 {
		return fmt.Errorf("%w: stage record", row.ErrCorrupt)
	}
	r.matchable = v[0]&1 == 1
	ver, n := binary.Uvarint(v[1:])
	if n <= 0 {
		return fmt.Errorf("%w: stage record version", row.ErrCorrupt)
	}
	r.version = ver
	var err error
	r.row, err = row.DecodeRow(r.row[:0], v[1+n:])
	return err
}

func (j *Join) read(kv State, key []byte, s Side, id []byte, r *record) (bool, error) {
	j.key = j.group(j.key, key, s)
	v, ok, err := kv.Row(j.key, id)
	if !ok || err != nil {
		return false, err
	}
	return true, decodeRecord(v, r)
}

func (j *Join) padEpoch(kv State, key []byte, s Side) (uint64, error) {
	j.key2 = j.padKey(j.key2, key, s)
	v, ok, err := kv.Value(j.key2)
	if !ok || err != nil {
		return 0, err
	}
	x, n := binary.Uvarint(v)
	if n <= 0 {
		return 0, fmt.Errorf("%w: stage pad epoch", row.ErrCorrupt)
	}
	return x, nil
}

func (j *Join) setPadEpoch(kv State, key []byte, s Side, v uint64) error {
	j.key2 = j.padKey(j.key2, key, s)
	return kv.PutValue(j.key2, binary.AppendUvarint(nil, v))
}

// anyMatchable reports whether side s has a matchable row at key other
// than except.
func (j *Join) anyMatchable(kv State, key []byte, s Side, except []byte) (bool, error) {
	if key[0] == Unmatchable {
		return false, nil
	}
	if j.unique[j.slot(s)] {
		v, ok, err := kv.Row(j.group(nil, key, s), key)
		return ok && v[0]&1 == 1 && string(key) != string(except), err
	}
	found := false
	err := kv.Rows(j.group(nil, key, s), func(id, v []byte) error {
		if v[0]&1 == 1 && string(id) != string(except) {
			found = true
			return ErrStop
		}
		return nil
	})
	return found, err
}

// anyRow reports whether side s has any row at key.
func (j *Join) anyRow(kv State, key []byte, s Side) (bool, error) {
	if j.unique[j.slot(s)] {
		_, ok, err := kv.Row(j.group(nil, key, s), key)
		return ok, err
	}
	found := false
	err := kv.Rows(j.group(nil, key, s), func([]byte, []byte) error {
		found = true
		return ErrStop
	})
	return found, err
}

// eachMatchable streams side s's matchable rows at key, each decoded into
// j.orec with its identity (copied: fn may emit).
func (j *Join) eachMatchable(kv State, key []byte, s Side, fn func(id []byte) error) error {
	return j.eachMatchableAfter(kv, key, s, nil, fn)
}

// rowsAfter is the resumed scan a State may offer (keyedState does):
// group's rows whose id sorts after after (every row when after is nil).
type rowsAfter interface {
	RowsAfter(group, after []byte, fn func(id, value []byte) error) error
}

// eachMatchableAfter is eachMatchable over the rows whose identity sorts
// after after (every row when after is nil).
func (j *Join) eachMatchableAfter(kv State, key []byte, s Side, after []byte, fn func(id []byte) error) error {
	if key[0] == Unmatchable {
		return nil
	}
	if j.unique[j.slot(s)] {
		if after != nil && bytes.Compare(key, after) <= 0 {
			return nil
		}
		j.key2 = j.group(j.key2, key, s)
		v, ok, err := kv.Row(j.key2, key)
		if err != nil || !ok || v[0]&1 == 0 {
			return err
		}
		if err := decodeRecord(v, &j.orec); err != nil {
			return err
		}
		return fn(append([]byte(nil), key...))
	}
	each := func(oid, v []byte) error {
		if v[0]&1 == 0 {
			return nil
		}
		id := append([]byte(nil), oid...)
		if err := decodeRecord(v, &j.orec); err != nil {
			return err
		}
		return fn(id)
	}
	group := j.group(nil, key, s)
	if after == nil {
		return kv.Rows(group, each)
	}
	if ra, ok := kv.(rowsAfter); ok {
		return ra.RowsAfter(group, after, each)
	}
	return kv.Rows(group, func(oid, v []byte) error {
		if bytes.Compare(oid, after) <= 0 {
			return nil
		}
		return each(oid, v)
	})
}

// Apply applies one input of side s with version. Versions must increase
// from one call to the next on the same state.
func (j *Join) Apply(kv State, s Side, in *Input, version uint64, emit Emit) error {
	var c FanOut
	_, err := j.ApplyChunked(kv, s, in, version, &c, -1, emit)
	return err
}

// FanOut is where a stage input's fan-out done in chunks stands
// (ApplyChunked): the zero value is an input not started.
type FanOut struct {
	// Started: a chunk was done (the input is counted in Stats.Inputs).
	Started bool
	// After is the identity of the last row of the other side done (nil:
	// none yet), Exists whether the other side had a matchable row among
	// those done, Fan the changes emitted so far.
	After  []byte
	Exists bool
	Fan    uint64
}

// ApplyChunked applies one input of side s with version as Apply does,
// but emits at most about budget changes (budget < 0: no limit): the fan-out
// over the other side's rows at the input's key stops before the row that
// would start past the budget, with more true and c telling where it
// stands; calling it again with the same input, version and c continues
// it. The input's own row is written, and its padded row emitted, when
// the fan-out is done. Between the calls of one input the state must not
// change at the input's key (the driver holds the key's later inputs back,
// and finishes every fan-out before a Clear or Load), so each call re-reads
// what the first one read and a continued fan-out emits exactly what Apply
// would have, in the same order. A budget > 0 always makes progress.
func (j *Join) ApplyChunked(kv State, s Side, in *Input, version uint64, c *FanOut, budget int, emit Emit) (more bool, err error) {
	if !c.Started {
		j.Stats.Inputs++
		c.Started = true
	}
	j.fan = 0
	if in.Delete {
		more, err = j.delete(kv, s, in.Key, in.ID, version, c, budget, emit)
	} else {
		more, err = j.upsert(kv, s, in, version, c, budget, emit)
	}
	c.Fan += j.fan
	if err != nil || more {
		return more, err
	}
	if c.Fan == 0 {
		j.Stats.NoOps++
	}
	j.Stats.MaxFanOut = max(j.Stats.MaxFanOut, c.Fan)
	return false, nil
}

// chunkMatchable streams side s's matchable rows at key after c.After
// like eachMatchable, recording each row done in c, and stops (more)
// before a row once the call emitted budget changes (budget >= 0).
func (j *Join) chunkMatchable(kv State, key []byte, s Side, c *FanOut, budget int, fn func(id []byte) error) (more bool, err error) {
	after := c.After
	if j.resumeFromStart {
		after = nil
	}
	err = j.eachMatchableAfter(kv, key, s, after, func(id []byte) error {
		if budget >= 0 && j.fan >= uint64(budget) {
			more = true
			return ErrStop
		}
		c.Exists = true
		if err := fn(id); err != nil {
			return err
		}
		c.After = append(c.After[:0], id...)
		return nil
	})
	return more, stopOK(err)
}

func (j *Join) upsert(kv State, s Side, in *Input, v uint64, c *FanOut, budget int, emit Emit) (bool, error) {
	o := s.other()
	padS, padO := j.pads(s), j.pads(o)
	// An Absent input is not read, in every call of a chunked fan-out:
	// nothing at its key changes until the fan-out is done.
	var had bool
	var err error
	if !in.Absent || j.verifyAbsent {
		if had, err = j.read(kv, in.Key, s, in.ID, &j.old); err != nil {
			return false, err
		}
		if had && in.Absent {
			return false, fmt.Errorf("cdcjoin: stage %d: internal: an input of side %c marked absent has a row at its key", j.n, s)
		}
	}
	if had && j.old.matchable == in.Matchable && equalRows(j.old.row, in.Row) {
		return false, nil
	}
	if !had {
		j.old.row = j.old.row[:0]
	}
	oldM, newM := had && j.old.matchable, in.Matchable
	// others (another matchable row of s at the key) only matters when o
	// is padded: it decides whether o's rows start or stop being padded.
	var others bool
	if oldM != newM && padO {
		if others, err = j.anyMatchable(kv, in.Key, s, in.ID); err != nil {
			return false, err
		}
	}
	firstS := newM && !oldM && !others
	lastS := oldM && !newM && !others
	if newM || oldM {
		var padEpochO uint64
		epochRead := false
		more, err := j.chunkMatchable(kv, in.Key, o, c, budget, func(oid []byte) error {
			switch {
			case newM && oldM:
				return j.emitJoined(emit, s, row.Upsert, in.ID, in.Row, j.old.row, oid, in.Key, v, max(j.old.version, j.orec.version))
			case newM:
				if firstS && padO {
					if !epochRead {
						if padEpochO, err = j.padEpoch(kv, in.Key, o); err != nil {
							return err
						}
						epochRead = true
					}
					if err := j.emitPad(emit, o, row.Retract, oid, j.orec.row, nil, in.Key, v, max(j.orec.version, padEpochO)); err != nil {
						return err
					}
				}
				return j.emitJoined(emit, s, row.Upsert, in.ID, in.Row, nil, oid, in.Key, v, 0)
			default: // oldM: the row stops matching here
				if err := j.emitJoined(emit, s, row.Retract, in.ID, j.old.row, nil, oid, in.Key, v, max(j.old.version, j.orec.version)); err != nil {
					return err
				}
				if lastS && padO {
					return j.emitPad(emit, o, row.Upsert, oid, j.orec.row, nil, in.Key, v, 0)
				}
			}
			return nil
		})
		if err != nil || more {
			return more, err
		}
		if lastS && padO && c.Exists {
			if err := j.setPadEpoch(kv, in.Key, o, v); err != nil {
				return false, err
			}
		}
	}
	oExists := c.Exists
	if padS {
		before := had && !(oldM && oExists)
		after := !(newM && oExists)
		var prevVer uint64
		if before {
			prevVer = j.old.version
			if oldM {
				e, err := j.padEpoch(kv, in.Key, s)
				if err != nil {
					return false, err
				}
				prevVer = max(prevVer, e)
			}
		}
		switch {
		case before && after:
			err = j.emitPad(emit, s, row.Upsert, in.ID, in.Row, j.old.row, in.Key, v, prevVer)
		case before:
			err = j.emitPad(emit, s, row.Retract, in.ID, j.old.row, nil, in.Key, v, prevVer)
		case after:
			err = j.emitPad(emit, s, row.Upsert, in.ID, in.Row, nil, in.Key, v, 0)
		}
		if err != nil {
			return false, err
		}
	}
	if j.unique[j.slot(s)] && in.Key[0] != Unmatchable && string(in.Key) != string(in.ID) {
		return false, fmt.Errorf("cdcjoin: stage %d: internal: a row of side %c whose join key is its primary key has an identity other than its key", j.n, s)
	}
	j.enc = appendRecord(j.enc[:0], &record{matchable: newM, version: v, row: in.Row})
	j.key = j.group(j.key, in.Key, s)
	return false, kv.PutRow(j.key, in.ID, j.enc)
}

// delete deletes s's row id at key. The row is deleted when its fan-out
// is done (ApplyChunked re-reads it until then).
func (j *Join) delete(kv State, s Side, key, id []byte, v uint64, c *FanOut, budget int, emit Emit) (bool, error) {
	o := s.other()
	padS, padO := j.pads(s), j.pads(o)
	had, err := j.read(kv, key, s, id, &j.old)
	if err != nil || !had {
		return false, err
	}
	last := false // the last matchable row of s at key (only asked when o is padded)
	if j.old.matchable {
		if padO {
			others, err := j.anyMatchable(kv, key, s, id)
			if err != nil {
				return false, err
			}
			last = !others
		}
		more, err := j.chunkMatchable(kv, key, o, c, budget, func(oid []byte) error {
			if err := j.emitJoined(emit, s, row.Retract, id, j.old.row, nil, oid, key, v, max(j.old.version, j.orec.version)); err != nil {
				return err
			}
			if last && padO {
				return j.emitPad(emit, o, row.Upsert, oid, j.orec.row, nil, key, v, 0)
			}
			return nil
		})
		if err != nil || more {
			return more, err
		}
	}
	oExists := c.Exists
	j.key = j.group(j.key, key, s)
	if err := kv.DeleteRow(j.key, id); err != nil {
		return false, err
	}
	if last && padO && oExists {
		if err := j.setPadEpoch(kv, key, o, v); err != nil {
			return false, err
		}
	}
	if padS && !(j.old.matchable && oExists) {
		prevVer := j.old.version
		if j.old.matchable {
			e, err := j.padEpoch(kv, key, s)
			if err != nil {
				return false, err
			}
			prevVer = max(prevVer, e)
		}
		if err := j.emitPad(emit, s, row.Retract, id, j.old.row, nil, key, v, prevVer); err != nil {
			return false, err
		}
	}
	if padS && key[0] != Unmatchable {
		if any, err := j.anyRow(kv, key, s); err != nil {
			return false, err
		} else if !any {
			j.key2 = j.padKey(j.key2, key, s)
			return false, kv.DeleteValue(j.key2)
		}
	}
	return false, nil
}

// Clear deletes every row of side s (a truncate of its table), emitting
// what each delete would.
func (j *Join) Clear(kv State, s Side, version uint64, emit Emit) error {
	return j.scanRows(kv, func(key []byte, side Side, id, _ []byte) error {
		if side != s {
			return nil
		}
		_, err := j.delete(kv, s, key, id, version, &FanOut{}, -1, emit)
		return err
	})
}

// scanRows streams every row of the stage, its key, side and identity
// (copies) split from its state key, and its stored value.
func (j *Join) scanRows(kv State, fn func(key []byte, s Side, id, value []byte) error) error {
	prefix := []byte{'s', j.n, 'r'}
	nk := len(j.st.L.Key)
	return kv.ScanRows(prefix, func(k, v []byte) error {
		rest := k[len(prefix):]
		jl := 1
		if rest[0] != Unmatchable {
			_, n, err := row.DecodeKey(nil, rest, nk)
			if err != nil {
				return err
			}
			jl = n
		}
		if len(rest) <= jl {
			return fmt.Errorf("%w: stage row key", row.ErrCorrupt)
		}
		key := append([]byte(nil), rest[:jl]...)
		id := append([]byte(nil), rest[jl+1:]...)
		return fn(key, Side(rest[jl]), id, v)
	})
}

// emitJoined emits a change of the joined row of s's row (sid, srow, or
// sprev as its previous values) with the other side's row in j.orec (oid).
func (j *Join) emitJoined(emit Emit, s Side, op row.ChangeOp, sid []byte, srow, sprev []row.Value, oid, key []byte, v, prevVer uint64) error {
	lid, lrow, lprev, rid, rrow, rprev := sid, srow, sprev, oid, j.orec.row, j.orec.row
	if s == R {
		lid, lrow, lprev, rid, rrow, rprev = oid, j.orec.row, j.orec.row, sid, srow, sprev
	}
	j.out = j.build(j.out, lrow, rrow)
	var prev []row.Value
	if sprev != nil {
		j.prev = j.build(j.prev, lprev, rprev)
		prev = j.prev
	}
	j.outID = append(append(j.outID[:0], lid...), rid...)
	if j.st.TagJoined {
		j.outID = append(j.outID, key...)
	}
	return j.send(emit, op, j.outID, j.out, prev, v, prevVer)
}

// emitPad emits a change of the padded row of s's row.
func (j *Join) emitPad(emit Emit, s Side, op row.ChangeOp, sid []byte, srow, sprev []row.Value, key []byte, v, prevVer uint64) error {
	var prev []row.Value
	tag := j.st.TagPadL
	if s == L {
		j.out = j.build(j.out, srow, nil)
		if sprev != nil {
			j.prev = j.build(j.prev, sprev, nil)
			prev = j.prev
		}
		j.outID = append(append(j.outID[:0], sid...), j.nullID[j.slot(R)]...)
	} else {
		tag = j.st.TagPadR
		j.out = j.build(j.out, nil, srow)
		if sprev != nil {
			j.prev = j.build(j.prev, nil, sprev)
			prev = j.prev
		}
		j.outID = append(append(j.outID[:0], j.nullID[j.slot(L)]...), sid...)
	}
	if tag {
		if key[0] == Unmatchable {
			j.outID = append(j.outID, Unmatchable)
		} else {
			j.outID = append(j.outID, key...)
		}
	}
	return j.send(emit, op, j.outID, j.out, prev, v, prevVer)
}

func (j *Join) send(emit Emit, op row.ChangeOp, id []byte, vals, prev []row.Value, v, prevVer uint64) error {
	if op == row.Upsert {
		j.Stats.Upserts++
	} else {
		j.Stats.Retractions++
	}
	j.fan++
	j.delta = Delta{Op: op, ID: id, Row: vals, Prev: prev, Version: v, PrevVersion: prevVer}
	return emit(&j.delta)
}

// build fills dst with the output row of l and r (nil: padded).
func (j *Join) build(dst, l, r []row.Value) []row.Value {
	dst = dst[:0]
	for _, i := range j.st.OutL {
		if l == nil {
			dst = append(dst, row.Value{})
		} else {
			dst = append(dst, l[i])
		}
	}
	for _, i := range j.st.OutR {
		if r == nil {
			dst = append(dst, row.Value{})
		} else {
			dst = append(dst, r[i])
		}
	}
	return dst
}

func equalRows(a, b []row.Value) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

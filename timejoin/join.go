package timejoin

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/RaduBerinde/btreemap"

	"github.com/cdcjoin/cdcjoin/row"
)

// Op is what a record does.
type Op uint8

// Record operations.
const (
	// Insert is an event of an append-only side, or a CDC upsert (create,
	// snapshot read, update) of a temporal join's right side.
	Insert Op = iota + 1
	// Delete removes a temporal right row (its Key may be nil: the join
	// key is taken from state).
	Delete
	// Truncate deletes every temporal right row at Time.
	Truncate
)

// Record is one input of a Join.
type Record struct {
	Side      Side
	Partition int32 // the source partition (watermarks are per source partition)
	Op        Op
	// Time is the event time (µs).
	Time int64
	// Key is the encoded join key tuple (row.AppendKey); KeyNull says it
	// has a NULL column (such a row never matches). Unset for a Delete or
	// Truncate.
	Key     []byte
	KeyNull bool
	// PK identifies the row among its side's rows: redelivered records
	// (same side, key, time and PK) are duplicates; on a temporal right
	// side it is the table's primary key.
	PK []byte
	// Row is the side's projected row (Insert). KindUnavailable values (a
	// temporal right update's unchanged TOAST columns) keep the stored one.
	Row []row.Value
}

// Verdict is what Apply did with a record.
type Verdict uint8

// Verdicts.
const (
	Applied   Verdict = iota + 1
	Late              // time < W − AllowedLateness: not applied; a bad record for the caller
	Duplicate         // the same row is in state already: ignored
)

func (v Verdict) String() string {
	switch v {
	case Applied:
		return "applied"
	case Late:
		return "late"
	case Duplicate:
		return "duplicate"
	}
	return "invalid"
}

// Result is Apply's verdict with the watermark the record was judged
// against (W just before it).
type Result struct {
	Verdict   Verdict
	Watermark int64
}

// Emit receives one output row: a row.Change with Op row.Insert, Version
// its sequence number and Values the select list. The Change and its
// slices are reused after Emit returns. An error aborts the call.
type Emit func(*row.Change) error

// Options configure a Join beyond its Spec.
type Options struct {
	// IdleByDriver: partitions are idle only when the driver says so
	// (SetIdle; `run`, where idleness is wall time), not by event time.
	IdleByDriver bool
	// MemoryBytes bounds the in-memory mirror of the state that the Join
	// reads instead of the storage (memory.go): 0 means no bound; past the
	// bound, or with MemoryBytes < 0, reads go to the state.
	MemoryBytes int
}

// Stats counts what a Join did since New; the caller reads it.
type Stats struct {
	Records    uint64 // records given to Apply
	Late       uint64
	Duplicates uint64
	Pairs      uint64 // joined rows emitted
	Outer      uint64 // padded rows emitted
	Retired    uint64 // rows and versions removed from state
	Timers     uint64 // timers fired
}

// Join is a time join operator. Not safe for concurrent use; a Join
// holds its watermarks and counters in memory between Load and Save (call
// Load again after an aborted transaction).
type Join struct {
	spec  *Spec
	opts  Options
	Stats Stats

	wm      Watermarks
	seq     uint64 // output rows emitted so far (the last one's Version)
	changes uint64 // temporal right changes applied (version tie-break)
	timers  *btreemap.BTreeMap[string, struct{}]
	mem     *mirror // nil: reads go to the state
	loaded  bool

	change     row.Change
	out        []row.Value
	kvals      []row.Value // decodeRow's scratch
	rest       []row.Value
	lrow, rrow []row.Value
	key, key2  []byte
	val        []byte
	scratch    []byte
}

// New returns a Join for spec (which must be valid). Call Load before use.
func New(spec *Spec, opts Options) *Join {
	j := &Join{spec: spec, opts: opts, timers: newQueue()}
	j.wm = newWatermarks(spec.OutOfOrderness, j.idleTimeout())
	j.change.Op = row.Insert
	return j
}

func (j *Join) idleTimeout() int64 {
	if j.opts.IdleByDriver {
		return 0
	}
	return j.spec.IdleTimeout
}

// Spec returns the join's spec.
func (j *Join) Spec() *Spec { return j.spec }

// Load reads the watermarks and counters from st (a new state has none)
// and rebuilds the timer queue and the mirror from the rest: a scan of the
// whole state, which holds the rows inside the bound. Call it before the
// first Apply and after an aborted transaction.
func (j *Join) Load(st State) error {
	j.wm = newWatermarks(j.spec.OutOfOrderness, j.idleTimeout())
	j.seq, j.changes, j.timers, j.mem = 0, 0, newQueue(), nil
	if v, ok, err := st.Get(metaWatermarks); err != nil {
		return err
	} else if ok {
		if err := j.wm.unmarshal(v); err != nil {
			return err
		}
	}
	if v, ok, err := st.Get(metaCounters); err != nil {
		return err
	} else if ok {
		if len(v) != 16 {
			return fmt.Errorf("%w: counters", errCorrupt)
		}
		j.seq, j.changes = binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])
	}
	j.wm.dirty = false
	if j.opts.MemoryBytes >= 0 {
		j.mem = newMirror()
	}
	e := j.effective()
	err := st.Scan(nil, nil, func(k, v []byte) error {
		if j.mem != nil {
			if j.mem.put(k, v); j.opts.MemoryBytes > 0 && j.mem.bytes > j.opts.MemoryBytes {
				j.mem = nil
			}
		}
		return j.timersOf(k, v, e)
	})
	if err != nil {
		return err
	}
	j.loaded = true
	return nil
}

// timersOf puts the timers that entry (k, v) of the state implies and
// that are not due at E = e (those fired before the state was saved).
func (j *Join) timersOf(k, v []byte, e int64) error {
	if e == MaxTime || len(k) == 0 {
		return nil
	}
	put := func(fire int64, rest []byte) {
		if fire >= e {
			j.putTimer(nil, fire, rest)
		}
	}
	switch k[0] {
	case kRow:
		side, jk, t, _, err := parseRowKey(k[1:])
		if err != nil || len(v) < 1 {
			return fmt.Errorf("%w: row", errCorrupt)
		}
		switch j.spec.Kind {
		case Interval:
			b := j.spec.bound(side, t)
			if !j.spec.Join.keeps(side) || v[0]&fOuterDone != 0 {
				b = max(b, t)
			}
			put(b, k[1:])
		case Temporal:
			put(t, k[1:])
		case Window:
			for s := windowStart(t, j.spec.Slide); addTime(s, j.spec.Size) > t; s -= j.spec.Slide {
				put(addTime(s, j.spec.Size)-1, append([]byte{tWindow}, jk...))
				if s == MinTime {
					break
				}
			}
		}
	case kVersion:
		pk, rest, err := readBytes(k[1:])
		if err != nil || len(rest) != 16 {
			return fmt.Errorf("%w: version key", errCorrupt)
		}
		put(readTime(rest), append([]byte{tVersion}, pk...))
	}
	return nil
}

// state is what the Join reads and writes: the mirror over st, or st.
func (j *Join) state(st State) State {
	if j.mem != nil {
		return cached{j.mem, st}
	}
	return st
}

// Save writes the watermarks and counters to st (call before committing
// it).
func (j *Join) Save(st State) error {
	if j.wm.dirty {
		if err := st.Put(metaWatermarks, j.wm.appendBinary(j.scratch[:0])); err != nil {
			return err
		}
		j.wm.dirty = false
	}
	var c [16]byte
	binary.BigEndian.PutUint64(c[:], j.seq)
	binary.BigEndian.PutUint64(c[8:], j.changes)
	return st.Put(metaCounters, c[:])
}

// Watermark returns the join's watermark W.
func (j *Join) Watermark() int64 { return j.wm.w }

// Seq returns the number of rows emitted so far (the last row's Version).
func (j *Join) Seq() uint64 { return j.seq }

// Watermarks exposes the per-partition watermarks (metrics, tools).
func (j *Join) Watermarks() *Watermarks { return &j.wm }

// effective returns E = W − AllowedLateness.
func (j *Join) effective() int64 {
	if j.wm.end {
		return MaxTime
	}
	return addTime(j.wm.w, -j.spec.AllowedLateness)
}

var errStop = errors.New("stop")

// Apply judges, applies and observes one record, then fires the timers E
// has passed, emitting rows through emit (see the package documentation).
// A late record (Result.Verdict Late) changes nothing but its partition's
// watermark; the caller treats it as a bad record.
func (j *Join) Apply(st State, r *Record, emit Emit) (Result, error) {
	if !j.loaded {
		return Result{}, errors.New("cdcjoin: time join: Apply before Load")
	}
	j.Stats.Records++
	st = j.state(st)
	res := Result{Verdict: Applied, Watermark: j.wm.w}
	if r.Time < j.effective() {
		res.Verdict = Late
		j.Stats.Late++
	} else {
		var dup bool
		var err error
		switch {
		case j.spec.Kind == Temporal && r.Side == SideRight:
			err = j.applyVersion(st, r)
		case r.Op != Insert:
			err = fmt.Errorf("cdcjoin: time join: the %s side is append-only: %s", r.Side, opName(r.Op))
		default:
			dup, err = j.applyRow(st, r, emit)
		}
		if err != nil {
			return res, err
		}
		if dup {
			res.Verdict = Duplicate
			j.Stats.Duplicates++
		}
	}
	j.wm.observe(Source{r.Side, r.Partition}, r.Time)
	err := j.fire(st, emit)
	if j.mem != nil && j.opts.MemoryBytes > 0 && j.mem.bytes > j.opts.MemoryBytes {
		j.mem = nil // outgrew its bound: read the state from now on
	}
	return res, err
}

// Mirrored reports whether the Join reads its in-memory mirror of the
// state (it fits Options.MemoryBytes) rather than the state.
func (j *Join) Mirrored() bool { return j.mem != nil }

func opName(o Op) string {
	switch o {
	case Delete:
		return "a delete"
	case Truncate:
		return "a truncate"
	}
	return "an invalid op"
}

// Declare makes a source partition known before it has records: it holds
// the watermark back (at −∞ while it has none) until it has records or is
// idle.
func (j *Join) Declare(src Source) { j.wm.declare(src) }

// Advance records that src has reached event time t without a record (a
// watermark from upstream), makes it active and fires what E passed.
func (j *Join) Advance(st State, src Source, t int64, emit Emit) error {
	j.wm.observe(src, t)
	return j.fire(j.state(st), emit)
}

// SetIdle marks src idle or active (the driver's decision; a record makes
// it active too) and fires what E passed.
func (j *Join) SetIdle(st State, src Source, idle bool, emit Emit) error {
	j.wm.setIdle(src, idle)
	return j.fire(j.state(st), emit)
}

// EndOfInput moves W to +∞ for good and fires every timer: outer rows,
// temporal rows and windows are emitted, rows retired. Later records are
// all late.
func (j *Join) EndOfInput(st State, emit Emit) error {
	j.wm.endOfInput()
	return j.fire(j.state(st), emit)
}

// applyRow stores a row of an append-only side (interval, window, temporal
// left), joining it at once in an interval join.
func (j *Join) applyRow(st State, r *Record, emit Emit) (dup bool, err error) {
	rk := rowKey(j.key[:0], r.Side, r.Key, r.Time, r.PK)
	j.key = rk
	if _, ok, err := st.Get(rk); err != nil || ok {
		return ok, err
	}
	flags := byte(0)
	if r.KeyNull {
		flags |= fKeyNull
	}
	if j.spec.Kind == Interval && !r.KeyNull {
		matched, err := j.lookup(st, r, emit)
		if err != nil {
			return false, err
		}
		if matched {
			flags |= fMatched
		}
	}
	j.val = j.encodeRow(j.val[:0], flags, r.Side, r.Time, r.Row)
	rk = rowKey(j.key[:0], r.Side, r.Key, r.Time, r.PK)
	j.key = rk
	if err := st.Put(rk, j.val); err != nil {
		return false, err
	}
	switch j.spec.Kind {
	case Interval:
		f := j.spec.bound(r.Side, r.Time)
		if !j.spec.Join.keeps(r.Side) {
			f = max(f, r.Time)
		}
		return false, j.putTimer(st, f, rk[1:])
	case Temporal:
		return false, j.putTimer(st, r.Time, rk[1:])
	default: // Window: a close timer for every window the row is in
		for s := windowStart(r.Time, j.spec.Slide); addTime(s, j.spec.Size) > r.Time; s -= j.spec.Slide {
			if err := j.putTimer(st, addTime(s, j.spec.Size)-1, append([]byte{tWindow}, r.Key...)); err != nil {
				return false, err
			}
			if s == MinTime {
				break
			}
		}
		return false, nil
	}
}

// putTimer queues the timer (fire, rest) (st is unused: timers live in
// memory and are rebuilt by Load).
func (j *Join) putTimer(_ State, fire int64, rest []byte) error {
	k := append(appendTime(append(j.key2[:0], kTimer), fire), rest...)
	j.key2 = k
	j.timers.ReplaceOrInsert(string(k), struct{}{})
	return nil
}

// lookup emits the interval join's pairs of r with the other side's rows
// of its key within the bound, marking them matched where their outer row
// depends on it, and reports whether there was one.
func (j *Join) lookup(st State, r *Record, emit Emit) (bool, error) {
	other := r.Side.other()
	var lo, hi int64
	if r.Side == SideLeft {
		lo, hi = addTime(r.Time, j.spec.Lower), addTime(r.Time, j.spec.Upper)
	} else {
		lo, hi = addTime(r.Time, -j.spec.Upper), addTime(r.Time, -j.spec.Lower)
	}
	prefix := rowPrefix(nil, other, r.Key)
	track := j.spec.Join.keeps(other)
	matched := false
	err := st.Scan(timeBound(nil, prefix, lo, false), timeBound(nil, prefix, hi, true), func(k, v []byte) error {
		vals, err := j.decodeRow(j.rrow[:0], k[1:], v)
		if err != nil {
			return err
		}
		j.rrow = vals
		matched = true
		if r.Side == SideLeft {
			err = j.emitRow(r.Row, vals, 0, 0, emit)
		} else {
			err = j.emitRow(vals, r.Row, 0, 0, emit)
		}
		if err != nil {
			return err
		}
		j.Stats.Pairs++
		if track && v[0]&fMatched == 0 {
			nv := append(append(j.scratch[:0], v[0]|fMatched), v[1:]...)
			j.scratch = nv
			return st.Put(k, nv)
		}
		return nil
	})
	return matched, err
}

// emitRow emits an output row of left and right (either may be nil:
// padded), with the window [ws, we) for window columns.
func (j *Join) emitRow(left, right []row.Value, ws, we int64, emit Emit) error {
	out := j.out[:0]
	for _, c := range j.spec.Out {
		var v row.Value
		switch c.From {
		case FromLeft:
			if left != nil {
				v = left[c.Index]
			}
		case FromRight:
			if right != nil {
				v = right[c.Index]
			}
		case FromWindowStart:
			v = row.Timestamp(ws)
		case FromWindowEnd:
			v = row.Timestamp(we)
		}
		if v.Kind == row.KindUnavailable {
			v = row.Value{}
		}
		out = append(out, v)
	}
	j.out = out
	j.seq++
	j.change.Version, j.change.Values = j.seq, out
	return emit(&j.change)
}

// fire runs the timers E has passed, in (fire time, key) order, until
// none is left below E (a timer may queue another).
func (j *Join) fire(st State, emit Emit) error {
	e := j.effective()
	for {
		k, _, ok := j.timers.Min()
		if !ok {
			return nil
		}
		kb := unsafe.Slice(unsafe.StringData(k), len(k)) // read only; k stays alive
		f := readTime(kb[1:9])
		if f >= e && !(j.wm.end && f == MaxTime) {
			return nil
		}
		j.timers.Delete(k)
		j.Stats.Timers++
		if err := j.timer(st, f, e, kb[9:], emit); err != nil {
			return err
		}
	}
}

// timer runs one timer (its key after the fire time: kind byte, then the
// rest), fired at E = e. A row timer's key is its row's without the 'r'.
func (j *Join) timer(st State, fire, e int64, key []byte, emit Emit) error {
	switch key[0] {
	case byte(SideLeft), byte(SideRight):
		if j.spec.Kind == Temporal {
			return j.fireTemporal(st, key, emit)
		}
		return j.fireInterval(st, fire, e, key, emit)
	case tWindow:
		return j.closeWindow(st, fire+1, key[1:], emit)
	case tVersion:
		// As of the E that fired it: later timers (temporal left rows at
		// later times) may still need the versions up to then.
		return j.retireVersions(st, key[1:], addTime(fire, 1))
	}
	return fmt.Errorf("%w: timer kind %q", errCorrupt, key[0])
}

// rowOf reads the row stored under 'r'+rest into dst.
func (j *Join) rowOf(st State, rest []byte, dst []row.Value) (flags byte, vals []row.Value, ok bool, err error) {
	k := append(append(j.key[:0], kRow), rest...)
	j.key = k
	v, ok, err := st.Get(k)
	if err != nil || !ok {
		return 0, dst, false, err
	}
	vals, err = j.decodeRow(dst[:0], rest, v)
	if err != nil {
		return 0, dst, false, err
	}
	return v[0], vals, true, nil
}

// encodeRow appends a row's stored value: flags, then the row without
// what the row's key holds (fCompact: the join key columns; fTimeOut: the
// time column, when it is a timestamp equal to the record's time).
func (j *Join) encodeRow(dst []byte, flags byte, side Side, t int64, vals []row.Value) []byte {
	si := sideIndex(side)
	keyCols, timeCol := j.spec.KeyCols[si], j.spec.TimeCol[si]
	if len(keyCols) == 0 {
		return row.AppendRow(append(dst, flags), vals)
	}
	flags |= fCompact
	if timeCol >= 0 && timeCol < len(vals) && vals[timeCol].Kind == row.KindTimestamp && vals[timeCol].Int == t {
		flags |= fTimeOut
	}
	dst = append(dst, flags)
	for i := range vals {
		if slices.Contains(keyCols, i) || (flags&fTimeOut != 0 && i == timeCol) {
			continue
		}
		dst = row.AppendRowValue(dst, vals[i])
	}
	return dst
}

// decodeRow decodes a stored row (key: its state key after the 'r'; v:
// its value) into dst, putting back what encodeRow left out.
func (j *Join) decodeRow(dst []row.Value, key, v []byte) ([]row.Value, error) {
	if len(v) < 1 {
		return dst, fmt.Errorf("%w: row", errCorrupt)
	}
	if v[0]&fCompact == 0 {
		return row.DecodeRow(dst, v[1:])
	}
	side, jk, t, _, err := parseRowKey(key)
	if err != nil {
		return dst, err
	}
	si := sideIndex(side)
	keyCols, timeCol := j.spec.KeyCols[si], j.spec.TimeCol[si]
	kv, _, err := row.DecodeKey(j.kvals[:0], jk, len(keyCols))
	if err != nil {
		return dst, err
	}
	j.kvals = kv
	rest, err := row.DecodeRow(j.rest[:0], v[1:])
	if err != nil {
		return dst, err
	}
	j.rest = rest
	width := j.spec.LeftWidth
	if side == SideRight {
		width = j.spec.RightWidth
	}
	for i := 0; i < width; i++ {
		switch {
		case slices.Contains(keyCols, i):
			dst = append(dst, kv[slices.Index(keyCols, i)])
		case v[0]&fTimeOut != 0 && i == timeCol:
			dst = append(dst, row.Timestamp(t))
		default:
			if len(rest) == 0 {
				return dst, fmt.Errorf("%w: row has too few columns", errCorrupt)
			}
			dst, rest = append(dst, rest[0]), rest[1:]
		}
	}
	return dst, nil
}

func sideIndex(s Side) int {
	if s == SideLeft {
		return 0
	}
	return 1
}

// fireInterval emits an interval row's padded row when due, and retires it
// once E passed its own time too (else it waits for that, outer done).
func (j *Join) fireInterval(st State, fire, e int64, rest []byte, emit Emit) error {
	side, _, t, _, err := parseRowKey(rest)
	if err != nil {
		return err
	}
	flags, vals, ok, err := j.rowOf(st, rest, j.lrow)
	if err != nil || !ok {
		return err
	}
	j.lrow = vals
	b := j.spec.bound(side, t)
	if j.spec.Join.keeps(side) && flags&(fMatched|fOuterDone) == 0 && (b < e || j.wm.end) {
		if side == SideLeft {
			err = j.emitRow(vals, nil, 0, 0, emit)
		} else {
			err = j.emitRow(nil, vals, 0, 0, emit)
		}
		if err != nil {
			return err
		}
		j.Stats.Outer++
		flags |= fOuterDone
	}
	if until := max(b, t); until >= e && !j.wm.end {
		// Kept until E passes its own time: a redelivery of it is then
		// late, never joined twice.
		j.val = j.encodeRow(j.val[:0], flags&^(fCompact|fTimeOut), side, t, vals)
		if err := st.Put(append(append(j.key[:0], kRow), rest...), j.val); err != nil {
			return err
		}
		return j.putTimer(st, until, rest)
	}
	j.Stats.Retired++
	return st.Delete(append(append(j.key[:0], kRow), rest...))
}

// closeWindow emits the window of jk ending at end and retires the rows
// whose last window it was.
func (j *Join) closeWindow(st State, end int64, jk []byte, emit Emit) error {
	start := addTime(end, -j.spec.Size)
	lp, rp := rowPrefix(nil, SideLeft, jk), rowPrefix(nil, SideRight, jk)
	has := func(prefix []byte) (bool, bool, error) {
		found, null := false, false
		err := st.Scan(timeBound(nil, prefix, start, false), timeBound(nil, prefix, end-1, true), func(_, v []byte) error {
			found, null = true, len(v) > 0 && v[0]&fKeyNull != 0
			return errStop
		})
		if errors.Is(err, errStop) {
			err = nil
		}
		return found, null, err
	}
	hasL, null, err := has(lp)
	if err != nil {
		return err
	}
	hasR, nullR, err := has(rp)
	if err != nil {
		return err
	}
	null = null || nullR
	scan := func(prefix []byte, fn func(vals []row.Value) error, dst *[]row.Value) error {
		return st.Scan(timeBound(nil, prefix, start, false), timeBound(nil, prefix, end-1, true), func(k, v []byte) error {
			vals, err := j.decodeRow((*dst)[:0], k[1:], v)
			if err != nil {
				return err
			}
			*dst = vals
			return fn(vals)
		})
	}
	switch {
	case hasL && hasR && !null:
		err = scan(lp, func(l []row.Value) error {
			return scan(rp, func(r []row.Value) error {
				j.Stats.Pairs++
				return j.emitRow(l, r, start, end, emit)
			}, &j.rrow)
		}, &j.lrow)
	default:
		for _, s := range []Side{SideLeft, SideRight} {
			if !j.spec.Join.keeps(s) {
				continue
			}
			p, dst := lp, &j.lrow
			if s == SideRight {
				p, dst = rp, &j.rrow
			}
			err = scan(p, func(vals []row.Value) error {
				j.Stats.Outer++
				if s == SideLeft {
					return j.emitRow(vals, nil, start, end, emit)
				}
				return j.emitRow(nil, vals, start, end, emit)
			}, dst)
			if err != nil {
				break
			}
		}
	}
	if err != nil {
		return err
	}
	// The rows of [start, start+slide) were in no later window.
	for _, p := range [][]byte{lp, rp} {
		err := st.Scan(timeBound(nil, p, start, false), timeBound(nil, p, addTime(start, j.spec.Slide)-1, true), func(k, _ []byte) error {
			j.Stats.Retired++
			return st.Delete(k)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// fireTemporal emits a temporal left row with the right rows valid at its
// time, and retires it.
func (j *Join) fireTemporal(st State, rest []byte, emit Emit) error {
	_, jk, t, _, err := parseRowKey(rest)
	if err != nil {
		return err
	}
	flags, vals, ok, err := j.rowOf(st, rest, j.lrow)
	if err != nil || !ok {
		return err
	}
	j.lrow = vals
	matched := false
	if flags&fKeyNull == 0 {
		// Every right pk that had a version under jk: its newest version
		// with time ≤ t, if that is a row under jk.
		mp := memberPrefix(nil, jk)
		err = st.Scan(mp, successor(bytes.Clone(mp)), func(k, _ []byte) error {
			v, ok, err := j.versionAt(st, k[len(mp):], t)
			if err != nil || !ok || v.deleted || !bytes.Equal(v.jk, jk) {
				return err
			}
			r, err := row.DecodeRow(j.rrow[:0], v.row)
			if err != nil {
				return err
			}
			j.rrow = r
			matched = true
			j.Stats.Pairs++
			return j.emitRow(vals, r, 0, 0, emit)
		})
		if err != nil {
			return err
		}
	}
	if !matched && j.spec.Join.keeps(SideLeft) {
		j.Stats.Outer++
		if err := j.emitRow(vals, nil, 0, 0, emit); err != nil {
			return err
		}
	}
	j.Stats.Retired++
	return st.Delete(append(append(j.key[:0], kRow), rest...))
}

// versionAt returns the newest version of pk with time ≤ t (ok false:
// none). Its slices are its own.
func (j *Join) versionAt(st State, pk []byte, t int64) (v version, ok bool, err error) {
	p := versionPrefix(nil, pk)
	var last []byte // the scan's slices are valid only during its callback
	err = st.Scan(p, timeBound(nil, p, t, true), func(_, val []byte) error {
		ok, last = true, append(last[:0], val...)
		return nil
	})
	if ok && err == nil {
		err = v.parse(last)
	}
	return v, ok, err
}

// applyVersion applies a change of the temporal join's right (CDC) side: a
// new version of its pk at r.Time.
func (j *Join) applyVersion(st State, r *Record) error {
	if r.Op == Truncate {
		// A delete of every row at r.Time.
		var pks [][]byte
		err := st.Scan([]byte{kVersion}, []byte{kVersion + 1}, func(k, _ []byte) error {
			pk, _, err := readBytes(k[1:])
			if err != nil {
				return err
			}
			if len(pks) == 0 || !bytes.Equal(pk, pks[len(pks)-1]) {
				pks = append(pks, bytes.Clone(pk))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, pk := range pks {
			d := Record{Side: SideRight, Partition: r.Partition, Op: Delete, Time: r.Time, PK: pk}
			if err := j.applyVersion(st, &d); err != nil {
				return err
			}
		}
		return nil
	}
	j.changes++
	v := version{deleted: true}
	switch r.Op {
	case Insert:
		vals := r.Row
		if hasUnavailable(vals) {
			// Unchanged TOAST columns: the values of the version valid
			// just before this change.
			prev, ok, err := j.versionAt(st, r.PK, r.Time)
			if err != nil {
				return err
			}
			var stored []row.Value
			if ok && !prev.deleted {
				if stored, err = row.DecodeRow(nil, prev.row); err != nil {
					return err
				}
			}
			vals = append([]row.Value(nil), vals...)
			for i := range vals {
				if vals[i].Kind == row.KindUnavailable && i < len(stored) {
					vals[i] = stored[i]
				}
			}
		}
		if !r.KeyNull {
			v = version{jk: r.Key, row: row.AppendRow(nil, vals)}
			if err := st.Put(memberKey(nil, r.Key, r.PK), nil); err != nil {
				return err
			}
		}
	case Delete:
	default:
		return fmt.Errorf("cdcjoin: time join: invalid op %d", r.Op)
	}
	if err := st.Put(versionKey(nil, r.PK, r.Time, j.changes), v.append(nil)); err != nil {
		return err
	}
	return j.putTimer(st, r.Time, append([]byte{tVersion}, r.PK...))
}

func hasUnavailable(vals []row.Value) bool {
	for _, v := range vals {
		if v.Kind == row.KindUnavailable {
			return true
		}
	}
	return false
}

// retireVersions deletes the versions of pk older than the newest one
// below e (and that one too when it is a delete), and pk's memberships of
// keys it has no version under any more.
func (j *Join) retireVersions(st State, pk []byte, e int64) error {
	p := versionPrefix(nil, pk)
	type entry struct {
		key []byte
		jk  []byte
		del bool
	}
	var below []entry         // versions with time < e, in order
	keep := map[string]bool{} // keys of the versions kept
	err := st.Scan(p, successor(bytes.Clone(p)), func(k, val []byte) error {
		if len(k) != len(p)+16 {
			return fmt.Errorf("%w: version key", errCorrupt)
		}
		var v version
		if err := v.parse(val); err != nil {
			return err
		}
		if readTime(k[len(p):]) < e {
			below = append(below, entry{bytes.Clone(k), bytes.Clone(v.jk), v.deleted})
		} else if !v.deleted {
			keep[string(v.jk)] = true
		}
		return nil
	})
	if err != nil || len(below) == 0 {
		return err
	}
	drop := below
	if last := below[len(below)-1]; !last.del {
		drop = below[:len(below)-1]
		keep[string(last.jk)] = true
	}
	gone := map[string]bool{}
	for _, d := range drop {
		j.Stats.Retired++
		if err := st.Delete(d.key); err != nil {
			return err
		}
		if !d.del && !keep[string(d.jk)] && !gone[string(d.jk)] {
			gone[string(d.jk)] = true
			if err := st.Delete(memberKey(nil, d.jk, pk)); err != nil {
				return err
			}
		}
	}
	return nil
}

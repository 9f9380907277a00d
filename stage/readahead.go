package stage

import (
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/plan"
	"github.com/cdcjoin/cdcjoin/row"
)

// ReadKind says how a ReadAhead hint is read.
type ReadKind byte

// Kinds of ReadAhead hints.
const (
	// ReadRow is a point read of a row: State.Row(group, id).
	ReadRow ReadKind = iota
	// ReadRows is a scan of a group: State.Rows(group, …).
	ReadRows
	// ReadValue is a point read of a value: State.Value(group) (id nil).
	ReadValue
)

// ReadAhead names the state entries a Pipeline will read for an event,
// computed from the event alone (and, in a second round, from the row the
// table's index held), so that a driver can read them ahead of applying
// the event, sorted and off the applying goroutine (engine.Warmer). Its
// hints are hints: the state is not consulted (a key that moved since, a
// filter that drops the row, an output that never reaches a later stage
// only cost a read), and entries the Pipeline reads through other rows'
// identities (a later stage's own record of a joined row) are not named.
//
// Named, for an event of FROM item t: the table's index entry (Index);
// for a row of the table (Row), at the item's stage: the row's own record
// at its join key, the other side's rows there (one point read when that
// side's identity is its join key, else a scan of the group), when a side
// is preserved its own side's rows there and the pad epochs; and, at each later stage whose join key on
// the left is made of the row's columns only (a domain's id in
// users ⋈ domains ⋈ dns_records), the other side's rows at that key and
// its pad epochs (and the joined row's own record there, when every side
// it joined is one row whose identity is its join key: a domain's user).
//
// Pure, like the operators; not safe for concurrent use, and independent
// of any Pipeline (one per goroutine).
//
// No driver uses it yet. Measured (bench/results/2026-12-03-session5-plans):
// the chain's hints read ahead on the decoding goroutine, as engine.Warmer
// does for the parent/child join, cost more CPU than they save (the
// Warmer cannot see the row cache, so it reads about four entries per
// entry it installs, and the scans stay on the applying goroutine).
type ReadAhead struct {
	p      *plan.Plan
	keyers []*Keyer
	joins  []*Join
	feedL  []*Feeder
	feedR  []*Feeder
	key    []byte
	other  []byte
	g      []byte
	id     []byte // a joined row's identity
	id2    []byte
	src    []int // per slot of a side's layout: its column of the base row, or -1
	next   []int
}

// NewReadAhead returns the ReadAhead of p.
func NewReadAhead(p *plan.Plan) *ReadAhead {
	ra := &ReadAhead{p: p}
	for t := range p.Tables {
		ra.keyers = append(ra.keyers, NewKeyer(p, t))
	}
	for i := range p.Stages {
		st := &p.Stages[i]
		ra.joins = append(ra.joins, NewJoin(st))
		ra.feedL = append(ra.feedL, NewFeeder(st, L))
		ra.feedR = append(ra.feedR, NewFeeder(st, R))
	}
	return ra
}

// Index returns the primary key ev names (its identity, appended to dst)
// and calls fn with the group and id of its index entry, a ReadRow whose
// value is the table's previous row (row.DecodeRow, after SplitIndexEntry
// where the Keyer records partitions: give it to Row in a second round); false when ev names no key (a truncate, a bad record).
func (ra *ReadAhead) Index(dst []byte, t int, ev *debezium.Event, fn func(kind ReadKind, group, id []byte)) ([]byte, bool) {
	k := ra.keyers[t]
	var pk []byte
	ok := false
	switch ev.Op {
	case debezium.OpCreate, debezium.OpRead, debezium.OpUpdate:
		if ev.After.Present {
			pk, ok = k.pkOf(dst, ev.After.Values)
		}
	case debezium.OpDelete:
		if ev.Before.Present {
			pk, ok = k.pkOf(dst, ev.Before.Values)
		}
		if !ok && ev.Key.Present {
			pk, ok = k.pkOf(dst, ev.Key.Values)
		}
	}
	if !ok {
		return pk, false
	}
	fn(ReadRow, k.indexGroup(), pk)
	return pk, true
}

// Row calls fn with what a row r of FROM item t (its projected values,
// identity pk) makes the Pipeline read (see ReadAhead), skipping what it
// reads at a stage where the row except (nil: none) lives at the same
// join key: give the new row in the first round and the indexed one, with
// the new row as except, in the second. The slices passed to fn are valid
// only during the call.
func (ra *ReadAhead) Row(t int, pk []byte, r, except []row.Value, fn func(kind ReadKind, group, id []byte)) {
	n, s := t, R
	if t == 0 {
		n, s = 1, L
	}
	f := ra.feedR[n-1]
	if s == L {
		f = ra.feedL[n-1]
	}
	var keep bool
	var err error
	if ra.key, keep, _, err = f.position(ra.key, r); err != nil || !keep {
		return
	}
	if except != nil {
		var ok bool
		if ra.other, ok, _, err = f.position(ra.other, except); err == nil && ok && string(ra.other) == string(ra.key) {
			return
		}
	}
	j := ra.joins[n-1]
	ra.g = j.group(ra.g, ra.key, s)
	fn(ReadRow, ra.g, pk)
	ra.atKey(j, s.other(), s, fn)
	// Later stages: the row's columns through each stage's output, while
	// the next stage's left key is made of them; and its joined row's
	// identity, while every other side it met is one row at its key whose
	// identity is the key.
	ra.src = ra.src[:0]
	for i := range r {
		ra.src = append(ra.src, i)
	}
	ra.id = append(ra.id[:0], pk...)
	known := true
	for ; n < len(ra.p.Stages); n++ {
		st := &ra.p.Stages[n-1]
		j := ra.joins[n-1]
		if known = known && ra.key[0] != Unmatchable && j.unique[j.slot(s.other())]; known {
			if s == L {
				ra.id = append(ra.id, ra.key...)
			} else {
				ra.id2 = append(append(ra.id2[:0], ra.key...), ra.id...)
				ra.id, ra.id2 = ra.id2, ra.id
			}
			if st.TagJoined {
				ra.id = append(ra.id, ra.key...)
			}
		}
		ra.next = ra.next[:0]
		for _, i := range st.OutL {
			ra.next = append(ra.next, pick(ra.src, i, s == L))
		}
		for _, i := range st.OutR {
			ra.next = append(ra.next, pick(ra.src, i, s == R))
		}
		ra.src, ra.next = ra.next, ra.src
		s = L
		ra.key = ra.key[:0]
		for _, i := range ra.p.Stages[n].L.Key {
			c := ra.src[i]
			if c < 0 || r[c].Kind == row.KindNull || r[c].Kind == row.KindUnavailable {
				return
			}
			ra.key = row.AppendKey(ra.key, r[c:c+1])
		}
		if known {
			ra.g = ra.joins[n].group(ra.g, ra.key, L)
			fn(ReadRow, ra.g, ra.id)
		}
		ra.atKey(ra.joins[n], R, L, fn)
	}
}

// pick is slot i of a side's layout through src when the side is the
// row's (mine), else -1.
func pick(src []int, i int, mine bool) int {
	if !mine || i >= len(src) {
		return -1
	}
	return src[i]
}

// atKey names what a row of side s at ra.key reads besides its own
// record: side o's rows, s's own rows when a side is preserved (whether
// it has others) and the pad epochs.
func (ra *ReadAhead) atKey(j *Join, o, s Side, fn func(kind ReadKind, group, id []byte)) {
	if ra.key[0] == Unmatchable {
		return
	}
	ra.g = j.group(ra.g, ra.key, o)
	if j.unique[j.slot(o)] {
		fn(ReadRow, ra.g, ra.key)
	} else {
		fn(ReadRows, ra.g, nil)
	}
	if (j.pads(o) || j.pads(s)) && !j.unique[j.slot(s)] {
		// whether s has other (matchable) rows at the key
		ra.g = j.group(ra.g, ra.key, s)
		fn(ReadRows, ra.g, nil)
	}
	for _, x := range [2]Side{o, s} {
		if j.pads(x) {
			ra.g = j.padKey(ra.g, ra.key, x)
			fn(ReadValue, ra.g, nil)
		}
	}
}

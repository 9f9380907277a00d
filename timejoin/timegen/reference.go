package timegen

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cdcjoin/cdcjoin/timejoin"
)

// A reference model of package timejoin's semantics, written as directly
// as possible from its documentation: watermarks recomputed from scratch
// for every record, then the SQL result over the non-late rows, restricted
// to what is due by the final watermark.

type (
	// Side is a side of the join.
	Side = timejoin.Side
	// Op is an event's operation.
	Op = timejoin.Op
)

func keeps(j timejoin.JoinType, s Side) bool {
	if s == timejoin.SideLeft {
		return j == timejoin.LeftOuter || j == timejoin.FullOuter
	}
	return j == timejoin.RightOuter || j == timejoin.FullOuter
}

// add is a + b saturating at the infinities (which stay put).
func add(a, b int64) int64 {
	switch {
	case a == timejoin.MinTime || a == timejoin.MaxTime:
		return a
	case b > 0 && a > timejoin.MaxTime-b:
		return timejoin.MaxTime
	case b < 0 && a < timejoin.MinTime-b:
		return timejoin.MinTime
	}
	return a + b
}

// lastWindow is the start of the last window of slide containing t.
func lastWindow(t, slide int64) int64 {
	s := t - t%slide
	if t%slide < 0 {
		s -= slide
	}
	return s
}

// Event is one generated record: Key "" is NULL; Val is the row's
// payload (a temporal right upsert's "?" is an unchanged TOAST value).
type Event struct {
	Side      Side
	Partition int32
	Op        Op
	Time      int64
	Key       string
	PK        string
	Val       string
}

func (r Event) String() string {
	return fmt.Sprintf("%s%d %s t=%d k=%q pk=%s v=%s", r.Side, r.Partition, opShort(r.Op), r.Time, r.Key, r.PK, r.Val)
}

func opShort(o Op) string {
	return map[Op]string{timejoin.Insert: "ins", timejoin.Delete: "del", timejoin.Truncate: "trunc"}[o]
}

// Late returns, per record, whether it is late, and the final E.
func Late(s *timejoin.Spec, recs []Event, idleByEvent bool, declared []timejoin.Source, end bool) ([]bool, int64) {
	type pst struct {
		max      int64
		lastSeen int64
	}
	parts := map[timejoin.Source]*pst{}
	order := []timejoin.Source{}
	gmax := timejoin.MinTime
	for _, d := range declared {
		parts[d] = &pst{max: timejoin.MinTime, lastSeen: timejoin.MinTime}
		order = append(order, d)
	}
	w := timejoin.MinTime
	late := make([]bool, len(recs))
	for i, r := range recs {
		e := add(w, -s.AllowedLateness)
		late[i] = r.Time < e
		src := timejoin.Source{Side: r.Side, Partition: r.Partition}
		p := parts[src]
		if p == nil {
			p = &pst{max: timejoin.MinTime, lastSeen: gmax}
			parts[src] = p
			order = append(order, src)
		}
		if gmax == timejoin.MinTime && r.Time > timejoin.MinTime {
			for _, q := range parts {
				q.lastSeen = r.Time
			}
		}
		p.max = max(p.max, r.Time)
		gmax = max(gmax, r.Time)
		p.lastSeen = gmax
		min, any := timejoin.MaxTime, false
		for _, src := range order {
			q := parts[src]
			if idleByEvent && s.IdleTimeout > 0 && q.lastSeen != timejoin.MinTime && gmax-q.lastSeen >= s.IdleTimeout {
				continue
			}
			any = true
			if m := add(q.max, -s.OutOfOrderness); m < min {
				min = m
			}
		}
		if any && min > w {
			w = min
		}
	}
	if end {
		return late, timejoin.MaxTime
	}
	return late, add(w, -s.AllowedLateness)
}

// Expected returns the expected output rows of the non-late events (as
// Text renders them, sorted), and the indexes of the late ones. The
// output columns are s.Out: a side's column is its event's Val (every
// row has that one column), window start and end.
func Expected(s *timejoin.Spec, recs []Event, idleByEvent bool, declared []timejoin.Source, end bool) (out []string, lateIdx []int) {
	late, e := Late(s, recs, idleByEvent, declared, end)
	for i := range recs {
		if late[i] {
			lateIdx = append(lateIdx, i)
		}
	}
	return SQL(s, recs, late, e), lateIdx
}

// SQL returns the rows of the join over the events that are not late
// (as Text renders them, sorted): the pairs, and the outer rows, window
// closes and temporal rows due by the effective clock e (W −
// allowed_lateness; timejoin.MaxTime: all). It is the result whatever
// decided lateness (Late's watermarks, or a driver's: `run`, where
// idleness is wall time), since a record that arrives after its partners'
// bound has passed is late.
func SQL(s *timejoin.Spec, recs []Event, late []bool, e int64) (out []string) {
	var ls, rs []Event
	seen := map[string]bool{}
	for i, r := range recs {
		if late[i] {
			continue
		}
		if s.Kind == timejoin.Temporal && r.Side == timejoin.SideRight {
			rs = append(rs, r)
			continue
		}
		id := fmt.Sprintf("%s|%s|%d|%s", r.Side, r.Key, r.Time, r.PK)
		if seen[id] {
			continue
		}
		seen[id] = true
		if r.Side == timejoin.SideLeft {
			ls = append(ls, r)
		} else {
			rs = append(rs, r)
		}
	}
	emit := func(l, r *Event, ws, we int64) {
		var b strings.Builder
		for _, c := range s.Out {
			switch c.From {
			case timejoin.FromLeft:
				if l == nil {
					b.WriteString("null,")
				} else {
					b.WriteString(l.Val + ",")
				}
			case timejoin.FromRight:
				if r == nil {
					b.WriteString("null,")
				} else {
					b.WriteString(r.Val + ",")
				}
			case timejoin.FromWindowStart:
				fmt.Fprintf(&b, "ws%d,", ws)
			case timejoin.FromWindowEnd:
				fmt.Fprintf(&b, "we%d,", we)
			}
		}
		out = append(out, b.String())
	}
	switch s.Kind {
	case timejoin.Interval:
		lm, rm := make([]bool, len(ls)), make([]bool, len(rs))
		for i := range ls {
			for k := range rs {
				l, r := &ls[i], &rs[k]
				if l.Key != "" && l.Key == r.Key && l.Time+s.Lower <= r.Time && r.Time <= l.Time+s.Upper {
					emit(l, r, 0, 0)
					lm[i], rm[k] = true, true
				}
			}
		}
		if keeps(s.Join, timejoin.SideLeft) {
			for i := range ls {
				if !lm[i] && add(ls[i].Time, s.Upper) < e {
					emit(&ls[i], nil, 0, 0)
				}
			}
		}
		if keeps(s.Join, timejoin.SideRight) {
			for k := range rs {
				if !rm[k] && add(rs[k].Time, -s.Lower) < e {
					emit(nil, &rs[k], 0, 0)
				}
			}
		}
	case timejoin.Window:
		type wk struct {
			key   string
			start int64
		}
		groups := map[wk][2][]*Event{}
		var keys []wk
		add := func(r *Event, side int) {
			for st := lastWindow(r.Time, s.Slide); st+s.Size > r.Time; st -= s.Slide {
				k := wk{r.Key, st}
				g, ok := groups[k]
				if !ok {
					keys = append(keys, k)
				}
				g[side] = append(g[side], r)
				groups[k] = g
			}
		}
		for i := range ls {
			add(&ls[i], 0)
		}
		for i := range rs {
			add(&rs[i], 1)
		}
		for _, k := range keys {
			end := k.start + s.Size
			if !(end-1 < e) {
				continue
			}
			g := groups[k]
			if len(g[0]) > 0 && len(g[1]) > 0 && k.key != "" {
				for _, l := range g[0] {
					for _, r := range g[1] {
						emit(l, r, k.start, end)
					}
				}
				continue
			}
			if keeps(s.Join, timejoin.SideLeft) {
				for _, l := range g[0] {
					emit(l, nil, k.start, end)
				}
			}
			if keeps(s.Join, timejoin.SideRight) {
				for _, r := range g[1] {
					emit(nil, r, k.start, end)
				}
			}
		}
	case timejoin.Temporal:
		// Every pk's versions, in arrival order: a truncate is a delete
		// of every pk seen so far; an upsert's "?" (TOAST) takes the value
		// of the version valid just before it, or NULL.
		type ver struct {
			t       int64
			present bool
			key     string
			r       *Event
		}
		hist := map[string][]ver{}
		var pks []string
		at := func(p string, t int64) *ver { // newest with time ≤ t, later arrival wins ties
			var best *ver
			for i := range hist[p] {
				if v := &hist[p][i]; v.t <= t && (best == nil || v.t >= best.t) {
					best = v
				}
			}
			return best
		}
		for k := range rs {
			r := &rs[k]
			switch r.Op {
			case timejoin.Truncate:
				for _, p := range pks {
					hist[p] = append(hist[p], ver{t: r.Time})
				}
			case timejoin.Delete:
				if hist[r.PK] == nil {
					pks = append(pks, r.PK)
				}
				hist[r.PK] = append(hist[r.PK], ver{t: r.Time})
			case timejoin.Insert:
				if hist[r.PK] == nil {
					pks = append(pks, r.PK)
				}
				vr := r
				if r.Val == "?" {
					cp := *r
					cp.Val = "null"
					if prev := at(r.PK, r.Time); prev != nil && prev.present {
						cp.Val = prev.r.Val
					}
					vr = &cp
				}
				hist[r.PK] = append(hist[r.PK], ver{t: r.Time, present: r.Key != "", key: r.Key, r: vr})
			}
		}
		sort.Strings(pks)
		for i := range ls {
			l := &ls[i]
			if !(l.Time < e) {
				continue
			}
			matched := false
			for _, p := range pks {
				if v := at(p, l.Time); v != nil && v.present && l.Key != "" && v.key == l.Key {
					emit(l, v.r, 0, 0)
					matched = true
				}
			}
			if !matched && keeps(s.Join, timejoin.SideLeft) {
				emit(l, nil, 0, 0)
			}
		}
	}
	sort.Strings(out)
	return out
}

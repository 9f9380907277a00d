package timejoin

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cdcjoin/cdcjoin/row"
)

// A reference model of the semantics, written as directly as possible
// from the package documentation: watermarks recomputed from scratch for
// every record, then the SQL result over the non-late rows, restricted to
// what is due by the final watermark.

// rec is a test record: key "" is NULL.
type rec struct {
	side Side
	part int32
	op   Op
	t    int64
	key  string
	pk   string
	val  string // the row's payload column
}

func (r rec) String() string {
	return fmt.Sprintf("%s%d %s t=%d k=%q pk=%s v=%s", r.side, r.part, opShort(r.op), r.t, r.key, r.pk, r.val)
}

func opShort(o Op) string { return map[Op]string{Insert: "ins", Delete: "del", Truncate: "trunc"}[o] }

// refLate returns, per record, whether it is late, and the final E.
func refLate(s *Spec, recs []rec, idleByEvent bool, declared []Source, end bool) ([]bool, int64) {
	type pst struct {
		max      int64
		lastSeen int64
	}
	parts := map[Source]*pst{}
	order := []Source{}
	gmax := MinTime
	for _, d := range declared {
		parts[d] = &pst{max: MinTime, lastSeen: MinTime}
		order = append(order, d)
	}
	w := MinTime
	late := make([]bool, len(recs))
	for i, r := range recs {
		e := addTime(w, -s.AllowedLateness)
		late[i] = r.t < e
		src := Source{r.side, r.part}
		p := parts[src]
		if p == nil {
			p = &pst{max: MinTime, lastSeen: gmax}
			parts[src] = p
			order = append(order, src)
		}
		if gmax == MinTime && r.t > MinTime {
			for _, q := range parts {
				q.lastSeen = r.t
			}
		}
		p.max = max(p.max, r.t)
		gmax = max(gmax, r.t)
		p.lastSeen = gmax
		min, any := MaxTime, false
		for _, src := range order {
			q := parts[src]
			if idleByEvent && s.IdleTimeout > 0 && q.lastSeen != MinTime && gmax-q.lastSeen >= s.IdleTimeout {
				continue
			}
			any = true
			if m := addTime(q.max, -s.OutOfOrderness); m < min {
				min = m
			}
		}
		if any && min > w {
			w = min
		}
	}
	if end {
		return late, MaxTime
	}
	return late, addTime(w, -s.AllowedLateness)
}

// refOutput returns the expected output rows (as text, sorted) of the
// non-late records, and the indexes of the late ones. Output columns:
// left.val, right.val (and window start/end for windows).
func refOutput(s *Spec, recs []rec, idleByEvent bool, declared []Source, end bool) (out []string, lateIdx []int) {
	late, e := refLate(s, recs, idleByEvent, declared, end)
	var ls, rs []rec
	seen := map[string]bool{}
	for i, r := range recs {
		if late[i] {
			lateIdx = append(lateIdx, i)
			continue
		}
		if s.Kind == Temporal && r.side == SideRight {
			rs = append(rs, r)
			continue
		}
		id := fmt.Sprintf("%s|%s|%d|%s", r.side, r.key, r.t, r.pk)
		if seen[id] {
			continue
		}
		seen[id] = true
		if r.side == SideLeft {
			ls = append(ls, r)
		} else {
			rs = append(rs, r)
		}
	}
	emit := func(l, r *rec, ws, we int64) {
		var b strings.Builder
		for _, c := range s.Out {
			switch c.From {
			case FromLeft:
				if l == nil {
					b.WriteString("null,")
				} else {
					b.WriteString(l.val + ",")
				}
			case FromRight:
				if r == nil {
					b.WriteString("null,")
				} else {
					b.WriteString(r.val + ",")
				}
			case FromWindowStart:
				fmt.Fprintf(&b, "ws%d,", ws)
			case FromWindowEnd:
				fmt.Fprintf(&b, "we%d,", we)
			}
		}
		out = append(out, b.String())
	}
	switch s.Kind {
	case Interval:
		lm, rm := make([]bool, len(ls)), make([]bool, len(rs))
		for i := range ls {
			for k := range rs {
				l, r := &ls[i], &rs[k]
				if l.key != "" && l.key == r.key && l.t+s.Lower <= r.t && r.t <= l.t+s.Upper {
					emit(l, r, 0, 0)
					lm[i], rm[k] = true, true
				}
			}
		}
		if s.Join.keeps(SideLeft) {
			for i := range ls {
				if !lm[i] && addTime(ls[i].t, s.Upper) < e {
					emit(&ls[i], nil, 0, 0)
				}
			}
		}
		if s.Join.keeps(SideRight) {
			for k := range rs {
				if !rm[k] && addTime(rs[k].t, -s.Lower) < e {
					emit(nil, &rs[k], 0, 0)
				}
			}
		}
	case Window:
		type wk struct {
			key   string
			start int64
		}
		groups := map[wk][2][]*rec{}
		var keys []wk
		add := func(r *rec, side int) {
			for st := windowStart(r.t, s.Slide); st+s.Size > r.t; st -= s.Slide {
				k := wk{r.key, st}
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
			if s.Join.keeps(SideLeft) {
				for _, l := range g[0] {
					emit(l, nil, k.start, end)
				}
			}
			if s.Join.keeps(SideRight) {
				for _, r := range g[1] {
					emit(nil, r, k.start, end)
				}
			}
		}
	case Temporal:
		// Every pk's versions, in arrival order: a truncate is a delete
		// of every pk seen so far; an upsert's "?" (TOAST) takes the value
		// of the version valid just before it, or NULL.
		type ver struct {
			t       int64
			present bool
			key     string
			r       *rec
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
			switch r.op {
			case Truncate:
				for _, p := range pks {
					hist[p] = append(hist[p], ver{t: r.t})
				}
			case Delete:
				if hist[r.pk] == nil {
					pks = append(pks, r.pk)
				}
				hist[r.pk] = append(hist[r.pk], ver{t: r.t})
			case Insert:
				if hist[r.pk] == nil {
					pks = append(pks, r.pk)
				}
				vr := r
				if r.val == "?" {
					cp := *r
					cp.val = "null"
					if prev := at(r.pk, r.t); prev != nil && prev.present {
						cp.val = prev.r.val
					}
					vr = &cp
				}
				hist[r.pk] = append(hist[r.pk], ver{t: r.t, present: r.key != "", key: r.key, r: vr})
			}
		}
		sort.Strings(pks)
		for i := range ls {
			l := &ls[i]
			if !(l.t < e) {
				continue
			}
			matched := false
			for _, p := range pks {
				if v := at(p, l.t); v != nil && v.present && l.key != "" && v.key == l.key {
					emit(l, v.r, 0, 0)
					matched = true
				}
			}
			if !matched && s.Join.keeps(SideLeft) {
				emit(l, nil, 0, 0)
			}
		}
	}
	sort.Strings(out)
	return out, lateIdx
}

func toRecord(r rec) *Record {
	out := &Record{Side: r.side, Partition: r.part, Op: r.op, Time: r.t, PK: []byte(r.pk)}
	if r.op == Insert {
		if r.key == "" {
			out.Key, out.KeyNull = row.AppendKey(nil, []row.Value{row.Null()}), true
		} else {
			out.Key = row.AppendKey(nil, []row.Value{row.String(r.key)})
		}
		v := row.String(r.val)
		if r.val == "?" {
			v = row.Unavailable()
		}
		out.Row = []row.Value{v}
	}
	return out
}

func outText(s *Spec, c *row.Change) string {
	var b strings.Builder
	for i, col := range s.Out {
		v := c.Values[i]
		switch {
		case v.Kind == row.KindNull:
			b.WriteString("null,")
		case col.From == FromWindowStart:
			fmt.Fprintf(&b, "ws%d,", v.Int)
		case col.From == FromWindowEnd:
			fmt.Fprintf(&b, "we%d,", v.Int)
		default:
			b.WriteString(v.Str + ",")
		}
	}
	return b.String()
}

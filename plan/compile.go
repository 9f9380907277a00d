package plan

import (
	"fmt"
	"slices"

	"github.com/cdcjoin/cdcjoin/expr"
	"github.com/cdcjoin/cdcjoin/query"
)

// Compile compiles a resolved query. Problems (an ON without an equality
// linking the new table, a condition an outer join cannot take) come back
// with their positions.
func Compile(q *query.Query) (*Plan, []*Error) {
	c := &compiler{q: q, p: &Plan{Query: q}}
	c.compile()
	if len(c.errs) > 0 {
		return nil, c.errs
	}
	return c.p, nil
}

type keyPair struct{ l, r Slot }

type stageConds struct {
	pairs       []keyPair
	aSide       []expr.Expr
	bSide       []expr.Expr
	residual    []expr.Expr
	localNonNul []int
}

type compiler struct {
	q    *query.Query
	p    *Plan
	errs []*Error
	n    int // joins
	// kinds[k] is stage k's kind (1-based; kinds[0] unused).
	kinds   []Kind
	written []Kind
	conds   []stageConds // 1-based
	// baseFilter[t] are WHERE conditions pushed to FROM item t's input;
	// residual[k] the ones evaluated after stage k.
	baseFilter [][]expr.Expr
	residual   [][]expr.Expr
}

func (c *compiler) errAt(pos query.Pos, format string, args ...any) {
	c.errs = append(c.errs, &Error{Pos: pos, Msg: fmt.Sprintf(format, args...)})
}

func (c *compiler) compile() {
	q := c.q
	c.n = len(q.Joins)
	for i, f := range q.From {
		c.p.Tables = append(c.p.Tables, Table{Alias: f.Alias, Name: f.Table, Key: q.Tables[i].Key})
		c.p.KeyWidth = append(c.p.KeyWidth, len(q.Tables[i].Key))
	}
	c.kinds = make([]Kind, c.n+1)
	c.written = make([]Kind, c.n+1)
	c.conds = make([]stageConds, c.n+1)
	for k := 1; k <= c.n; k++ {
		j := q.Joins[k-1]
		c.kinds[k], c.written[k] = j.Kind, j.Kind
		c.classifyOn(k, j)
	}
	if len(c.errs) > 0 {
		return
	}
	c.reduce()
	for k := 1; k <= c.n; k++ {
		if len(c.conds[k].residual) > 0 && c.kinds[k] != Inner {
			j := q.Joins[k-1]
			c.errAt(j.Pos, "%s JOIN %s: a condition in ON that involves both sides must be an equality of two columns (%s); conditions on one side are fine, and other conditions can go in WHERE (with a different meaning)",
				c.kinds[k], q.From[k].Alias, c.conds[k].residual[0])
		}
	}
	if len(c.errs) > 0 {
		return
	}
	c.place()
	c.layout()
}

// classifyOn splits join k's ON conjuncts into key pairs, conditions on
// one side, and residuals.
func (c *compiler) classifyOn(k int, j query.Join) {
	sc := &c.conds[k]
	for _, cond := range j.On {
		ts := expr.Tables(cond.Expr)
		sc.localNonNul = unionInts(sc.localNonNul, expr.NonNullable(cond.Expr))
		if cmp, ok := cond.Expr.(*expr.Cmp); ok && cmp.Op == expr.Eq {
			lc, lok := cmp.L.(*expr.Col)
			rc, rok := cmp.R.(*expr.Col)
			if lok && rok {
				if lc.Table == k && rc.Table < k {
					lc, rc = rc, lc
				}
				if rc.Table == k && lc.Table < k {
					sc.pairs = append(sc.pairs, keyPair{Slot{lc.Table, lc.Column}, Slot{rc.Table, rc.Column}})
					continue
				}
			}
		}
		switch {
		case len(ts) == 0 || (len(ts) == 1 && ts[0] == k):
			sc.bSide = append(sc.bSide, cond.Expr)
		case ts[len(ts)-1] < k:
			sc.aSide = append(sc.aSide, cond.Expr)
		default:
			sc.residual = append(sc.residual, cond.Expr)
		}
	}
	if len(sc.pairs) == 0 {
		c.errAt(j.Pos, "JOIN %s: the ON condition must equate a column of %s with a column of a table before it (e.g. %s.col = %s.col); cross joins are not supported",
			c.q.From[k].Alias, c.q.From[k].Alias, c.q.From[k].Alias, c.q.From[0].Alias)
	}
}

// reduce turns outer joins into inner ones where a condition above them
// rejects the rows they would pad (PostgreSQL's reduce_outer_joins).
func (c *compiler) reduce() {
	var above []int
	for _, w := range c.q.Where {
		above = unionInts(above, expr.NonNullable(w.Expr))
	}
	for k := c.n; k >= 1; k-- {
		rightRej := slices.Contains(above, k)
		leftRej := false
		for _, t := range above {
			if t < k {
				leftRej = true
			}
		}
		switch c.kinds[k] {
		case Left:
			if rightRej {
				c.kinds[k] = Inner
			}
		case Right:
			if leftRej {
				c.kinds[k] = Inner
			}
		case Full:
			switch {
			case leftRej && rightRej:
				c.kinds[k] = Inner
			case leftRej:
				c.kinds[k] = Left
			case rightRej:
				c.kinds[k] = Right
			}
		}
		local := c.conds[k].localNonNul
		switch c.kinds[k] {
		case Inner:
			above = unionInts(above, local)
		case Left:
			// The left side is preserved: only the constraints from above
			// pass (PostgreSQL: local ones cannot).
		case Right:
			// PostgreSQL swaps a RIGHT join into a LEFT one: the left side
			// becomes the nullable side and gets only the local ones.
			above = slices.Clone(local)
		case Full:
			above = nil
		}
	}
}

// nullSupplied reports whether FROM item t can be padded with NULLs by a
// join of the (reduced) plan.
func (c *compiler) nullSupplied(t int) bool {
	if t >= 1 && (c.kinds[t] == Left || c.kinds[t] == Full) {
		return true
	}
	for j := max(t+1, 1); j <= c.n; j++ {
		if c.kinds[j] == Right || c.kinds[j] == Full {
			return true
		}
	}
	return false
}

// place decides where each WHERE conjunct is evaluated: on a FROM item's
// input when nothing pads that table, else after the first stage from
// which no RIGHT or FULL join follows (filters commute with later INNER
// and LEFT joins of their side, not with RIGHT and FULL ones).
func (c *compiler) place() {
	c.baseFilter = make([][]expr.Expr, len(c.q.From))
	c.residual = make([][]expr.Expr, c.n+1)
	lastRF := 0
	for k := 1; k <= c.n; k++ {
		if c.kinds[k] == Right || c.kinds[k] == Full {
			lastRF = k
		}
	}
	for _, w := range c.q.Where {
		ts := expr.Tables(w.Expr)
		if len(ts) == 1 && !c.nullSupplied(ts[0]) {
			c.baseFilter[ts[0]] = append(c.baseFilter[ts[0]], w.Expr)
			continue
		}
		m := c.n
		if len(ts) > 0 {
			m = max(ts[len(ts)-1], lastRF, 1)
		}
		c.residual[m] = append(c.residual[m], w.Expr)
	}
	for k := 1; k <= c.n; k++ {
		c.residual[k] = append(c.conds[k].residual, c.residual[k]...)
		c.conds[k].residual = c.residual[k]
	}
}

// layout decides every row layout, binds every expression and fills the
// plan.
func (c *compiler) layout() {
	p, q := c.p, c.q
	// Every column the query names, by table, in order of first use (the
	// key columns first).
	used := make([][]string, len(q.From))
	for t := range q.From {
		used[t] = slices.Clone(q.Tables[t].Key)
	}
	use := func(s Slot) {
		if !slices.Contains(used[s.Table], s.Column) {
			used[s.Table] = append(used[s.Table], s.Column)
		}
	}
	useExpr := func(e expr.Expr) {
		for _, col := range expr.Columns(e) {
			use(Slot{col.Table, col.Column})
		}
	}
	for _, s := range q.Select {
		useExpr(s.Expr)
	}
	for k := 1; k <= c.n; k++ {
		for _, kp := range c.conds[k].pairs {
			use(kp.l)
			use(kp.r)
		}
	}
	for _, j := range q.Joins {
		for _, cond := range j.On {
			useExpr(cond.Expr)
		}
	}
	for _, w := range q.Where {
		useExpr(w.Expr)
	}
	base := make([][]Slot, len(q.From))
	for t := range q.From {
		p.Tables[t].Columns = used[t]
		for _, col := range used[t] {
			base[t] = append(base[t], Slot{t, col})
		}
	}
	isKey := func(s Slot) bool { return slices.Contains(q.Tables[s.Table].Key, s.Column) }
	// neededAbove[k]: the columns of tables ≤ k that something after stage
	// k's output reads (plus every key column: the row's identity).
	neededAbove := make([]map[Slot]bool, c.n+1)
	for k := 0; k <= c.n; k++ {
		need := map[Slot]bool{}
		add := func(e expr.Expr) {
			for _, col := range expr.Columns(e) {
				if col.Table <= k {
					need[Slot{col.Table, col.Column}] = true
				}
			}
		}
		for _, s := range q.Select {
			add(s.Expr)
		}
		for j := k; j <= c.n; j++ {
			if j >= 1 {
				for _, r := range c.residual[j] {
					add(r)
				}
			}
			if j > k {
				for _, kp := range c.conds[j].pairs {
					if kp.l.Table <= k {
						need[kp.l] = true
					}
				}
				for _, a := range c.conds[j].aSide {
					add(a)
				}
			}
		}
		neededAbove[k] = need
	}
	preserves := func(k Kind, left bool) bool {
		if left {
			return k == Left || k == Full
		}
		return k == Right || k == Full
	}
	var leftLayout []Slot = base[0]
	leftTables := []int{0}
	for k := 1; k <= c.n; k++ {
		sc := c.conds[k]
		st := Stage{N: k, Kind: c.kinds[k], Written: c.written[k]}
		st.L = Side{Stage: k - 1, Table: 0, Tables: slices.Clone(leftTables), Layout: leftLayout}
		if k == 1 {
			st.L.Stage = 0
		}
		st.R = Side{Stage: 0, Table: k, Tables: []int{k}, Layout: base[k]}
		for _, kp := range sc.pairs {
			st.L.Key = append(st.L.Key, indexOfSlot(st.L.Layout, kp.l))
			st.R.Key = append(st.R.Key, indexOfSlot(st.R.Layout, kp.r))
		}
		for _, side := range []*Side{&st.L, &st.R} {
			side.Single = true
			for _, i := range side.Key {
				if !isKey(side.Layout[i]) {
					side.Single = false
				}
			}
			for i, s := range side.Layout {
				if isKey(s) {
					side.ID = append(side.ID, i)
				}
			}
		}
		// Conditions on one side.
		var lFilter, lMatch, rFilter, rMatch []expr.Expr
		if k == 1 {
			lFilter = append(lFilter, c.baseFilter[0]...)
		}
		rFilter = append(rFilter, c.baseFilter[k]...)
		if preserves(st.Kind, true) {
			lMatch = append(lMatch, sc.aSide...)
		} else {
			lFilter = append(lFilter, sc.aSide...)
		}
		if preserves(st.Kind, false) {
			rMatch = append(rMatch, sc.bSide...)
		} else {
			rFilter = append(rFilter, sc.bSide...)
		}
		st.L.Filter, st.L.Match = bindTo(and(lFilter), st.L.Layout), bindTo(and(lMatch), st.L.Layout)
		st.R.Filter, st.R.Match = bindTo(and(rFilter), st.R.Layout), bindTo(and(rMatch), st.R.Layout)
		// The output keeps what is needed later.
		need := neededAbove[k]
		for _, r := range c.residual[k] {
			for _, col := range expr.Columns(r) {
				need[Slot{col.Table, col.Column}] = true
			}
		}
		for i, s := range st.L.Layout {
			if need[s] || isKey(s) {
				st.Out, st.OutL = append(st.Out, s), append(st.OutL, i)
			}
		}
		for i, s := range st.R.Layout {
			if need[s] || isKey(s) {
				st.Out, st.OutR = append(st.Out, s), append(st.OutR, i)
			}
		}
		st.Residual = bindTo(and(c.residual[k]), st.Out)
		st.TagJoined = !st.L.Single && !st.R.Single
		st.TagPadL = preserves(st.Kind, true) && !st.L.Single
		st.TagPadR = preserves(st.Kind, false) && !st.R.Single
		if st.TagJoined || st.TagPadL || st.TagPadR {
			p.Materialize = true
		}
		p.Stages = append(p.Stages, st)
		leftLayout = st.Out
		leftTables = append(leftTables, k)
	}
	last := p.Last()
	for _, s := range q.Select {
		o := Output{Name: s.Name, Expr: bindTo(s.Expr, last.Out)}
		if col, ok := s.Expr.(*expr.Col); ok {
			o.Source = &Slot{col.Table, col.Column}
			o.Nullable = c.nullSupplied(col.Table)
		} else {
			o.Nullable = true
		}
		p.Select = append(p.Select, o)
	}
	for t := range q.From {
		for _, k := range q.Tables[t].Key {
			p.RowKey = append(p.RowKey, indexOfSlot(last.Out, Slot{t, k}))
		}
	}
}

func unionInts(a, b []int) []int {
	for _, x := range b {
		if !slices.Contains(a, x) {
			a = append(a, x)
		}
	}
	slices.Sort(a)
	return a
}

package query

import (
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// TimeTable is what a time join's query knows of a table: its declared
// event-time column (tables.<t>.time).
type TimeTable struct {
	Time string
}

// TimeJoin is a query of a time-bounded interval join of two event
// streams, the SQL form of the configuration's time_join (kind interval):
//
//	SELECT i.impression_id, c.click_id AS click
//	FROM impressions i LEFT JOIN clicks c
//	  ON i.ad_id = c.ad_id
//	 AND c.click_time BETWEEN i.impression_time AND i.impression_time + INTERVAL '30' MINUTE
//
// The FROM table is the left side, the joined one the right side; the ON
// condition is one or more equalities of a left and a right column (the
// join key) and a time bound on the two tables' time columns — BETWEEN,
// or a >= / <= pair, of a time column and the other table's time column
// plus or minus an INTERVAL — which gives
// left.time + Lower <= right.time <= left.time + Upper.
type TimeJoin struct {
	// Left and Right are the FROM table and the joined table.
	Left, Right From
	Kind        JoinKind
	// LeftKey[i] = RightKey[i] are the key equalities, in ON order.
	LeftKey, RightKey []string
	// Lower and Upper are the bound on right.time − left.time, inclusive.
	Lower, Upper time.Duration
	// Select is the select list: plain columns of either table.
	Select []TimeItem
}

// TimeItem is one select-list item of a time join: Column of the left
// (Right false) or right table, named Name.
type TimeItem struct {
	Right        bool
	Column, Name string
	Pos          Pos
}

// timeYAML is the alternative the refusals point at.
const timeYAML = "window and temporal joins are written as time_join: YAML, kind window or temporal (README, Time joins)"

// noFilter is what a refused filter condition says.
const noFilter = "a time join, in either form, has no filters: filter its output in ClickHouse"

// ParseTimeJoin parses and resolves text as a time join of two tables of
// tables (by name; each with its declared time column). It returns every
// problem found, in text order, each with its position and what is
// supported; the TimeJoin is nil when there is any.
func ParseTimeJoin(text string, tables map[string]*TimeTable) (*TimeJoin, []*Error) {
	p := &timeParser{parser: parser{text: text}, tables: tables, tj: &TimeJoin{}}
	p.parse()
	if len(p.errs) > 0 {
		sortErrors(p.errs)
		return nil, p.errs
	}
	return p.tj, nil
}

type timeParser struct {
	parser
	tables map[string]*TimeTable
	tj     *TimeJoin
	// times are the two tables' time columns; lowerAt/upperAt where a
	// bound was given (-1: not yet).
	times            [2]string
	lowerAt, upperAt int32
}

func (p *timeParser) parse() {
	raw, perr := parseOne(p.text, DescribeTime())
	if perr != nil {
		p.errs = append(p.errs, perr)
		return
	}
	s := raw.Stmt.GetSelectStmt()
	loc := raw.StmtLocation
	switch {
	case s == nil:
		p.errAt(loc, "only a SELECT statement can define a join (%s)", DescribeTime())
		return
	case s.Op != pg.SetOperation_SETOP_NONE || s.WithClause != nil || len(s.ValuesLists) > 0 || s.IntoClause != nil:
		p.errAt(loc, "a time join is one SELECT … FROM a JOIN b ON …: %s", DescribeTime())
		return
	}
	if len(s.DistinctClause) > 0 || len(s.GroupClause) > 0 || s.HavingClause != nil || len(s.WindowClause) > 0 ||
		len(s.SortClause) > 0 || s.LimitCount != nil || s.LimitOffset != nil || len(s.LockingClause) > 0 {
		p.errAt(loc, "DISTINCT, GROUP BY, HAVING, WINDOW, ORDER BY, LIMIT and FOR UPDATE are not supported in a time join (%s; %s)", DescribeTime(), timeYAML)
	}
	if s.WhereClause != nil {
		p.errAt(nodeLoc(s.WhereClause), "WHERE is not supported in a time join: its ON is the key equalities and the time bound, and every pair (and, outer, every unmatched row) is emitted; filter in ClickHouse")
	}
	if len(s.FromClause) != 1 {
		p.errAt(loc, "a time join's FROM is one table JOINed with one other: %s", DescribeTime())
		return
	}
	j := s.FromClause[0].GetJoinExpr()
	if j == nil {
		p.errAt(nodeLoc(s.FromClause[0]), "a time join joins two tables: FROM a [alias] {[INNER] | LEFT | RIGHT | FULL [OUTER]} JOIN b [alias] ON …")
		return
	}
	if j.Larg.GetJoinExpr() != nil {
		p.errAt(nodeLoc(j.Rarg), "a time bound joins exactly two tables; a join of three or more tables with a time bound is not supported (in either form: a time join has two inputs)")
		return
	}
	switch j.Jointype {
	case pg.JoinType_JOIN_INNER:
		p.tj.Kind = Inner
	case pg.JoinType_JOIN_LEFT:
		p.tj.Kind = Left
	case pg.JoinType_JOIN_RIGHT:
		p.tj.Kind = Right
	case pg.JoinType_JOIN_FULL:
		p.tj.Kind = Full
	default:
		p.errAt(nodeLoc(j.Rarg), "join type %s is not supported: use [INNER] JOIN, LEFT, RIGHT or FULL [OUTER] JOIN … ON", j.Jointype)
		return
	}
	if j.IsNatural || len(j.UsingClause) > 0 || j.Quals == nil || j.Alias != nil {
		p.errAt(nodeLoc(j.Rarg), "a time join is written JOIN b [alias] ON <key equalities> AND <time bound> (no NATURAL, USING, CROSS or join alias)")
		return
	}
	lrv, rrv := j.Larg.GetRangeVar(), j.Rarg.GetRangeVar()
	if lrv == nil || rrv == nil {
		p.errAt(nodeLoc(s.FromClause[0]), "a time join joins two configured tables (subqueries, functions and parenthesized joins are not supported)")
		return
	}
	var ok [2]bool
	p.tj.Left, ok[0] = p.from(lrv, 0)
	p.tj.Right, ok[1] = p.from(rrv, 1)
	if !ok[0] || !ok[1] {
		return
	}
	if p.tj.Left.Alias == p.tj.Right.Alias {
		p.errAt(rrv.Location, "table name %q specified more than once (give one of them another alias)", p.tj.Right.Alias)
		return
	}
	if p.tj.Left.Table == p.tj.Right.Table {
		p.errAt(rrv.Location, "a time join of a table with itself is not supported (the two sides are two topics)")
		return
	}
	p.lowerAt, p.upperAt = -1, -1
	p.on(j.Quals)
	p.targets(s.TargetList, loc)
}

// DescribeTime returns a short text of the time joins the front end
// supports, for messages.
func DescribeTime() string {
	return "SELECT a.col [AS name], b.col … FROM a [alias] {[INNER] | LEFT | RIGHT | FULL [OUTER]} JOIN b [alias] ON a.k = b.k [AND …] AND b.time BETWEEN a.time [+|- INTERVAL '…'] AND a.time + INTERVAL '…'"
}

func (p *timeParser) from(rv *pg.RangeVar, side int) (From, bool) {
	name := rv.Relname
	if rv.Schemaname != "" {
		name = rv.Schemaname + "." + name
	}
	t, ok := p.tables[name]
	if !ok {
		known := make([]string, 0, len(p.tables))
		for k := range p.tables {
			known = append(known, k)
		}
		slices.Sort(known)
		p.errAt(rv.Location, "table %q is not in tables (configured: %s)", name, quoteNames(known))
		return From{}, false
	}
	alias := rv.Relname
	if rv.Alias != nil {
		alias = rv.Alias.Aliasname
		if len(rv.Alias.Colnames) > 0 {
			p.errAt(rv.Location, "column aliases in FROM are not supported")
			return From{}, false
		}
	}
	p.times[side] = t.Time
	return From{Alias: alias, Table: name, Pos: posOf(p.text, rv.Location)}, true
}

// colRef resolves a qualified column reference to its side (0 left, 1
// right); -1 with the error recorded otherwise.
func (p *timeParser) colRef(n *pg.Node) (int, string) {
	c := n.GetColumnRef()
	if c == nil {
		return -1, ""
	}
	var parts []string
	for _, f := range c.Fields {
		s := f.GetString_()
		if s == nil {
			p.errAt(c.Location, "* is not supported in a time join: name the columns (alias.col [AS name])")
			return -1, ""
		}
		parts = append(parts, s.Sval)
	}
	if len(parts) != 2 {
		p.errAt(c.Location, "qualify the column with its table's alias (%s.%s or %s.%s)", p.tj.Left.Alias, parts[len(parts)-1], p.tj.Right.Alias, parts[len(parts)-1])
		return -1, ""
	}
	switch parts[0] {
	case p.tj.Left.Alias:
		return 0, parts[1]
	case p.tj.Right.Alias:
		return 1, parts[1]
	}
	p.errAt(c.Location, "%q is not a table of the query (%s, %s)", parts[0], p.tj.Left.Alias, p.tj.Right.Alias)
	return -1, ""
}

// on reads the ON condition: key equalities and one time bound.
func (p *timeParser) on(n *pg.Node) {
	var conj []*pg.Node
	var split func(n *pg.Node)
	split = func(n *pg.Node) {
		if b := n.GetBoolExpr(); b != nil && b.Boolop == pg.BoolExprType_AND_EXPR {
			for _, a := range b.Args {
				split(a)
			}
			return
		}
		conj = append(conj, n)
	}
	split(n)
	before := len(p.errs)
	for _, c := range conj {
		p.conjunct(c)
	}
	if len(p.errs) > before {
		return
	}
	loc := nodeLoc(n)
	if len(p.tj.LeftKey) == 0 {
		p.errAt(loc, "a time join needs at least one key equality in ON (%s.k = %s.k)", p.tj.Left.Alias, p.tj.Right.Alias)
	}
	if p.lowerAt < 0 || p.upperAt < 0 {
		missing := "a lower"
		if p.lowerAt >= 0 {
			missing = "an upper"
		} else if p.upperAt < 0 {
			missing = "a lower and an upper"
		}
		p.errAt(loc, "the time bound needs %s bound on %s.%s (e.g. %s.%s BETWEEN %s.%s AND %s.%s + INTERVAL '30' MINUTE)", missing,
			p.tj.Right.Alias, p.times[1], p.tj.Right.Alias, p.times[1], p.tj.Left.Alias, p.times[0], p.tj.Left.Alias, p.times[0])
	} else if p.tj.Lower > p.tj.Upper {
		p.errAt(p.lowerAt, "the time bound is empty: its lower bound (%v) is above its upper bound (%v)", p.tj.Lower, p.tj.Upper)
	}
}

// term is a time column of one side plus an offset.
type term struct {
	side   int
	offset time.Duration
}

func (p *timeParser) conjunct(n *pg.Node) {
	a := n.GetAExpr()
	loc := nodeLoc(n)
	if a == nil {
		p.errAt(loc, "a time join's ON is ANDed key equalities (a.k = b.k) and a time bound; this condition is not supported (%s)", noFilter)
		return
	}
	op := opName(a.Name)
	switch {
	case a.Kind == pg.A_Expr_Kind_AEXPR_BETWEEN:
		x, ok := p.term(a.Lexpr)
		list := a.Rexpr.GetList()
		if !ok || list == nil || len(list.Items) != 2 {
			return
		}
		lo, ok1 := p.term(list.Items[0])
		hi, ok2 := p.term(list.Items[1])
		if ok1 && ok2 {
			p.bound(x, ">=", lo, a.Location)
			p.bound(x, "<=", hi, a.Location)
		}
		return
	case a.Kind == pg.A_Expr_Kind_AEXPR_OP && (op == ">=" || op == "<=" || op == "="):
	case a.Kind == pg.A_Expr_Kind_AEXPR_OP && (op == "<" || op == ">"):
		p.errAt(a.Location, "a time bound is inclusive: write %s= (a strict %s is not supported)", op, op)
		return
	default:
		p.errAt(a.Location, "a time join's ON is ANDed key equalities (a.k = b.k) and a time bound (BETWEEN, >= and <=); this condition is not supported (%s)", noFilter)
		return
	}
	ls, lc := p.plainCol(a.Lexpr)
	rs, rc := p.plainCol(a.Rexpr)
	if op == "=" && ls >= 0 && rs >= 0 && lc != p.times[ls] && rc != p.times[rs] {
		switch {
		case ls == rs:
			p.errAt(a.Location, "a key equality compares a column of %s with one of %s; both columns here are of %s", p.tj.Left.Alias, p.tj.Right.Alias, [2]string{p.tj.Left.Alias, p.tj.Right.Alias}[ls])
		case ls == 0:
			p.key(lc, rc, a.Location)
		default:
			p.key(rc, lc, a.Location)
		}
		return
	}
	x, ok1 := p.term(a.Lexpr)
	y, ok2 := p.term(a.Rexpr)
	if !ok1 || !ok2 {
		return
	}
	if op == "=" {
		p.bound(x, ">=", y, a.Location)
		p.bound(x, "<=", y, a.Location)
		return
	}
	p.bound(x, op, y, a.Location)
}

func (p *timeParser) key(l, r string, loc int32) {
	if slices.Contains(p.tj.LeftKey, l) || slices.Contains(p.tj.RightKey, r) {
		p.errAt(loc, "a column is in two key equalities (%s.%s = %s.%s): each key column of a side is equated with one of the other side", p.tj.Left.Alias, l, p.tj.Right.Alias, r)
		return
	}
	p.tj.LeftKey = append(p.tj.LeftKey, l)
	p.tj.RightKey = append(p.tj.RightKey, r)
}

// plainCol is a column reference's side and name; -1 when n is not one
// (nothing recorded).
func (p *timeParser) plainCol(n *pg.Node) (int, string) {
	if n.GetColumnRef() == nil {
		return -1, ""
	}
	before := len(p.errs)
	s, c := p.colRef(n)
	p.errs = p.errs[:before] // term reports it
	return s, c
}

// bound records x op y (op >= or <=) as a bound on right.time − left.time.
func (p *timeParser) bound(x term, op string, y term, loc int32) {
	if x.side == y.side {
		p.errAt(loc, "a time bound compares %s.%s with %s.%s; both sides here are %s's", p.tj.Left.Alias, p.times[0], p.tj.Right.Alias, p.times[1],
			[2]string{p.tj.Left.Alias, p.tj.Right.Alias}[x.side])
		return
	}
	// x − y op 0; with d = right.time − left.time: x − y = ±d + x.offset − y.offset.
	v := y.offset - x.offset
	lower := op == ">="
	if x.side == 0 { // −d + x.offset − y.offset op 0 ⇔ d op' x.offset − y.offset
		v, lower = -v, !lower
	}
	if lower {
		if p.lowerAt >= 0 {
			p.errAt(loc, "a second lower bound on the time difference (one BETWEEN, or one >= and one <=)")
			return
		}
		p.tj.Lower, p.lowerAt = v, loc
	} else {
		if p.upperAt >= 0 {
			p.errAt(loc, "a second upper bound on the time difference (one BETWEEN, or one >= and one <=)")
			return
		}
		p.tj.Upper, p.upperAt = v, loc
	}
}

// term reads a.time, a.time + INTERVAL '…' or a.time − INTERVAL '…'.
func (p *timeParser) term(n *pg.Node) (term, bool) {
	loc := nodeLoc(n)
	if a := n.GetAExpr(); a != nil && a.Kind == pg.A_Expr_Kind_AEXPR_OP && (opName(a.Name) == "+" || opName(a.Name) == "-") && a.Lexpr != nil {
		t, ok := p.term(a.Lexpr)
		if !ok {
			return t, false
		}
		d, ok := p.interval(a.Rexpr)
		if !ok {
			return t, false
		}
		if opName(a.Name) == "-" {
			d = -d
		}
		t.offset += d
		return t, true
	}
	if n.GetColumnRef() == nil {
		p.errAt(loc, "a time bound is a time column plus or minus an INTERVAL (e.g. %s.%s + INTERVAL '30' MINUTE); this expression is not supported in a time bound", p.tj.Left.Alias, p.times[0])
		return term{}, false
	}
	side, col := p.colRef(n)
	if side < 0 {
		return term{}, false
	}
	if col != p.times[side] {
		f := p.tj.Left
		if side == 1 {
			f = p.tj.Right
		}
		p.errAt(loc, "%s.%s is not the time column of %s (tables.%s.time is %s): a time join's ON is key equalities and a bound on the time columns; other conditions are not supported (%s)",
			f.Alias, col, f.Table, f.Table, p.times[side], noFilter)
		return term{}, false
	}
	return term{side: side}, true
}

// Interval field masks of libpg_query (INTERVAL_MASK of datetime.h).
var intervalFields = map[int32]time.Duration{
	1 << 3: 24 * time.Hour, 1 << 10: time.Hour, 1 << 11: time.Minute, 1 << 12: time.Second,
}

var intervalUnits = map[string]time.Duration{
	"microsecond": time.Microsecond, "microseconds": time.Microsecond, "us": time.Microsecond,
	"millisecond": time.Millisecond, "milliseconds": time.Millisecond, "ms": time.Millisecond,
	"second": time.Second, "seconds": time.Second, "sec": time.Second, "secs": time.Second, "s": time.Second,
	"minute": time.Minute, "minutes": time.Minute, "min": time.Minute, "mins": time.Minute, "m": time.Minute,
	"hour": time.Hour, "hours": time.Hour, "h": time.Hour,
	"day": 24 * time.Hour, "days": 24 * time.Hour, "d": 24 * time.Hour,
}

// intervalPartRE is one "n unit" of an interval literal.
var intervalPartRE = regexp.MustCompile(`^\s*([+-]?[0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*`)

// interval reads INTERVAL 'n' unit or INTERVAL 'n unit [n unit …]' as a
// duration (days are 24 hours: event times are instants; months and years
// are refused, they have no fixed length).
func (p *timeParser) interval(n *pg.Node) (time.Duration, bool) {
	c := n.GetTypeCast()
	loc := nodeLoc(n)
	if c == nil || opName(c.TypeName.Names) != "interval" || c.Arg.GetAConst() == nil || c.Arg.GetAConst().GetSval() == nil {
		p.errAt(loc, "a time bound's offset is an INTERVAL literal (INTERVAL '30' MINUTE, INTERVAL '90 seconds')")
		return 0, false
	}
	text := strings.TrimSpace(c.Arg.GetAConst().GetSval().Sval)
	var unit time.Duration
	switch len(c.TypeName.Typmods) {
	case 0:
	case 1:
		m := c.TypeName.Typmods[0].GetAConst()
		if m == nil || m.GetIval() == nil || intervalFields[m.GetIval().Ival] == 0 {
			p.errAt(loc, "INTERVAL '…' with this field is not supported: use DAY, HOUR, MINUTE or SECOND (or INTERVAL 'n unit')")
			return 0, false
		}
		unit = intervalFields[m.GetIval().Ival]
	default:
		p.errAt(loc, "INTERVAL '…' with a range of fields or a precision is not supported: use INTERVAL 'n' DAY|HOUR|MINUTE|SECOND or INTERVAL 'n unit …'")
		return 0, false
	}
	bad := func() (time.Duration, bool) {
		p.errAt(loc, "INTERVAL %q: write a number and a unit (microseconds, milliseconds, seconds, minutes, hours, days), e.g. INTERVAL '30' MINUTE or INTERVAL '1 hour 30 minutes'", text)
		return 0, false
	}
	var total float64
	rest := text
	if unit != 0 {
		v, err := strconv.ParseFloat(text, 64)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			return bad()
		}
		total = v * float64(unit)
		rest = ""
	} else if rest == "" {
		return bad()
	}
	for rest != "" {
		m := intervalPartRE.FindStringSubmatch(rest)
		if m == nil {
			return bad()
		}
		v, err := strconv.ParseFloat(m[1], 64)
		u := intervalUnits[strings.ToLower(m[2])]
		if err != nil || u == 0 {
			return bad()
		}
		total += v * float64(u)
		rest = rest[len(m[0]):]
	}
	if math.Abs(total) > float64(math.MaxInt64/2) {
		p.errAt(loc, "INTERVAL %q is out of range", text)
		return 0, false
	}
	d := time.Duration(math.Round(total))
	if d%time.Microsecond != 0 {
		p.errAt(loc, "INTERVAL %q is not a whole number of microseconds (event times are microseconds)", text)
		return 0, false
	}
	return d, true
}

// targets reads the select list: plain columns of either table.
func (p *timeParser) targets(list []*pg.Node, loc int32) {
	if len(list) == 0 {
		p.errAt(loc, "the query selects nothing")
	}
	names := map[string]bool{}
	for _, n := range list {
		rt := n.GetResTarget()
		if rt == nil || rt.Val == nil {
			continue
		}
		if rt.Val.GetColumnRef() == nil {
			p.errAt(nodeLoc(rt.Val), "a time join selects columns of its two tables (alias.col [AS name]); expressions are not supported in a time join (compute them in ClickHouse)")
			continue
		}
		side, col := p.colRef(rt.Val)
		if side < 0 {
			continue
		}
		it := TimeItem{Right: side == 1, Column: col, Name: col, Pos: posOf(p.text, rt.Location)}
		if rt.Name != "" {
			it.Name = rt.Name
		}
		if names[it.Name] {
			p.errAt(rt.Location, "output column %q is selected twice (give one of them another name with AS)", it.Name)
			continue
		}
		names[it.Name] = true
		p.tj.Select = append(p.tj.Select, it)
	}
}

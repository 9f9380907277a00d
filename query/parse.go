package query

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	pgparser "github.com/pganalyze/pg_query_go/v6/parser"

	"github.com/cdcjoin/cdcjoin/expr"
	"github.com/cdcjoin/cdcjoin/row"
)

// Parse parses and resolves text against tables (the configuration's,
// by name). It returns every problem found, in text order; the Query is
// nil when there is any.
func Parse(text string, tables map[string]*Table) (*Query, []*Error) {
	p := &parser{text: text, tables: tables, q: &Query{Text: text}}
	p.parse()
	if len(p.errs) > 0 {
		sortErrors(p.errs)
		return nil, p.errs
	}
	return p.q, nil
}

// sortErrors puts errs in text order (stable: problems at one position
// keep the order they were found in).
func sortErrors(errs []*Error) {
	slices.SortStableFunc(errs, func(a, b *Error) int {
		if a.Pos.Line != b.Pos.Line {
			return a.Pos.Line - b.Pos.Line
		}
		return a.Pos.Column - b.Pos.Column
	})
}

type parser struct {
	text   string
	tables map[string]*Table
	q      *Query
	errs   []*Error
}

func (p *parser) errAt(loc int32, format string, args ...any) {
	p.errs = append(p.errs, &Error{Pos: posOf(p.text, loc), Msg: fmt.Sprintf(format, args...)})
}

// refused is an expression the front end does not support; the error is
// already recorded.
var errRefused = errors.New("refused")

// parseOne parses text with PostgreSQL's parser and returns its one
// statement, or the error saying why not (describe: what is supported,
// for an empty query).
func parseOne(text, describe string) (*pg.RawStmt, *Error) {
	if strings.TrimSpace(text) == "" {
		return nil, &Error{Msg: "the query is empty: " + describe}
	}
	res, err := pg.Parse(text)
	if err != nil {
		var pe *pgparser.Error
		if errors.As(err, &pe) {
			return nil, &Error{Pos: posOfChar(text, pe.Cursorpos), Msg: pe.Message}
		}
		return nil, &Error{Msg: err.Error()}
	}
	if len(res.Stmts) != 1 {
		return nil, &Error{Pos: Pos{1, 1}, Msg: fmt.Sprintf("the query must be one SELECT statement, not %d statements", len(res.Stmts))}
	}
	return res.Stmts[0], nil
}

func (p *parser) parse() {
	raw, perr := parseOne(p.text, Describe())
	if perr != nil {
		p.errs = append(p.errs, perr)
		return
	}
	sel := raw.Stmt.GetSelectStmt()
	if sel == nil {
		p.errAt(raw.StmtLocation, "only a SELECT statement can define a join (%s)", Describe())
		return
	}
	p.selectStmt(sel, raw.StmtLocation)
}

func (p *parser) selectStmt(s *pg.SelectStmt, loc int32) {
	switch {
	case s.Op != pg.SetOperation_SETOP_NONE:
		p.errAt(loc, "UNION, INTERSECT and EXCEPT are not supported: the query is one SELECT … FROM … JOIN …")
		return
	case s.WithClause != nil:
		p.errAt(s.WithClause.Location, "WITH is not supported: write the joins in one SELECT")
		return
	case len(s.ValuesLists) > 0:
		p.errAt(loc, "VALUES is not supported: the query selects from the configured tables")
		return
	}
	if s.IntoClause != nil {
		p.errAt(loc, "SELECT INTO is not supported")
	}
	if len(s.DistinctClause) > 0 {
		p.errAt(loc, "DISTINCT is not supported: every joined row is kept (the output is keyed by the primary keys of every table)")
	}
	if len(s.GroupClause) > 0 {
		p.errAt(nodeLoc(s.GroupClause[0]), "GROUP BY is not supported: cdcjoin maintains joins, not aggregates (aggregate in ClickHouse)")
	}
	if s.HavingClause != nil {
		p.errAt(nodeLoc(s.HavingClause), "HAVING is not supported")
	}
	if len(s.WindowClause) > 0 {
		p.errAt(loc, "WINDOW is not supported")
	}
	if len(s.SortClause) > 0 {
		p.errAt(nodeLoc(s.SortClause[0]), "ORDER BY is not supported: the output is a table keyed by the primary keys of every table (order it when you query ClickHouse)")
	}
	if s.LimitCount != nil || s.LimitOffset != nil {
		l := s.LimitCount
		if l == nil {
			l = s.LimitOffset
		}
		p.errAt(nodeLoc(l), "LIMIT and OFFSET are not supported")
	}
	if len(s.LockingClause) > 0 {
		p.errAt(loc, "FOR UPDATE/SHARE is not supported")
	}
	switch len(s.FromClause) {
	case 0:
		p.errAt(loc, "the query needs a FROM clause: %s", Describe())
		return
	case 1:
	default:
		p.errAt(nodeLoc(s.FromClause[1]), "a comma in FROM (a cross join) is not supported: join each table with JOIN … ON")
		return
	}
	p.fromItem(s.FromClause[0])
	if len(p.errs) > 0 {
		return
	}
	if len(p.q.From) < 2 {
		p.errAt(nodeLoc(s.FromClause[0]), "the query must join at least two tables (JOIN … ON …)")
	}
	if s.WhereClause != nil {
		p.q.Where = p.conds(s.WhereClause, "WHERE")
	}
	p.targets(s.TargetList, loc)
}

// fromItem walks the join tree: left-deep, each right argument a table.
func (p *parser) fromItem(n *pg.Node) {
	switch {
	case n.GetRangeVar() != nil:
		p.rangeVar(n.GetRangeVar())
	case n.GetJoinExpr() != nil:
		j := n.GetJoinExpr()
		p.fromItem(j.Larg)
		if len(p.errs) > 0 {
			return
		}
		loc := nodeLoc(j.Rarg)
		var kind JoinKind
		switch j.Jointype {
		case pg.JoinType_JOIN_INNER:
			kind = Inner
		case pg.JoinType_JOIN_LEFT:
			kind = Left
		case pg.JoinType_JOIN_RIGHT:
			kind = Right
		case pg.JoinType_JOIN_FULL:
			kind = Full
		default:
			p.errAt(loc, "join type %s is not supported: use [INNER] JOIN, LEFT, RIGHT or FULL [OUTER] JOIN … ON", j.Jointype)
			return
		}
		if j.IsNatural {
			p.errAt(loc, "NATURAL JOIN is not supported: write the join condition with ON")
			return
		}
		if len(j.UsingClause) > 0 {
			p.errAt(loc, "JOIN … USING is not supported: write the join condition with ON a.col = b.col")
			return
		}
		if j.Quals == nil {
			p.errAt(loc, "a CROSS JOIN (a join without ON) is not supported: join each table with JOIN … ON")
			return
		}
		if j.Alias != nil {
			p.errAt(loc, "an alias for a join is not supported")
			return
		}
		rv := j.Rarg.GetRangeVar()
		if rv == nil {
			p.errAt(loc, "the right side of a JOIN must be a table (parenthesized joins and subqueries are not supported: write the joins left to right)")
			return
		}
		p.rangeVar(rv)
		if len(p.errs) > 0 {
			return
		}
		joinLoc := rv.Location
		jn := Join{Kind: kind, Pos: posOf(p.text, joinLoc)}
		jn.On = p.conds(j.Quals, "ON")
		p.q.Joins = append(p.q.Joins, jn)
	case n.GetRangeSubselect() != nil:
		p.errAt(nodeLoc(n), "a subquery in FROM is not supported: join the configured tables directly")
	case n.GetRangeFunction() != nil:
		p.errAt(nodeLoc(n), "a function in FROM is not supported")
	default:
		p.errAt(nodeLoc(n), "this FROM item is not supported: %s", Describe())
	}
}

func (p *parser) rangeVar(rv *pg.RangeVar) {
	name := rv.Relname
	t, ok := p.tables[name]
	if rv.Schemaname != "" {
		if qt, qok := p.tables[rv.Schemaname+"."+name]; qok {
			t, ok, name = qt, true, rv.Schemaname+"."+name
		}
	}
	if !ok {
		known := make([]string, 0, len(p.tables))
		for k := range p.tables {
			known = append(known, k)
		}
		slices.Sort(known)
		p.errAt(rv.Location, "table %q is not in tables (configured: %s)", name, quoteNames(known))
		return
	}
	alias := rv.Relname
	if rv.Alias != nil {
		alias = rv.Alias.Aliasname
		if len(rv.Alias.Colnames) > 0 {
			p.errAt(rv.Location, "column aliases in FROM are not supported")
			return
		}
	}
	for _, f := range p.q.From {
		if f.Alias == alias {
			p.errAt(rv.Location, "table name %q specified more than once (give one of them another alias)", alias)
			return
		}
	}
	p.q.From = append(p.q.From, From{Alias: alias, Table: name, Pos: posOf(p.text, rv.Location)})
	p.q.Tables = append(p.q.Tables, t)
}

// conds splits a condition into its top-level conjuncts and resolves each.
func (p *parser) conds(n *pg.Node, clause string) []Cond {
	var out []Cond
	var split func(n *pg.Node)
	split = func(n *pg.Node) {
		if b := n.GetBoolExpr(); b != nil && b.Boolop == pg.BoolExprType_AND_EXPR {
			for _, a := range b.Args {
				split(a)
			}
			return
		}
		e, err := p.expr(n, clause)
		if err != nil {
			return
		}
		out = append(out, Cond{Expr: e, Pos: posOf(p.text, nodeLoc(n))})
	}
	split(n)
	return out
}

func (p *parser) targets(list []*pg.Node, loc int32) {
	seen := map[string]bool{}
	for _, n := range list {
		rt := n.GetResTarget()
		if rt == nil {
			p.errAt(loc, "unsupported select-list entry")
			continue
		}
		if cr := rt.Val.GetColumnRef(); cr != nil && len(cr.Fields) > 0 && cr.Fields[len(cr.Fields)-1].GetAStar() != nil {
			p.errAt(rt.Location, "* is not supported: list the columns (the query cannot see the tables' columns)")
			continue
		}
		e, err := p.expr(rt.Val, "the select list")
		if err != nil {
			continue
		}
		name := rt.Name
		if name == "" {
			name = figureName(rt.Val)
		}
		if name == "" {
			p.errAt(rt.Location, "give the expression %s a name with AS", e)
			continue
		}
		switch low := strings.ToLower(name); {
		case seen[low]:
			p.errAt(rt.Location, "output name %q appears twice; rename one with AS", name)
		case strings.HasPrefix(name, "_"):
			p.errAt(rt.Location, "output name %q: names starting with '_' are reserved for cdcjoin's columns", name)
		default:
			seen[low] = true
		}
		p.q.Select = append(p.q.Select, Item{Name: name, Expr: e, Pos: posOf(p.text, rt.Location)})
	}
}

// figureName is PostgreSQL's FigureColname for the expressions that get a
// name of their own; "" where PostgreSQL says "?column?".
func figureName(n *pg.Node) string {
	switch {
	case n.GetColumnRef() != nil:
		f := n.GetColumnRef().Fields
		return f[len(f)-1].GetString_().GetSval()
	case n.GetFuncCall() != nil:
		f := n.GetFuncCall().Funcname
		return f[len(f)-1].GetString_().GetSval()
	case n.GetCoalesceExpr() != nil:
		return "coalesce"
	case n.GetCaseExpr() != nil:
		return "case"
	case n.GetTypeCast() != nil:
		if name := figureName(n.GetTypeCast().Arg); name != "" {
			return name
		}
		tn := n.GetTypeCast().TypeName.Names
		return tn[len(tn)-1].GetString_().GetSval()
	case n.GetAExpr() != nil && n.GetAExpr().Kind == pg.A_Expr_Kind_AEXPR_NULLIF:
		return "nullif"
	}
	return ""
}

// nodeLoc is the location libpg_query gives a node (-1 if none).
func nodeLoc(n *pg.Node) int32 {
	switch {
	case n == nil:
		return -1
	case n.GetColumnRef() != nil:
		return n.GetColumnRef().Location
	case n.GetAConst() != nil:
		return n.GetAConst().Location
	case n.GetAExpr() != nil:
		return n.GetAExpr().Location
	case n.GetBoolExpr() != nil:
		return n.GetBoolExpr().Location
	case n.GetNullTest() != nil:
		return n.GetNullTest().Location
	case n.GetBooleanTest() != nil:
		return n.GetBooleanTest().Location
	case n.GetFuncCall() != nil:
		return n.GetFuncCall().Location
	case n.GetCaseExpr() != nil:
		return n.GetCaseExpr().Location
	case n.GetCoalesceExpr() != nil:
		return n.GetCoalesceExpr().Location
	case n.GetTypeCast() != nil:
		return n.GetTypeCast().Location
	case n.GetSubLink() != nil:
		return n.GetSubLink().Location
	case n.GetRangeVar() != nil:
		return n.GetRangeVar().Location
	case n.GetJoinExpr() != nil:
		return nodeLoc(n.GetJoinExpr().Larg)
	case n.GetResTarget() != nil:
		return n.GetResTarget().Location
	case n.GetSortBy() != nil:
		return nodeLoc(n.GetSortBy().Node)
	case n.GetParamRef() != nil:
		return n.GetParamRef().Location
	case n.GetAArrayExpr() != nil:
		return n.GetAArrayExpr().Location
	case n.GetRowExpr() != nil:
		return n.GetRowExpr().Location
	case n.GetMinMaxExpr() != nil:
		return n.GetMinMaxExpr().Location
	case n.GetSqlvalueFunction() != nil:
		return n.GetSqlvalueFunction().Location
	case n.GetRangeSubselect() != nil:
		return nodeLoc(n.GetRangeSubselect().Subquery)
	case n.GetSelectStmt() != nil:
		return -1
	}
	return -1
}

// expr translates an expression node.
func (p *parser) expr(n *pg.Node, clause string) (expr.Expr, error) {
	loc := nodeLoc(n)
	switch {
	case n.GetColumnRef() != nil:
		return p.column(n.GetColumnRef())
	case n.GetAConst() != nil:
		return p.constant(n.GetAConst())
	case n.GetAExpr() != nil:
		return p.aexpr(n.GetAExpr(), clause)
	case n.GetBoolExpr() != nil:
		b := n.GetBoolExpr()
		args, err := p.exprs(b.Args, clause)
		if err != nil {
			return nil, err
		}
		switch b.Boolop {
		case pg.BoolExprType_AND_EXPR:
			return &expr.And{Args: args}, nil
		case pg.BoolExprType_OR_EXPR:
			return &expr.Or{Args: args}, nil
		}
		return &expr.Not{X: args[0]}, nil
	case n.GetNullTest() != nil:
		t := n.GetNullTest()
		x, err := p.expr(t.Arg, clause)
		if err != nil {
			return nil, err
		}
		return &expr.IsNull{X: x, Not: t.Nulltesttype == pg.NullTestType_IS_NOT_NULL}, nil
	case n.GetBooleanTest() != nil:
		t := n.GetBooleanTest()
		x, err := p.expr(t.Arg, clause)
		if err != nil {
			return nil, err
		}
		b := &expr.IsBool{X: x}
		switch t.Booltesttype {
		case pg.BoolTestType_IS_TRUE:
			b.Value = 1
		case pg.BoolTestType_IS_NOT_TRUE:
			b.Value, b.Not = 1, true
		case pg.BoolTestType_IS_FALSE:
			b.Value = 0
		case pg.BoolTestType_IS_NOT_FALSE:
			b.Value, b.Not = 0, true
		case pg.BoolTestType_IS_UNKNOWN:
			b.Value = -1
		default:
			b.Value, b.Not = -1, true
		}
		return b, nil
	case n.GetFuncCall() != nil:
		return p.funcCall(n.GetFuncCall(), clause)
	case n.GetCoalesceExpr() != nil:
		args, err := p.exprs(n.GetCoalesceExpr().Args, clause)
		if err != nil {
			return nil, err
		}
		return &expr.Coalesce{Args: args}, nil
	case n.GetCaseExpr() != nil:
		return p.caseExpr(n.GetCaseExpr(), clause)
	case n.GetTypeCast() != nil:
		return p.cast(n.GetTypeCast(), clause)
	case n.GetSubLink() != nil:
		p.errAt(loc, "subqueries are not supported in %s", clause)
	case n.GetParamRef() != nil:
		p.errAt(loc, "parameters ($1) are not supported: write the value")
	case n.GetSqlvalueFunction() != nil:
		p.errAt(loc, "CURRENT_DATE, now() and other functions of time are not supported: a join's output must not depend on when it runs")
	default:
		p.errAt(loc, "this expression is not supported in %s (supported: columns, literals, comparisons, AND/OR/NOT, IS [NOT] NULL, IN, LIKE, BETWEEN, + - * / %%, ||, COALESCE, NULLIF, CASE, lower, upper, casts of literals)", clause)
	}
	return nil, errRefused
}

func (p *parser) exprs(ns []*pg.Node, clause string) ([]expr.Expr, error) {
	out := make([]expr.Expr, 0, len(ns))
	var err error
	for _, n := range ns {
		e, eerr := p.expr(n, clause)
		if eerr != nil {
			err = eerr
			continue
		}
		out = append(out, e)
	}
	return out, err
}

func (p *parser) column(c *pg.ColumnRef) (expr.Expr, error) {
	var names []string
	for _, f := range c.Fields {
		if f.GetAStar() != nil {
			p.errAt(c.Location, "* is not supported here")
			return nil, errRefused
		}
		names = append(names, f.GetString_().GetSval())
	}
	switch len(names) {
	case 1:
		var hits []int
		for i := range p.q.From {
			if p.q.Tables[i].declares(names[0]) {
				hits = append(hits, i)
			}
		}
		switch len(hits) {
		case 1:
			return p.col(hits[0], names[0]), nil
		case 0:
			p.errAt(c.Location, "column %q: qualify it with its table's alias (alias.%s): cdcjoin knows a table's columns only from tables.<table>.key and .types", names[0], names[0])
		default:
			p.errAt(c.Location, "column reference %q is ambiguous", names[0])
		}
	case 2:
		for i, f := range p.q.From {
			if f.Alias == names[0] {
				return p.col(i, names[1]), nil
			}
		}
		for _, f := range p.q.From {
			if f.Table == names[0] {
				p.errAt(c.Location, "invalid reference to FROM-clause entry for table %q: use its alias %q", names[0], f.Alias)
				return nil, errRefused
			}
		}
		p.errAt(c.Location, "missing FROM-clause entry for table %q", names[0])
	default:
		p.errAt(c.Location, "column reference %q: use alias.column", strings.Join(names, "."))
	}
	return nil, errRefused
}

func (p *parser) col(table int, name string) *expr.Col {
	return &expr.Col{Table: table, Column: name, Name: p.q.From[table].Alias + "." + name, Index: -1}
}

func (p *parser) constant(c *pg.A_Const) (expr.Expr, error) {
	if c.Isnull {
		return &expr.Const{}, nil
	}
	switch v := c.Val.(type) {
	case *pg.A_Const_Ival:
		return &expr.Const{V: row.Int(int64(v.Ival.Ival))}, nil
	case *pg.A_Const_Fval:
		val, err := numericLiteral(v.Fval.Fval)
		if err != nil {
			p.errAt(c.Location, "%v", err)
			return nil, errRefused
		}
		return &expr.Const{V: val}, nil
	case *pg.A_Const_Boolval:
		return &expr.Const{V: row.Bool(v.Boolval.Boolval)}, nil
	case *pg.A_Const_Sval:
		return &expr.Lit{Text: v.Sval.Sval}, nil
	}
	p.errAt(c.Location, "bit-string literals are not supported")
	return nil, errRefused
}

// numericLiteral reads a numeric literal libpg_query keeps as text: an
// integer too large for int4 (int8 when it fits, as PostgreSQL), or a
// numeric ("1.5", "1e3" = 1000, "1.5e-3" = 0.0015).
func numericLiteral(s string) (row.Value, error) {
	if !strings.ContainsAny(s, ".eE") {
		if x, err := strconv.ParseInt(s, 10, 64); err == nil {
			return row.Int(x), nil
		}
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		var err error
		if exp, err = strconv.Atoi(s[i+1:]); err != nil {
			return row.Value{}, fmt.Errorf("bad numeric literal %s", s)
		}
		mant = s[:i]
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		digits = "0"
	}
	unscaled, ok := new(big.Int).SetString(digits, 10)
	if !ok {
		return row.Value{}, fmt.Errorf("bad numeric literal %s", s)
	}
	scale := len(frac) - exp
	if scale < 0 {
		unscaled.Mul(unscaled, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-scale)), nil))
		scale = 0
	}
	txt := unscaled.String()
	for len(txt) <= scale {
		txt = "0" + txt
	}
	if scale > 0 {
		txt = txt[:len(txt)-scale] + "." + txt[len(txt)-scale:]
	}
	if neg {
		txt = "-" + txt
	}
	return row.Decimal(txt), nil
}

func opName(names []*pg.Node) string {
	if len(names) == 0 {
		return ""
	}
	return names[len(names)-1].GetString_().GetSval()
}

func (p *parser) aexpr(a *pg.A_Expr, clause string) (expr.Expr, error) {
	op := opName(a.Name)
	var l, r expr.Expr
	var err error
	if a.Lexpr != nil {
		if l, err = p.expr(a.Lexpr, clause); err != nil {
			return nil, err
		}
	}
	if a.Kind == pg.A_Expr_Kind_AEXPR_IN || a.Kind == pg.A_Expr_Kind_AEXPR_BETWEEN || a.Kind == pg.A_Expr_Kind_AEXPR_NOT_BETWEEN {
		list := a.Rexpr.GetList()
		if list == nil {
			p.errAt(a.Location, "IN needs a list of values (subqueries are not supported)")
			return nil, errRefused
		}
		items, err := p.exprs(list.Items, clause)
		if err != nil {
			return nil, err
		}
		switch a.Kind {
		case pg.A_Expr_Kind_AEXPR_IN:
			in := &expr.In{X: l, List: items, Not: op == "<>"}
			return in, p.checkIn(in, a.Location)
		case pg.A_Expr_Kind_AEXPR_BETWEEN:
			return p.typed(&expr.And{Args: []expr.Expr{&expr.Cmp{Op: expr.Ge, L: l, R: items[0]}, &expr.Cmp{Op: expr.Le, L: l, R: items[1]}}}, a.Location)
		default:
			return p.typed(&expr.Or{Args: []expr.Expr{&expr.Cmp{Op: expr.Lt, L: l, R: items[0]}, &expr.Cmp{Op: expr.Gt, L: l, R: items[1]}}}, a.Location)
		}
	}
	if a.Rexpr != nil {
		if f := a.Rexpr.GetFuncCall(); f != nil && (a.Kind == pg.A_Expr_Kind_AEXPR_LIKE || a.Kind == pg.A_Expr_Kind_AEXPR_ILIKE) && opName(f.Funcname) == "like_escape" {
			p.errAt(a.Location, "LIKE … ESCAPE is not supported: the escape character is the backslash")
			return nil, errRefused
		}
		if r, err = p.expr(a.Rexpr, clause); err != nil {
			return nil, err
		}
	}
	switch a.Kind {
	case pg.A_Expr_Kind_AEXPR_OP:
		if l == nil {
			switch op {
			case "-":
				return &expr.Neg{X: r}, nil
			case "+":
				return r, nil
			}
			p.errAt(a.Location, "prefix operator %s is not supported", op)
			return nil, errRefused
		}
		switch op {
		case "=", "<>", "<", "<=", ">", ">=":
			c := &expr.Cmp{Op: map[string]expr.CmpOp{"=": expr.Eq, "<>": expr.Ne, "<": expr.Lt, "<=": expr.Le, ">": expr.Gt, ">=": expr.Ge}[op], L: l, R: r}
			return p.typed(c, a.Location)
		case "+", "-", "*", "/", "%":
			return p.typed(&expr.Arith{Op: op[0], L: l, R: r}, a.Location)
		case "||":
			return &expr.Concat{L: l, R: r}, nil
		case "~~", "!~~":
			return p.typed(&expr.Like{X: l, Pattern: r, Not: op == "!~~"}, a.Location)
		case "~~*", "!~~*":
			return p.typed(&expr.Like{X: &expr.Func{Name: "lower", X: l}, Pattern: &expr.Func{Name: "lower", X: r}, Not: op == "!~~*"}, a.Location)
		}
		p.errAt(a.Location, "operator %s is not supported (supported: = <> < <= > >= + - * / %% || LIKE)", op)
	case pg.A_Expr_Kind_AEXPR_LIKE:
		return p.typed(&expr.Like{X: l, Pattern: r, Not: op == "!~~"}, a.Location)
	case pg.A_Expr_Kind_AEXPR_ILIKE:
		return p.typed(&expr.Like{X: &expr.Func{Name: "lower", X: l}, Pattern: &expr.Func{Name: "lower", X: r}, Not: op == "!~~*"}, a.Location)
	case pg.A_Expr_Kind_AEXPR_DISTINCT:
		return p.typed(&expr.Distinct{L: l, R: r}, a.Location)
	case pg.A_Expr_Kind_AEXPR_NOT_DISTINCT:
		return p.typed(&expr.Distinct{L: l, R: r, Not: true}, a.Location)
	case pg.A_Expr_Kind_AEXPR_NULLIF:
		return p.typed(&expr.NullIf{L: l, R: r}, a.Location)
	case pg.A_Expr_Kind_AEXPR_SIMILAR:
		p.errAt(a.Location, "SIMILAR TO is not supported: use LIKE")
	case pg.A_Expr_Kind_AEXPR_OP_ANY, pg.A_Expr_Kind_AEXPR_OP_ALL:
		p.errAt(a.Location, "ANY/ALL is not supported: use IN (…)")
	default:
		p.errAt(a.Location, "this operator is not supported (supported: = <> < <= > >= + - * / %% || LIKE IN BETWEEN IS [NOT] DISTINCT FROM)")
	}
	return nil, errRefused
}

func (p *parser) funcCall(f *pg.FuncCall, clause string) (expr.Expr, error) {
	name := opName(f.Funcname)
	if f.Over != nil {
		p.errAt(f.Location, "window functions are not supported")
		return nil, errRefused
	}
	if f.AggStar || f.AggDistinct || len(f.AggOrder) > 0 || f.AggFilter != nil {
		p.errAt(f.Location, "aggregates are not supported: cdcjoin maintains joins (aggregate in ClickHouse)")
		return nil, errRefused
	}
	switch name {
	case "lower", "upper":
		if len(f.Args) != 1 {
			p.errAt(f.Location, "%s takes one argument", name)
			return nil, errRefused
		}
		x, err := p.expr(f.Args[0], clause)
		if err != nil {
			return nil, err
		}
		return &expr.Func{Name: name, X: x}, nil
	case "count", "sum", "min", "max", "avg", "array_agg", "string_agg":
		p.errAt(f.Location, "aggregates are not supported: cdcjoin maintains joins (aggregate in ClickHouse)")
	case "now", "current_timestamp", "clock_timestamp", "random":
		p.errAt(f.Location, "%s() is not supported: a join's output must not depend on when it runs", name)
	default:
		p.errAt(f.Location, "function %s is not supported (supported: lower, upper, COALESCE, NULLIF, CASE)", name)
	}
	return nil, errRefused
}

func (p *parser) caseExpr(c *pg.CaseExpr, clause string) (expr.Expr, error) {
	out := &expr.Case{}
	var err error
	if c.Arg != nil {
		if out.Operand, err = p.expr(c.Arg, clause); err != nil {
			return nil, err
		}
	}
	for _, w := range c.Args {
		cw := w.GetCaseWhen()
		cond, err1 := p.expr(cw.Expr, clause)
		res, err2 := p.expr(cw.Result, clause)
		if err1 != nil || err2 != nil {
			return nil, errRefused
		}
		out.When = append(out.When, cond)
		out.Then = append(out.Then, res)
	}
	if c.Defresult != nil {
		if out.Else, err = p.expr(c.Defresult, clause); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// castKinds maps PostgreSQL type names (as libpg_query spells them) to
// value kinds.
var castKinds = map[string]row.Kind{
	"int2": row.KindInt, "int4": row.KindInt, "int8": row.KindInt, "smallint": row.KindInt,
	"integer": row.KindInt, "bigint": row.KindInt, "int": row.KindInt,
	"numeric": row.KindDecimal, "decimal": row.KindDecimal,
	"float4": row.KindFloat, "float8": row.KindFloat, "real": row.KindFloat,
	"text": row.KindString, "varchar": row.KindString, "bpchar": row.KindString,
	"bool": row.KindBool, "boolean": row.KindBool,
	"date": row.KindDate, "timestamp": row.KindTimestamp, "timestamptz": row.KindTimestamp,
	"time": row.KindTime, "bytea": row.KindBytes,
}

func (p *parser) cast(c *pg.TypeCast, clause string) (expr.Expr, error) {
	names := c.TypeName.Names
	tname := opName(names)
	k, ok := castKinds[tname]
	if tname == "interval" {
		p.errAt(c.Location, "INTERVAL belongs to the time bound of a time join: declare tables.<t>.time (the event-time column) on both tables to write one (README, Time joins in SQL); a join of CDC tables has no time bound")
		return nil, errRefused
	}
	if !ok || len(c.TypeName.ArrayBounds) > 0 {
		p.errAt(c.Location, "a cast to %s is not supported (supported: integer types, numeric, real, double precision, text, varchar, boolean, date, timestamp, timestamptz, time, bytea)", tname)
		return nil, errRefused
	}
	x, err := p.expr(c.Arg, clause)
	if err != nil {
		return nil, err
	}
	if l, isLit := x.(*expr.Lit); isLit {
		v, err := (&expr.Cast{X: l, To: k, Name: tname}).Eval(nil)
		if err != nil {
			p.errAt(c.Location, "%v", err)
			return nil, errRefused
		}
		return &expr.Const{V: v}, nil
	}
	return &expr.Cast{X: x, To: k, Name: tname}, nil
}

// kindOf is the kind e is statically known to have: declared column
// types, constants; 0 when unknown.
func (p *parser) kindOf(e expr.Expr) row.Kind {
	switch x := e.(type) {
	case *expr.Col:
		return p.q.Tables[x.Table].Kinds[x.Column]
	case *expr.Const:
		return x.V.Kind
	case *expr.Cast:
		return x.To
	case *expr.Concat, *expr.Func:
		return row.KindString
	}
	return 0
}

func compatible(a, b row.Kind) bool {
	num := func(k row.Kind) bool { return k == row.KindInt || k == row.KindDecimal || k == row.KindFloat }
	dt := func(k row.Kind) bool { return k == row.KindDate || k == row.KindTimestamp }
	return a == 0 || b == 0 || a == b || (num(a) && num(b)) || (dt(a) && dt(b))
}

// typed checks a binary operation's operands against what is known of
// their types, and reads a string literal compared with a typed column
// as that type now (an invalid literal is a problem of the query).
func (p *parser) typed(e expr.Expr, loc int32) (expr.Expr, error) {
	check := func(l, r *expr.Expr) bool {
		lk, rk := p.kindOf(*l), p.kindOf(*r)
		if lit, ok := (*r).(*expr.Lit); ok && lk != 0 && lk != row.KindString {
			v, err := (&expr.Cast{X: lit, To: lk, Name: lk.String()}).Eval(nil)
			if err != nil {
				p.errAt(loc, "%v", err)
				return false
			}
			*r = &expr.Const{V: v}
			return true
		}
		if lit, ok := (*l).(*expr.Lit); ok && rk != 0 && rk != row.KindString {
			v, err := (&expr.Cast{X: lit, To: rk, Name: rk.String()}).Eval(nil)
			if err != nil {
				p.errAt(loc, "%v", err)
				return false
			}
			*l = &expr.Const{V: v}
			return true
		}
		if lk == row.KindNull || rk == row.KindNull {
			return true // a NULL constant
		}
		if !compatible(lk, rk) {
			p.errAt(loc, "operator does not exist: %s %s %s", expr.KindName(lk), opText(e), expr.KindName(rk))
			return false
		}
		return true
	}
	ok := true
	switch x := e.(type) {
	case *expr.Cmp:
		ok = check(&x.L, &x.R)
	case *expr.Distinct:
		ok = check(&x.L, &x.R)
	case *expr.NullIf:
		ok = check(&x.L, &x.R)
	case *expr.Arith:
		ok = check(&x.L, &x.R)
	case *expr.And:
		for _, a := range x.Args {
			if c, isCmp := a.(*expr.Cmp); isCmp {
				ok = check(&c.L, &c.R) && ok
			}
		}
	case *expr.Or:
		for _, a := range x.Args {
			if c, isCmp := a.(*expr.Cmp); isCmp {
				ok = check(&c.L, &c.R) && ok
			}
		}
	case *expr.Like:
		for _, s := range []expr.Expr{x.X, x.Pattern} {
			if k := p.kindOf(s); k != 0 && k != row.KindString && k != row.KindNull {
				p.errAt(loc, "operator does not exist: %s ~~ text (LIKE needs text)", expr.KindName(k))
				ok = false
			}
		}
	}
	if !ok {
		return nil, errRefused
	}
	return e, nil
}

func (p *parser) checkIn(in *expr.In, loc int32) error {
	for i := range in.List {
		c := &expr.Cmp{Op: expr.Eq, L: in.X, R: in.List[i]}
		if _, err := p.typed(c, loc); err != nil {
			return err
		}
		in.List[i] = c.R
	}
	return nil
}

func opText(e expr.Expr) string {
	switch x := e.(type) {
	case *expr.Cmp:
		return x.Op.String()
	case *expr.Arith:
		return string(x.Op)
	case *expr.Distinct:
		return "IS DISTINCT FROM"
	}
	return "="
}

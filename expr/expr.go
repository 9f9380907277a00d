package expr

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/cdcjoin/cdcjoin/row"
)

// Expr is a scalar expression over a row. Eval returns its value for r: a
// KindBool value (or NULL) for conditions. String renders it for plans and
// messages, in SQL.
type Expr interface {
	Eval(r []row.Value) (row.Value, error)
	String() string
}

// IsTrue evaluates a condition: true only when e is TRUE (FALSE and NULL
// reject the row, as WHERE and ON do).
func IsTrue(e Expr, r []row.Value) (bool, error) {
	v, err := e.Eval(r)
	if err != nil {
		return false, err
	}
	return v.Kind == row.KindBool && v.Int != 0, nil
}

var (
	null       = row.Value{}
	trueVal    = row.Bool(true)
	falseVal   = row.Bool(false)
	errNotBool = "argument of %s must be type boolean, not %s"
)

// Col is a column of the row: Index into it. Table and Column name it
// logically (a query's table position and column, set by the compiler
// before it binds the expression to a row layout with Bind); Name is how
// String shows it.
type Col struct {
	Index  int
	Table  int
	Column string
	Name   string
}

// Eval implements Expr. An unresolved TOAST placeholder reads as NULL.
func (c *Col) Eval(r []row.Value) (row.Value, error) {
	v := r[c.Index]
	if v.Kind == row.KindUnavailable {
		return null, nil
	}
	return v, nil
}

func (c *Col) String() string { return c.Name }

// Const is a typed constant (a number, TRUE, NULL, a cast literal).
type Const struct{ V row.Value }

// Eval implements Expr.
func (c *Const) Eval([]row.Value) (row.Value, error) { return c.V, nil }

func (c *Const) String() string { return literalSQL(c.V) }

// Lit is a string literal: of unknown type until it meets a typed operand
// (then it is read as that type), text otherwise.
type Lit struct{ Text string }

// Eval implements Expr (the literal as text).
func (l *Lit) Eval([]row.Value) (row.Value, error) { return row.String(l.Text), nil }

func (l *Lit) String() string { return quoteSQL(l.Text) }

func quoteSQL(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func literalSQL(v row.Value) string {
	switch v.Kind {
	case row.KindNull:
		return "NULL"
	case row.KindBool:
		if v.Int != 0 {
			return "TRUE"
		}
		return "FALSE"
	case row.KindInt, row.KindDecimal, row.KindFloat:
		return v.Text()
	}
	return quoteSQL(v.Text())
}

// pair evaluates a binary operation's operands, reading a string literal
// on one side as the type of the other.
func pair(l, r Expr, rw []row.Value) (a, b row.Value, err error) {
	if a, err = l.Eval(rw); err != nil {
		return
	}
	if b, err = r.Eval(rw); err != nil {
		return
	}
	return unify(l, r, a, b)
}

func unify(l, r Expr, a, b row.Value) (row.Value, row.Value, error) {
	_, la := l.(*Lit)
	_, lb := r.(*Lit)
	var err error
	switch {
	case la && !lb && b.Kind != row.KindNull && b.Kind != row.KindString:
		a, err = coerce(a.Str, b.Kind)
	case lb && !la && a.Kind != row.KindNull && a.Kind != row.KindString:
		b, err = coerce(b.Str, a.Kind)
	}
	return a, b, err
}

// CmpOp is a comparison operator.
type CmpOp uint8

// Comparison operators.
const (
	Eq CmpOp = iota + 1
	Ne
	Lt
	Le
	Gt
	Ge
)

var cmpNames = [...]string{Eq: "=", Ne: "<>", Lt: "<", Le: "<=", Gt: ">", Ge: ">="}

func (o CmpOp) String() string { return cmpNames[o] }

func (o CmpOp) holds(c int) bool {
	switch o {
	case Eq:
		return c == 0
	case Ne:
		return c != 0
	case Lt:
		return c < 0
	case Le:
		return c <= 0
	case Gt:
		return c > 0
	}
	return c >= 0
}

// Cmp is `L op R`: NULL when either is NULL.
type Cmp struct {
	Op   CmpOp
	L, R Expr
}

// Eval implements Expr.
func (c *Cmp) Eval(r []row.Value) (row.Value, error) {
	a, b, err := pair(c.L, c.R, r)
	if err != nil || a.Kind == row.KindNull || b.Kind == row.KindNull {
		return null, err
	}
	n, err := compare(a, b)
	if err != nil {
		return null, fmt.Errorf("%s: %w", c, err)
	}
	return row.Bool(c.Op.holds(n)), nil
}

func (c *Cmp) String() string { return binary(c.L, c.Op.String(), c.R) }

func binary(l Expr, op string, r Expr) string {
	return paren(l) + " " + op + " " + paren(r)
}

func paren(e Expr) string {
	switch e.(type) {
	case *Col, *Const, *Lit, *Func, *Coalesce, *Case, *Cast, *NullIf:
		return e.String()
	}
	return "(" + e.String() + ")"
}

// Distinct is `L IS [NOT] DISTINCT FROM R`: never NULL; NULL is not
// distinct from NULL.
type Distinct struct {
	Not  bool
	L, R Expr
}

// Eval implements Expr.
func (d *Distinct) Eval(r []row.Value) (row.Value, error) {
	a, b, err := pair(d.L, d.R, r)
	if err != nil {
		return null, err
	}
	var distinct bool
	switch {
	case a.Kind == row.KindNull || b.Kind == row.KindNull:
		distinct = (a.Kind == row.KindNull) != (b.Kind == row.KindNull)
	default:
		n, err := compare(a, b)
		if err != nil {
			return null, fmt.Errorf("%s: %w", d, err)
		}
		distinct = n != 0
	}
	return row.Bool(distinct != d.Not), nil
}

func (d *Distinct) String() string {
	if d.Not {
		return binary(d.L, "IS NOT DISTINCT FROM", d.R)
	}
	return binary(d.L, "IS DISTINCT FROM", d.R)
}

// truth reads a condition's value: 1 true, 0 false, -1 NULL.
func truth(v row.Value, what string) (int, error) {
	switch v.Kind {
	case row.KindNull:
		return -1, nil
	case row.KindBool:
		return int(v.Int & 1), nil
	}
	return 0, fmt.Errorf(errNotBool, what, KindName(v.Kind))
}

// And is the conjunction of Args (three-valued).
type And struct{ Args []Expr }

// Eval implements Expr.
func (a *And) Eval(r []row.Value) (row.Value, error) {
	sawNull := false
	for _, x := range a.Args {
		v, err := x.Eval(r)
		if err != nil {
			return null, err
		}
		t, err := truth(v, "AND")
		if err != nil {
			return null, err
		}
		if t == 0 {
			return falseVal, nil
		}
		sawNull = sawNull || t < 0
	}
	if sawNull {
		return null, nil
	}
	return trueVal, nil
}

func (a *And) String() string { return joinArgs(a.Args, " AND ") }

func joinArgs(args []Expr, sep string) string {
	parts := make([]string, len(args))
	for i, x := range args {
		parts[i] = paren(x)
	}
	return strings.Join(parts, sep)
}

// Or is the disjunction of Args (three-valued).
type Or struct{ Args []Expr }

// Eval implements Expr.
func (o *Or) Eval(r []row.Value) (row.Value, error) {
	sawNull := false
	for _, x := range o.Args {
		v, err := x.Eval(r)
		if err != nil {
			return null, err
		}
		t, err := truth(v, "OR")
		if err != nil {
			return null, err
		}
		if t == 1 {
			return trueVal, nil
		}
		sawNull = sawNull || t < 0
	}
	if sawNull {
		return null, nil
	}
	return falseVal, nil
}

func (o *Or) String() string { return joinArgs(o.Args, " OR ") }

// Not is NOT X (NOT NULL is NULL).
type Not struct{ X Expr }

// Eval implements Expr.
func (n *Not) Eval(r []row.Value) (row.Value, error) {
	v, err := n.X.Eval(r)
	if err != nil {
		return null, err
	}
	t, err := truth(v, "NOT")
	if err != nil || t < 0 {
		return null, err
	}
	return row.Bool(t == 0), nil
}

func (n *Not) String() string { return "NOT " + paren(n.X) }

// IsNull is `X IS [NOT] NULL`.
type IsNull struct {
	X   Expr
	Not bool
}

// Eval implements Expr.
func (n *IsNull) Eval(r []row.Value) (row.Value, error) {
	v, err := n.X.Eval(r)
	if err != nil {
		return null, err
	}
	return row.Bool((v.Kind == row.KindNull) != n.Not), nil
}

func (n *IsNull) String() string {
	if n.Not {
		return paren(n.X) + " IS NOT NULL"
	}
	return paren(n.X) + " IS NULL"
}

// IsBool is `X IS [NOT] TRUE|FALSE|UNKNOWN` (never NULL).
type IsBool struct {
	X     Expr
	Not   bool
	Value int // 1 TRUE, 0 FALSE, -1 UNKNOWN
}

// Eval implements Expr.
func (b *IsBool) Eval(r []row.Value) (row.Value, error) {
	v, err := b.X.Eval(r)
	if err != nil {
		return null, err
	}
	t, err := truth(v, "IS "+[]string{"UNKNOWN", "FALSE", "TRUE"}[b.Value+1])
	if err != nil {
		return null, err
	}
	return row.Bool((t == b.Value) != b.Not), nil
}

func (b *IsBool) String() string {
	s := paren(b.X) + " IS "
	if b.Not {
		s += "NOT "
	}
	return s + []string{"UNKNOWN", "FALSE", "TRUE"}[b.Value+1]
}

// In is `X [NOT] IN (List…)`: `X = a OR X = b …` (NOT IN: its negation),
// three-valued.
type In struct {
	X    Expr
	List []Expr
	Not  bool
}

// Eval implements Expr.
func (in *In) Eval(r []row.Value) (row.Value, error) {
	x, err := in.X.Eval(r)
	if err != nil {
		return null, err
	}
	sawNull := false
	for _, e := range in.List {
		v, err := e.Eval(r)
		if err != nil {
			return null, err
		}
		a, b, err := unify(in.X, e, x, v)
		if err != nil {
			return null, err
		}
		if a.Kind == row.KindNull || b.Kind == row.KindNull {
			sawNull = true
			continue
		}
		n, err := compare(a, b)
		if err != nil {
			return null, fmt.Errorf("%s: %w", in, err)
		}
		if n == 0 {
			return row.Bool(!in.Not), nil
		}
	}
	if sawNull {
		return null, nil
	}
	return row.Bool(in.Not), nil
}

func (in *In) String() string {
	op := " IN ("
	if in.Not {
		op = " NOT IN ("
	}
	return paren(in.X) + op + joinArgs(in.List, ", ") + ")"
}

// Like is `X [NOT] LIKE Pattern` (case-sensitive; `\` escapes).
type Like struct {
	X, Pattern Expr
	Not        bool
}

// Eval implements Expr.
func (l *Like) Eval(r []row.Value) (row.Value, error) {
	x, err := l.X.Eval(r)
	if err != nil {
		return null, err
	}
	p, err := l.Pattern.Eval(r)
	if err != nil || x.Kind == row.KindNull || p.Kind == row.KindNull {
		return null, err
	}
	if x.Kind != row.KindString || p.Kind != row.KindString {
		return null, fmt.Errorf("%s: LIKE needs text operands, not %s and %s", l, KindName(x.Kind), KindName(p.Kind))
	}
	m, err := like(x.Str, p.Str)
	if err != nil {
		return null, err
	}
	return row.Bool(m != l.Not), nil
}

func (l *Like) String() string {
	if l.Not {
		return binary(l.X, "NOT LIKE", l.Pattern)
	}
	return binary(l.X, "LIKE", l.Pattern)
}

// like matches s against a LIKE pattern, character by character (UTF-8),
// with backtracking over `%`.
func like(s, p string) (bool, error) {
	sr, pr := []rune(s), []rune(p)
	// Validate escapes first: a pattern ending in an escape is an error.
	for i := 0; i < len(pr); i++ {
		if pr[i] == '\\' {
			if i+1 == len(pr) {
				return false, fmt.Errorf("LIKE pattern must not end with escape character")
			}
			i++
		}
	}
	return likeAt(sr, pr), nil
}

func likeAt(s, p []rune) bool {
	for len(p) > 0 {
		switch p[0] {
		case '%':
			for len(p) > 0 && p[0] == '%' {
				p = p[1:]
			}
			if len(p) == 0 {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if likeAt(s[i:], p) {
					return true
				}
			}
			return false
		case '_':
			if len(s) == 0 {
				return false
			}
			s, p = s[1:], p[1:]
		default:
			c := p[0]
			if c == '\\' {
				p = p[1:]
				c = p[0]
			}
			if len(s) == 0 || s[0] != c {
				return false
			}
			s, p = s[1:], p[1:]
		}
	}
	return len(s) == 0
}

// Arith is `L op R` for op + - * / %.
type Arith struct {
	Op   byte
	L, R Expr
}

// Eval implements Expr.
func (a *Arith) Eval(r []row.Value) (row.Value, error) {
	x, y, err := pair(a.L, a.R, r)
	if err != nil || x.Kind == row.KindNull || y.Kind == row.KindNull {
		return null, err
	}
	v, err := arith(a.Op, x, y)
	if err != nil {
		return null, fmt.Errorf("%s: %w", a, err)
	}
	return v, nil
}

func (a *Arith) String() string { return binary(a.L, string(a.Op), a.R) }

func arith(op byte, x, y row.Value) (row.Value, error) {
	if !numeric(x.Kind) || !numeric(y.Kind) {
		return null, fmt.Errorf("operator does not exist: %s %c %s", KindName(x.Kind), op, KindName(y.Kind))
	}
	switch {
	case x.Kind == row.KindFloat || y.Kind == row.KindFloat:
		fx, err := toFloat(x)
		if err != nil {
			return null, err
		}
		fy, err := toFloat(y)
		if err != nil {
			return null, err
		}
		var f float64
		switch op {
		case '+':
			f = fx + fy
		case '-':
			f = fx - fy
		case '*':
			f = fx * fy
		case '/':
			if fy == 0 {
				return null, fmt.Errorf("division by zero")
			}
			f = fx / fy
		default:
			return null, fmt.Errorf("operator does not exist: double precision %% double precision")
		}
		if math.IsInf(f, 0) && !math.IsInf(fx, 0) && !math.IsInf(fy, 0) {
			return null, fmt.Errorf("value out of range: overflow")
		}
		return row.Float(f), nil
	case x.Kind == row.KindInt && y.Kind == row.KindInt:
		return intArith(op, x.Int, y.Int)
	}
	dx, err := toDec(x)
	if err != nil {
		return null, err
	}
	dy, err := toDec(y)
	if err != nil {
		return null, err
	}
	switch op {
	case '+':
		return row.Decimal(dx.add(dy, false).String()), nil
	case '-':
		return row.Decimal(dx.add(dy, true).String()), nil
	case '*':
		return row.Decimal(dx.mul(dy).String()), nil
	}
	return null, fmt.Errorf("numeric %c is not supported (only + - * on numeric values)", op)
}

func intArith(op byte, a, b int64) (row.Value, error) {
	overflow := fmt.Errorf("bigint out of range")
	switch op {
	case '+':
		s := a + b
		if (a > 0 && b > 0 && s < 0) || (a < 0 && b < 0 && s >= 0) {
			return null, overflow
		}
		return row.Int(s), nil
	case '-':
		s := a - b
		if (a >= 0 && b < 0 && s < 0) || (a < 0 && b > 0 && s >= 0) {
			return null, overflow
		}
		return row.Int(s), nil
	case '*':
		if a == 0 || b == 0 {
			return row.Int(0), nil
		}
		hi, lo := bits.Mul64(uint64(abs(a)), uint64(abs(b)))
		neg := (a < 0) != (b < 0)
		if hi != 0 || lo > 1<<63 || (lo == 1<<63 && !neg) {
			return null, overflow
		}
		return row.Int(a * b), nil
	case '/', '%':
		if b == 0 {
			return null, fmt.Errorf("division by zero")
		}
		if a == math.MinInt64 && b == -1 {
			if op == '%' {
				return row.Int(0), nil
			}
			return null, overflow
		}
		if op == '/' {
			return row.Int(a / b), nil
		}
		return row.Int(a % b), nil
	}
	return null, fmt.Errorf("unknown operator %c", op)
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// Neg is unary minus.
type Neg struct{ X Expr }

// Eval implements Expr.
func (n *Neg) Eval(r []row.Value) (row.Value, error) {
	v, err := n.X.Eval(r)
	if err != nil || v.Kind == row.KindNull {
		return null, err
	}
	if _, lit := n.X.(*Lit); lit {
		if v, err = coerce(v.Str, row.KindDecimal); err != nil {
			return null, err
		}
	}
	return arith('-', row.Int(0), v)
}

func (n *Neg) String() string { return "-" + paren(n.X) }

// Concat is `L || R` (text; NULL if either is NULL).
type Concat struct{ L, R Expr }

// Eval implements Expr.
func (c *Concat) Eval(r []row.Value) (row.Value, error) {
	a, err := c.L.Eval(r)
	if err != nil {
		return null, err
	}
	b, err := c.R.Eval(r)
	if err != nil || a.Kind == row.KindNull || b.Kind == row.KindNull {
		return null, err
	}
	sa, err := textOf(a)
	if err != nil {
		return null, fmt.Errorf("%s: %w", c, err)
	}
	sb, err := textOf(b)
	if err != nil {
		return null, fmt.Errorf("%s: %w", c, err)
	}
	return row.String(sa + sb), nil
}

func (c *Concat) String() string { return binary(c.L, "||", c.R) }

// textOf renders v as PostgreSQL's text output does, for the kinds whose
// rendering is the same here.
func textOf(v row.Value) (string, error) {
	switch v.Kind {
	case row.KindString, row.KindInt, row.KindDecimal, row.KindBool:
		return v.Text(), nil
	case row.KindDate:
		return time.Unix(v.Int*86400, 0).UTC().Format("2006-01-02"), nil
	case row.KindFloat:
		return pgFloat(v.Float), nil
	}
	return "", fmt.Errorf("%s values cannot be concatenated as text (cast them in the source or select them as a column)", KindName(v.Kind))
}

// pgFloat renders a float8 as PostgreSQL 12+ does.
func pgFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// Coalesce is COALESCE(Args…): the first non-NULL.
type Coalesce struct{ Args []Expr }

// Eval implements Expr.
func (c *Coalesce) Eval(r []row.Value) (row.Value, error) {
	for _, x := range c.Args {
		v, err := x.Eval(r)
		if err != nil || v.Kind != row.KindNull {
			return v, err
		}
	}
	return null, nil
}

func (c *Coalesce) String() string { return "COALESCE(" + joinArgs(c.Args, ", ") + ")" }

// NullIf is NULLIF(L, R): NULL when L = R, else L.
type NullIf struct{ L, R Expr }

// Eval implements Expr.
func (n *NullIf) Eval(r []row.Value) (row.Value, error) {
	a, b, err := pair(n.L, n.R, r)
	if err != nil || a.Kind == row.KindNull {
		return a, err
	}
	if b.Kind == row.KindNull {
		return a, nil
	}
	c, err := compare(a, b)
	if err != nil {
		return null, fmt.Errorf("%s: %w", n, err)
	}
	if c == 0 {
		return null, nil
	}
	return a, nil
}

func (n *NullIf) String() string { return "NULLIF(" + n.L.String() + ", " + n.R.String() + ")" }

// Case is CASE [Operand] WHEN … THEN … [ELSE …] END: the first WHEN that
// is TRUE (searched) or equal to Operand (simple) gives its THEN; else
// Else (NULL when nil).
type Case struct {
	Operand Expr // nil: a searched CASE
	When    []Expr
	Then    []Expr
	Else    Expr
}

// Eval implements Expr.
func (c *Case) Eval(r []row.Value) (row.Value, error) {
	var op row.Value
	if c.Operand != nil {
		var err error
		if op, err = c.Operand.Eval(r); err != nil {
			return null, err
		}
	}
	for i, w := range c.When {
		var hit bool
		if c.Operand == nil {
			var err error
			if hit, err = IsTrue(w, r); err != nil {
				return null, err
			}
		} else {
			v, err := w.Eval(r)
			if err != nil {
				return null, err
			}
			a, b, err := unify(c.Operand, w, op, v)
			if err != nil {
				return null, err
			}
			if a.Kind != row.KindNull && b.Kind != row.KindNull {
				n, err := compare(a, b)
				if err != nil {
					return null, fmt.Errorf("%s: %w", c, err)
				}
				hit = n == 0
			}
		}
		if hit {
			return c.Then[i].Eval(r)
		}
	}
	if c.Else == nil {
		return null, nil
	}
	return c.Else.Eval(r)
}

func (c *Case) String() string {
	var b strings.Builder
	b.WriteString("CASE")
	if c.Operand != nil {
		b.WriteString(" " + c.Operand.String())
	}
	for i := range c.When {
		b.WriteString(" WHEN " + c.When[i].String() + " THEN " + c.Then[i].String())
	}
	if c.Else != nil {
		b.WriteString(" ELSE " + c.Else.String())
	}
	b.WriteString(" END")
	return b.String()
}

// Func is lower(X) or upper(X) (ASCII letters, the "C" locale).
type Func struct {
	Name string // "lower" or "upper"
	X    Expr
}

// Eval implements Expr.
func (f *Func) Eval(r []row.Value) (row.Value, error) {
	v, err := f.X.Eval(r)
	if err != nil || v.Kind == row.KindNull {
		return null, err
	}
	if v.Kind != row.KindString {
		return null, fmt.Errorf("function %s(%s) does not exist", f.Name, KindName(v.Kind))
	}
	b := []byte(v.Str)
	for i, c := range b {
		if f.Name == "lower" && c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		} else if f.Name == "upper" && c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return row.String(string(b)), nil
}

func (f *Func) String() string { return f.Name + "(" + f.X.String() + ")" }

// Cast is X::To for the casts PostgreSQL performs the same way here: a
// string literal read as To, integer and numeric widening, and text of
// text-renderable values.
type Cast struct {
	X    Expr
	To   row.Kind
	Name string // the type as written, for String
}

// Eval implements Expr.
func (c *Cast) Eval(r []row.Value) (row.Value, error) {
	v, err := c.X.Eval(r)
	if err != nil || v.Kind == row.KindNull {
		return null, err
	}
	if _, lit := c.X.(*Lit); lit || (v.Kind == row.KindString && c.To != row.KindString) {
		return coerce(v.Str, c.To)
	}
	switch {
	case v.Kind == c.To:
		return v, nil
	case c.To == row.KindString:
		s, err := textOf(v)
		if err != nil {
			return null, err
		}
		return row.String(s), nil
	case c.To == row.KindDecimal && v.Kind == row.KindInt:
		return row.Decimal(strconv.FormatInt(v.Int, 10)), nil
	case c.To == row.KindFloat && numeric(v.Kind):
		f, err := toFloat(v)
		return row.Float(f), err
	}
	return null, fmt.Errorf("cannot cast %s to %s", KindName(v.Kind), c.Name)
}

func (c *Cast) String() string { return paren(c.X) + "::" + c.Name }

package expr

import "slices"

// Children returns e's direct sub-expressions.
func Children(e Expr) []Expr {
	switch x := e.(type) {
	case *Cmp:
		return []Expr{x.L, x.R}
	case *Distinct:
		return []Expr{x.L, x.R}
	case *And:
		return x.Args
	case *Or:
		return x.Args
	case *Not:
		return []Expr{x.X}
	case *IsNull:
		return []Expr{x.X}
	case *IsBool:
		return []Expr{x.X}
	case *In:
		return append([]Expr{x.X}, x.List...)
	case *Like:
		return []Expr{x.X, x.Pattern}
	case *Arith:
		return []Expr{x.L, x.R}
	case *Neg:
		return []Expr{x.X}
	case *Concat:
		return []Expr{x.L, x.R}
	case *Coalesce:
		return x.Args
	case *NullIf:
		return []Expr{x.L, x.R}
	case *Case:
		out := []Expr{}
		if x.Operand != nil {
			out = append(out, x.Operand)
		}
		out = append(append(out, x.When...), x.Then...)
		if x.Else != nil {
			out = append(out, x.Else)
		}
		return out
	case *Func:
		return []Expr{x.X}
	case *Cast:
		return []Expr{x.X}
	}
	return nil
}

// Columns returns every column e refers to, in tree order.
func Columns(e Expr) []*Col {
	var out []*Col
	var walk func(Expr)
	walk = func(e Expr) {
		if c, ok := e.(*Col); ok {
			out = append(out, c)
			return
		}
		for _, k := range Children(e) {
			walk(k)
		}
	}
	walk(e)
	return out
}

// Tables returns the sorted, distinct tables e's columns belong to.
func Tables(e Expr) []int {
	var out []int
	for _, c := range Columns(e) {
		if !slices.Contains(out, c.Table) {
			out = append(out, c.Table)
		}
	}
	slices.Sort(out)
	return out
}

// Bind returns a copy of e whose columns read the row positions index
// gives them; e itself is left as is. An error of index aborts.
func Bind(e Expr, index func(*Col) (int, error)) (Expr, error) {
	var err error
	var bind func(Expr) Expr
	list := func(xs []Expr) []Expr {
		out := make([]Expr, len(xs))
		for i, x := range xs {
			out[i] = bind(x)
		}
		return out
	}
	bind = func(e Expr) Expr {
		if err != nil || e == nil {
			return e
		}
		switch x := e.(type) {
		case *Col:
			c := *x
			c.Index, err = index(x)
			return &c
		case *Cmp:
			return &Cmp{Op: x.Op, L: bind(x.L), R: bind(x.R)}
		case *Distinct:
			return &Distinct{Not: x.Not, L: bind(x.L), R: bind(x.R)}
		case *And:
			return &And{Args: list(x.Args)}
		case *Or:
			return &Or{Args: list(x.Args)}
		case *Not:
			return &Not{X: bind(x.X)}
		case *IsNull:
			return &IsNull{X: bind(x.X), Not: x.Not}
		case *IsBool:
			return &IsBool{X: bind(x.X), Not: x.Not, Value: x.Value}
		case *In:
			return &In{X: bind(x.X), List: list(x.List), Not: x.Not}
		case *Like:
			return &Like{X: bind(x.X), Pattern: bind(x.Pattern), Not: x.Not}
		case *Arith:
			return &Arith{Op: x.Op, L: bind(x.L), R: bind(x.R)}
		case *Neg:
			return &Neg{X: bind(x.X)}
		case *Concat:
			return &Concat{L: bind(x.L), R: bind(x.R)}
		case *Coalesce:
			return &Coalesce{Args: list(x.Args)}
		case *NullIf:
			return &NullIf{L: bind(x.L), R: bind(x.R)}
		case *Case:
			return &Case{Operand: bind(x.Operand), When: list(x.When), Then: list(x.Then), Else: bind(x.Else)}
		case *Func:
			return &Func{Name: x.Name, X: bind(x.X)}
		case *Cast:
			return &Cast{X: bind(x.X), To: x.To, Name: x.Name}
		}
		return e // constants and literals are immutable
	}
	out := bind(e)
	return out, err
}

// NonNullable returns the tables for which condition e, used as a filter
// (rows pass only when it is TRUE), can never pass when every column of
// the table is NULL: PostgreSQL's find_nonnullable_rels, which decides
// when an outer join can become an inner one. It is conservative: a table
// it leaves out may still be rejected.
func NonNullable(e Expr) []int { return nonNullable(e, true) }

func nonNullable(e Expr, top bool) []int {
	switch x := e.(type) {
	case *Col:
		return []int{x.Table}
	case *Cmp, *Arith, *Concat, *Func, *Like, *Neg:
		// Strict: NULL in, NULL out.
		var out []int
		for _, k := range Children(e) {
			out = union(out, nonNullable(k, false))
		}
		return out
	case *In:
		return nonNullable(x.X, false)
	case *Cast:
		return nonNullable(x.X, false)
	case *And:
		if top {
			var out []int
			for _, k := range x.Args {
				out = union(out, nonNullable(k, top))
			}
			return out
		}
		return intersectAll(x.Args, false)
	case *Or:
		return intersectAll(x.Args, top)
	case *Not:
		return nonNullable(x.X, false)
	case *IsNull:
		if x.Not && top {
			return nonNullable(x.X, false)
		}
	case *IsBool:
		// IS TRUE / IS NOT FALSE reject NULL at top level.
		if top && ((x.Value == 1 && !x.Not) || (x.Value == 0 && x.Not)) {
			return nonNullable(x.X, false)
		}
	}
	return nil
}

func intersectAll(args []Expr, top bool) []int {
	var out []int
	for i, k := range args {
		s := nonNullable(k, top)
		if i == 0 {
			out = s
			continue
		}
		var keep []int
		for _, t := range out {
			if slices.Contains(s, t) {
				keep = append(keep, t)
			}
		}
		out = keep
	}
	return out
}

func union(a, b []int) []int {
	for _, t := range b {
		if !slices.Contains(a, t) {
			a = append(a, t)
		}
	}
	slices.Sort(a)
	return a
}

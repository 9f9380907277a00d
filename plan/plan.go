// Package plan compiles a resolved query (package query) into the
// physical plan both drivers run: a chain of binary join stages, each
// keyed by its own join key, with the query's conditions pushed down as
// far as PostgreSQL's semantics allow, the columns each stage keeps, and
// whether the output needs a materializer keyed by the output row key.
// See /work/notes/shapes-design.md (mirrored in ARCHITECTURE.md) for the
// reasoning; Explain prints a plan for humans.
//
// The plan is pure data with bound expressions; it is immutable once
// compiled and safe to share.
package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cdcjoin/cdcjoin/expr"
	"github.com/cdcjoin/cdcjoin/query"
	"github.com/cdcjoin/cdcjoin/row"
)

// Kind is a join kind.
type Kind = query.JoinKind

// Join kinds.
const (
	Inner = query.Inner
	Left  = query.Left
	Right = query.Right
	Full  = query.Full
)

// Slot is one column of a row layout: Column of the FROM item Table.
type Slot struct {
	Table  int
	Column string
}

// Table is one FROM item: its input to the plan.
type Table struct {
	Alias string
	// Name is the key of the configuration's `tables`.
	Name string
	// Key is the primary key's columns.
	Key []string
	// Columns is the projection the decoder reads and the state keeps:
	// the key columns first, then every other column the query names.
	Columns []string
}

// Side is one input of a stage.
type Side struct {
	// Stage is the stage whose output this side is (1-based), or 0 for a
	// FROM item (Table).
	Stage int
	Table int
	// Tables are the FROM items whose columns the side's rows hold.
	Tables []int
	// Layout is the side's row, as stored by the stage.
	Layout []Slot
	// Key are the positions in Layout of the join key's columns, in the
	// order of the stage's key pairs.
	Key []int
	// ID are the positions in Layout of the key columns of every table in
	// Tables (the row's identity when it has no incarnation tags).
	ID []int
	// Filter keeps only the rows for which it is TRUE (nil: all): the
	// side's own conditions that may drop rows. Bound to Layout.
	Filter expr.Expr
	// Match is the condition a preserved side's row must meet to match
	// (nil: always): a row failing it stays, padded. Bound to Layout.
	Match expr.Expr
	// Single says that the join key is a function of the row's identity
	// (the key's columns on this side are key columns of its tables), so
	// that the side's rows, padded or not, always live at one key.
	Single bool
}

// Stage is a binary equi-join of two sides.
type Stage struct {
	N int // 1-based
	// Kind is the kind run (after outer-join reduction); Written the
	// kind the query wrote.
	Kind, Written Kind
	L, R          Side
	// Residual keeps only the output rows for which it is TRUE (nil:
	// all): INNER ON conditions on both sides and WHERE conditions placed
	// after this stage. Bound to Out.
	Residual expr.Expr
	// Out is the output row: OutL from L's layout, then OutR from R's.
	Out        []Slot
	OutL, OutR []int
	// Tagged says that the stage appends its join key to the identity of
	// the rows it emits (rows that can be emitted at more than one join
	// key: see Side.Single), for joined and for padded rows.
	TagJoined, TagPadL, TagPadR bool
}

// Output is one select-list column.
type Output struct {
	Name string
	// Expr is bound to the last stage's Out.
	Expr expr.Expr
	// Source is set when the item is a plain column.
	Source *Slot
	// Nullable says a padded side can make it NULL even when its column
	// is NOT NULL.
	Nullable bool
}

// Plan is a compiled query.
type Plan struct {
	Query  *query.Query
	Tables []Table
	Stages []Stage
	Select []Output
	// Materialize says the output goes through a materializer keyed by
	// the output row key (some stage tags its rows).
	Materialize bool
	// RowKey are the positions in the last stage's Out of every table's
	// key columns, in FROM order: the output row key.
	RowKey []int
	// KeyWidth is the number of key columns per FROM item.
	KeyWidth []int
}

// Last returns the last stage.
func (p *Plan) Last() *Stage { return &p.Stages[len(p.Stages)-1] }

// Names returns the output column names.
func (p *Plan) Names() []string {
	out := make([]string, len(p.Select))
	for i, s := range p.Select {
		out[i] = s.Name
	}
	return out
}

// Error is a compilation problem at a position of the query.
type Error = query.Error

func (s Slot) name(p *Plan) string { return p.Tables[s.Table].Alias + "." + s.Column }

func indexOfSlot(layout []Slot, s Slot) int {
	return slices.Index(layout, s)
}

func bindTo(e expr.Expr, layout []Slot) expr.Expr {
	if e == nil {
		return nil
	}
	b, err := expr.Bind(e, func(c *expr.Col) (int, error) {
		i := indexOfSlot(layout, Slot{c.Table, c.Column})
		if i < 0 {
			return 0, fmt.Errorf("cdcjoin: plan: column %s is not in the layout", c.Name)
		}
		return i, nil
	})
	if err != nil {
		panic(err) // the compiler keeps every column it binds: a bug
	}
	return b
}

func and(es []expr.Expr) expr.Expr {
	switch len(es) {
	case 0:
		return nil
	case 1:
		return es[0]
	}
	return &expr.And{Args: es}
}

func names(p *Plan, slots []Slot, idx []int) string {
	parts := make([]string, len(idx))
	for i, x := range idx {
		parts[i] = slots[x].name(p)
	}
	return strings.Join(parts, ", ")
}

// OutputTypes returns the select list's types, in order, given the types
// of the tables' columns (column: FROM item and column name; zero when
// unknown): a plain column's type, Optional when an outer join pads it;
// for expressions, the type their operands give (text for ||, lower,
// upper; boolean for conditions; the wider numeric type for arithmetic;
// the first known branch for COALESCE and CASE), always Optional.
func OutputTypes(p *Plan, column func(t int, col string) row.ColumnType) []row.ColumnType {
	out := make([]row.ColumnType, len(p.Select))
	last := p.Last()
	for i, o := range p.Select {
		if o.Source != nil {
			ct := column(o.Source.Table, o.Source.Column)
			if o.Nullable && ct.Known() {
				ct.Optional = true
			}
			out[i] = ct
			continue
		}
		ct := exprType(o.Expr, func(idx int) row.ColumnType {
			s := last.Out[idx]
			return column(s.Table, s.Column)
		})
		ct.Optional = true
		out[i] = ct
	}
	return out
}

func exprType(e expr.Expr, col func(int) row.ColumnType) row.ColumnType {
	switch x := e.(type) {
	case *expr.Col:
		return col(x.Index)
	case *expr.Const:
		return kindType(x.V.Kind)
	case *expr.Lit, *expr.Concat, *expr.Func:
		return kindType(row.KindString)
	case *expr.Cast:
		return kindType(x.To)
	case *expr.Cmp, *expr.Distinct, *expr.And, *expr.Or, *expr.Not, *expr.IsNull, *expr.IsBool, *expr.In, *expr.Like:
		return kindType(row.KindBool)
	case *expr.Neg:
		return exprType(x.X, col)
	case *expr.NullIf:
		return exprType(x.L, col)
	case *expr.Arith:
		a, b := exprType(x.L, col), exprType(x.R, col)
		switch {
		case a.Kind == row.KindFloat || b.Kind == row.KindFloat:
			return kindType(row.KindFloat)
		case a.Kind == row.KindDecimal || b.Kind == row.KindDecimal:
			return row.ColumnType{Kind: row.KindDecimal, Connect: "bytes", Scale: -1}
		case a.Kind == row.KindInt && b.Kind == row.KindInt:
			return kindType(row.KindInt)
		}
	case *expr.Coalesce:
		for _, a := range x.Args {
			if t := exprType(a, col); t.Known() {
				return t
			}
		}
	case *expr.Case:
		for _, a := range append(append([]expr.Expr{}, x.Then...), x.Else) {
			if a == nil {
				continue
			}
			if t := exprType(a, col); t.Known() {
				return t
			}
		}
	}
	return row.ColumnType{}
}

func kindType(k row.Kind) row.ColumnType {
	switch k {
	case row.KindInt:
		return row.ColumnType{Kind: k, Connect: "int64"}
	case row.KindFloat:
		return row.ColumnType{Kind: k, Connect: "float64"}
	case row.KindBool:
		return row.ColumnType{Kind: k, Connect: "boolean"}
	case row.KindString:
		return row.ColumnType{Kind: k, Connect: "string"}
	case row.KindDecimal:
		return row.ColumnType{Kind: k, Connect: "bytes", Scale: -1}
	case row.KindDate:
		return row.ColumnType{Kind: k, Connect: "int32", Logical: "io.debezium.time.Date"}
	case row.KindTimestamp:
		return row.ColumnType{Kind: k, Connect: "int64", Logical: "io.debezium.time.MicroTimestamp"}
	}
	return row.ColumnType{}
}

// Package query is cdcjoin's SQL front end: it parses a job's query with
// PostgreSQL's own parser (pg_query_go, libpg_query) and resolves it into
// a logical query — the FROM items with their tables, the joins with their
// kinds and ON conditions, the WHERE conditions and the select list, all as
// expr expressions over the tables' columns — or refuses it, each problem
// with the line and column of the query it concerns and what is supported
// instead. It does not plan: package plan turns a Query into stages.
//
// Supported (everything else is refused up front, never approximated):
//
//	SELECT <expr> [AS name], …
//	FROM t [alias] {[INNER] JOIN | LEFT | RIGHT | FULL [OUTER] JOIN t [alias] ON <cond>}…
//	[WHERE <cond>]
//
// with expressions of columns (alias.col, or col when exactly one table
// declares it), literals, = <> < <= > >=, AND OR NOT, IS [NOT] NULL,
// IS [NOT] TRUE/FALSE/UNKNOWN, IS [NOT] DISTINCT FROM, [NOT] IN (…),
// [NOT] [I]LIKE, [NOT] BETWEEN, + - * / %, ||, COALESCE, NULLIF, CASE,
// lower, upper and casts of literals (see package expr for the semantics).
// Joins associate left to right (PostgreSQL's rule), each joining one more
// table; a table of `tables` may appear under several aliases.
package query

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/cdcjoin/cdcjoin/expr"
	"github.com/cdcjoin/cdcjoin/row"
)

// Table is what the query knows of a table of the configuration: its
// primary key and the columns with a declared type (tables.<t>.types).
// Columns of a table are not otherwise known: a column the query names
// that the table lacks is found when its records are decoded.
type Table struct {
	Key []string
	// Kinds are the declared columns' kinds (key columns without a
	// declared type are in Key only).
	Kinds map[string]row.Kind
}

func (t *Table) declares(col string) bool {
	if _, ok := t.Kinds[col]; ok {
		return true
	}
	for _, k := range t.Key {
		if k == col {
			return true
		}
	}
	return false
}

// Pos is a position in the query text: line and column, both from 1
// (columns count characters).
type Pos struct{ Line, Column int }

// Error is one problem of a query, at a position of its text.
type Error struct {
	Pos Pos
	Msg string
}

func (e *Error) Error() string {
	if e.Pos.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("query line %d, column %d: %s", e.Pos.Line, e.Pos.Column, e.Msg)
}

// JoinKind is a join's kind as written.
type JoinKind uint8

// Join kinds.
const (
	Inner JoinKind = iota + 1
	Left
	Right
	Full
)

func (k JoinKind) String() string {
	return [...]string{Inner: "INNER", Left: "LEFT", Right: "RIGHT", Full: "FULL"}[k]
}

// From is one FROM item: Table (a key of `tables`) under Alias.
type From struct {
	Alias, Table string
	Pos          Pos
}

// Join is the join that adds From[k] (k ≥ 1) to the tables before it.
type Join struct {
	Kind JoinKind
	// On holds the ON condition's top-level conjuncts.
	On  []Cond
	Pos Pos
}

// Cond is one conjunct of an ON or WHERE condition.
type Cond struct {
	Expr expr.Expr
	Pos  Pos
}

// Item is one select-list item: Expr named Name.
type Item struct {
	Name string
	Expr expr.Expr
	Pos  Pos
}

// Query is a resolved query. Column references (expr.Col) carry the FROM
// position (Table) and the column name (Column); Index is unset.
type Query struct {
	Text   string
	From   []From
	Joins  []Join // Joins[k-1] adds From[k]
	Where  []Cond
	Select []Item
	// Tables are the tables of From, by FROM position.
	Tables []*Table
}

// posOf converts a byte offset of text (libpg_query's locations) to a
// position.
func posOf(text string, offset int32) Pos {
	if offset < 0 {
		return Pos{}
	}
	p := Pos{Line: 1, Column: 1}
	for i, r := range text {
		if i >= int(offset) {
			break
		}
		if r == '\n' {
			p.Line++
			p.Column = 1
		} else {
			p.Column++
		}
	}
	return p
}

// posOfChar converts a 1-based character position (libpg_query's error
// cursor) to a position.
func posOfChar(text string, cursor int) Pos {
	if cursor <= 0 {
		return Pos{}
	}
	off := 0
	for n := 1; n < cursor && off < len(text); n++ {
		_, size := utf8.DecodeRuneInString(text[off:])
		off += size
	}
	return posOf(text, int32(off))
}

// Describe returns a short text of what the front end supports, for
// messages.
func Describe() string {
	return "SELECT <columns or expressions> [AS name], … FROM t [alias] {[INNER] | LEFT | RIGHT | FULL [OUTER] JOIN t [alias] ON <equalities and conditions>} [WHERE <conditions>]"
}

func quoteNames(names []string) string {
	return strings.Join(names, ", ")
}

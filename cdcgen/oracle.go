package cdcgen

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Null is how a SQL NULL is rendered in JoinedRow values (ClickHouse's TSV
// spelling). No generated text value equals it.
const Null = `\N`

// RowKey identifies an output row of the join: (parent key, child key), the
// keys rendered as text. A LEFT join's parent without children has
// Padded=true and Child="".
type RowKey struct {
	Parent string
	Child  string
	Padded bool
}

func (k RowKey) String() string {
	if k.Padded {
		return "(" + k.Parent + ",NULL)"
	}
	return "(" + k.Parent + "," + k.Child + ")"
}

// Compare orders row keys canonically: by parent key, then the padded row,
// then child key; keys that are integers compare numerically.
func (k RowKey) Compare(o RowKey) int {
	if c := compareKeyText(k.Parent, o.Parent); c != 0 {
		return c
	}
	if k.Padded != o.Padded {
		if k.Padded {
			return -1
		}
		return 1
	}
	return compareKeyText(k.Child, o.Child)
}

// JoinedRow is one row of the materialized join: its key and the select
// list's values as text (row.Value.Text() renderings: integers in
// decimal, decimals with their scale, timestamps as
// 2006-01-02T15:04:05.000000Z), Null for SQL NULL.
type JoinedRow struct {
	Key    RowKey
	Values []string
}

func (r JoinedRow) String() string {
	return r.Key.String() + " [" + strings.Join(r.Values, " | ") + "]"
}

// DefaultSelect is the select list of the project's example job:
// parent.id AS user_id, parent.firstname, parent.lastname, child.id AS
// domain_id, child.domain_name.
var DefaultSelect = []string{"parent.id", "parent.firstname", "parent.lastname", "child.id", "child.domain_name"}

// Join is the SQL oracle for DefaultSelect:
//
//	SELECT u.id, u.firstname, u.lastname, d.id, d.domain_name
//	FROM users u [LEFT] JOIN domains d ON d.user_id = u.id
//
// sorted canonically.
func Join(users map[int64]User, domains map[int64]Domain, left bool) []JoinedRow {
	rows, _ := JoinSelect(users, domains, left, DefaultSelect)
	return rows
}

// JoinSelect is Join with a chosen select list of "parent.<col>" and
// "child.<col>"; users columns: id, firstname, lastname, email, balance,
// created_at; domains columns: id, user_id, domain_name, price. It errors on
// an unknown column.
func JoinSelect(users map[int64]User, domains map[int64]Domain, left bool, sel []string) ([]JoinedRow, error) {
	for _, c := range sel {
		if _, _, err := columnOf(c); err != nil {
			return nil, err
		}
	}
	children := make(map[int64][]int64, len(users))
	for id, d := range domains {
		if _, ok := users[d.UserID]; ok {
			children[d.UserID] = append(children[d.UserID], id)
		}
	}
	var rows []JoinedRow
	for uid, u := range users {
		ds := children[uid]
		if len(ds) == 0 && left {
			rows = append(rows, JoinedRow{
				Key:    RowKey{Parent: strconv.FormatInt(uid, 10), Padded: true},
				Values: project(sel, &u, nil),
			})
		}
		for _, did := range ds {
			d := domains[did]
			rows = append(rows, JoinedRow{
				Key:    RowKey{Parent: strconv.FormatInt(uid, 10), Child: strconv.FormatInt(did, 10)},
				Values: project(sel, &u, &d),
			})
		}
	}
	SortRows(rows)
	return rows, nil
}

func columnOf(c string) (child bool, name string, err error) {
	side, name, ok := strings.Cut(c, ".")
	switch {
	case ok && side == "parent":
		switch name {
		case "id", "firstname", "lastname", "email", "balance", "created_at":
			return false, name, nil
		}
	case ok && side == "child":
		switch name {
		case "id", "user_id", "domain_name", "price":
			return true, name, nil
		}
	}
	return false, "", fmt.Errorf("cdcjoin: cdcgen: unknown select column %q", c)
}

func project(sel []string, u *User, d *Domain) []string {
	out := make([]string, len(sel))
	for i, c := range sel {
		child, name, _ := columnOf(c)
		if child && d == nil {
			out[i] = Null
			continue
		}
		if child {
			switch name {
			case "id":
				out[i] = strconv.FormatInt(d.ID, 10)
			case "user_id":
				out[i] = strconv.FormatInt(d.UserID, 10)
			case "domain_name":
				out[i] = d.DomainName
			case "price":
				out[i] = d.Price
			}
			continue
		}
		switch name {
		case "id":
			out[i] = strconv.FormatInt(u.ID, 10)
		case "firstname":
			out[i] = u.FirstName
		case "lastname":
			out[i] = u.LastName
		case "email":
			out[i] = u.Email
		case "balance":
			out[i] = u.Balance
		case "created_at":
			out[i] = time.UnixMicro(u.CreatedAt).UTC().Format("2006-01-02T15:04:05.000000Z")
		}
	}
	return out
}

// SortRows sorts rows canonically by key.
func SortRows(rows []JoinedRow) {
	slices.SortFunc(rows, func(a, b JoinedRow) int { return a.Key.Compare(b.Key) })
}

// compareKeyText compares integer texts numerically, anything else as strings.
func compareKeyText(a, b string) int {
	ai, aok := isInt(a)
	bi, bok := isInt(b)
	if aok && bok {
		if ai != bi { // different signs: negative first
			if ai {
				return -1
			}
			return 1
		}
		a, b = strings.TrimPrefix(a, "-"), strings.TrimPrefix(b, "-")
		c := len(a) - len(b)
		if c == 0 {
			c = strings.Compare(a, b)
		}
		if ai {
			c = -c
		}
		return c
	}
	return strings.Compare(a, b)
}

// isInt reports whether s is a canonical integer, and whether it is negative.
func isInt(s string) (neg, ok bool) {
	if strings.HasPrefix(s, "-") {
		neg, s = true, s[1:]
	}
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false, false
		}
	}
	return neg, true
}

// Diff compares two row sets (in any order) and describes the first
// differences, at most maxLines lines (<= 0: 20), or returns "" when they are
// equal. Lines read "- (k) [...]" for a row only in want, "+ (k) [...]" for
// a row only in got, "~ (k) want [...] got [...]" for different values.
func Diff(want, got []JoinedRow, maxLines int) string {
	if maxLines <= 0 {
		maxLines = 20
	}
	var lines []string
	var missing, extra, differ int
	add := func(s string) {
		if len(lines) < maxLines {
			lines = append(lines, s)
		}
	}
	EachDifference(want, got, func(w, g *JoinedRow) {
		switch {
		case g == nil:
			missing++
			add("- " + w.String())
		case w == nil:
			extra++
			add("+ " + g.String())
		default:
			differ++
			add(fmt.Sprintf("~ %s want [%s] got [%s]", w.Key, strings.Join(w.Values, " | "), strings.Join(g.Values, " | ")))
		}
	})
	if missing+extra+differ == 0 {
		return ""
	}
	head := fmt.Sprintf("%d rows wanted, %d got: %d missing (-), %d extra (+), %d different (~)", len(want), len(got), missing, extra, differ)
	return head + "\n" + strings.Join(lines, "\n")
}

// EachDifference compares two row sets (in any order; neither is changed)
// and calls fn, in row key order (SortRows), for each row key where they
// differ: g nil for a row only in want, w nil for a row only in got, both
// set for a key whose values differ.
func EachDifference(want, got []JoinedRow, fn func(w, g *JoinedRow)) {
	w, g := slices.Clone(want), slices.Clone(got)
	SortRows(w)
	SortRows(g)
	i, j := 0, 0
	for i < len(w) || j < len(g) {
		c := 0
		switch {
		case i == len(w):
			c = 1
		case j == len(g):
			c = -1
		default:
			c = w[i].Key.Compare(g[j].Key)
		}
		switch {
		case c < 0:
			fn(&w[i], nil)
			i++
		case c > 0:
			fn(nil, &g[j])
			j++
		default:
			if !slices.Equal(w[i].Values, g[j].Values) {
				fn(&w[i], &g[j])
			}
			i++
			j++
		}
	}
}

// ErrVersionTie is reported (wrapped) by ReplacingMergeTree.Apply when a row
// key receives the same version twice with different content (or at all,
// with StrictTies).
var ErrVersionTie = errors.New("cdcjoin: cdcgen: version tie")

// ReplacingMergeTree models a ClickHouse ReplacingMergeTree(version) table
// read with FINAL, where a deleted flag hides a row: per row key the highest
// version wins; a lower version arriving later loses. Not safe for
// concurrent use.
type ReplacingMergeTree struct {
	// StrictTies makes any repeated (row key, version) an error. By default
	// a repeat with identical content (a replay after a crash) is counted
	// in Repeats and accepted; one with different content is an error,
	// because ClickHouse would keep an arbitrary one.
	StrictTies bool
	rows       map[RowKey]*rmtRow
	// Stale counts inserts that lost to a higher version already present;
	// Repeats counts identical re-inserts of the current version.
	Stale, Repeats int
}

type rmtRow struct {
	version uint64
	deleted bool
	values  []string
}

// NewReplacingMergeTree returns an empty table.
func NewReplacingMergeTree() *ReplacingMergeTree {
	return &ReplacingMergeTree{rows: map[RowKey]*rmtRow{}}
}

// Apply inserts one row version: an upsert (deleted=false, values are the
// row) or a retraction (deleted=true). values is copied. The error wraps
// ErrVersionTie; the table is unchanged on error.
func (m *ReplacingMergeTree) Apply(key RowKey, version uint64, deleted bool, values []string) error {
	cur, ok := m.rows[key]
	if ok {
		switch {
		case version < cur.version:
			m.Stale++
			return nil
		case version == cur.version:
			same := cur.deleted == deleted && (deleted || slices.Equal(cur.values, values))
			if same && !m.StrictTies {
				m.Repeats++
				return nil
			}
			return fmt.Errorf("%w: row %s version %d inserted twice (deleted %v [%s], then deleted %v [%s])",
				ErrVersionTie, key, version, cur.deleted, strings.Join(cur.values, " | "), deleted, strings.Join(values, " | "))
		}
	}
	m.rows[key] = &rmtRow{version: version, deleted: deleted, values: slices.Clone(values)}
	return nil
}

// Live returns the visible rows (latest version not deleted), sorted.
func (m *ReplacingMergeTree) Live() []JoinedRow {
	rows := make([]JoinedRow, 0, len(m.rows))
	for k, r := range m.rows {
		if !r.deleted {
			rows = append(rows, JoinedRow{Key: k, Values: slices.Clone(r.values)})
		}
	}
	SortRows(rows)
	return rows
}

// Version returns the current version of key and whether the key was ever
// inserted.
func (m *ReplacingMergeTree) Version(key RowKey) (uint64, bool) {
	r, ok := m.rows[key]
	if !ok {
		return 0, false
	}
	return r.version, true
}

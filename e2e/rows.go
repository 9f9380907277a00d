package e2e

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Cell is one column value as text; Null marks SQL NULL (Text is then "").
type Cell struct {
	Text string
	Null bool
}

func (c Cell) String() string {
	if c.Null {
		return "NULL"
	}
	if len(c.Text) > 40 {
		return strconv.Quote(c.Text[:30]) + fmt.Sprintf("…(%d bytes)", len(c.Text))
	}
	return strconv.Quote(c.Text)
}

// Row is one output row: user_id, firstname, lastname, domain_id,
// domain_name (the e2e configs' select list), as cells.
type Row []Cell

func (r Row) String() string {
	parts := make([]string, len(r))
	for i, c := range r {
		parts[i] = c.String()
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// key is the row's full identity for multiset comparison.
func (r Row) key() string {
	var b strings.Builder
	for _, c := range r {
		if c.Null {
			b.WriteString("N")
		} else {
			b.WriteString("V")
			b.WriteString(strconv.Itoa(len(c.Text)))
			b.WriteByte(':')
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// Columns of the compared rows, in order; IntColumns are sorted numerically.
var (
	Columns    = []string{"user_id", "firstname", "lastname", "domain_id", "domain_name"}
	intColumns = map[int]bool{0: true, 3: true}
)

// SortRows orders rows by (user_id, domain_id, then every column), NULL
// first, integers numerically, so both sides sort identically whatever the
// servers' collations.
func SortRows(rows []Row) {
	sort.SliceStable(rows, func(i, j int) bool { return lessRow(rows[i], rows[j]) })
}

func lessRow(a, b Row) bool {
	order := []int{0, 3, 1, 2, 4}
	for _, i := range order {
		if i >= len(a) || i >= len(b) {
			return len(a) < len(b)
		}
		if c := cmpCell(a[i], b[i], intColumns[i]); c != 0 {
			return c < 0
		}
	}
	return false
}

func cmpCell(a, b Cell, numeric bool) int {
	switch {
	case a.Null && b.Null:
		return 0
	case a.Null:
		return -1
	case b.Null:
		return 1
	}
	if numeric {
		x, errx := strconv.ParseInt(a.Text, 10, 64)
		y, erry := strconv.ParseInt(b.Text, 10, 64)
		if errx == nil && erry == nil {
			switch {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		}
	}
	return strings.Compare(a.Text, b.Text)
}

// Difference is the outcome of Diff: rows only the oracle has (Missing)
// and rows only the result has (Extra), each sorted, with multiplicity.
type Difference struct {
	Want, Got int // row counts
	Missing   []Row
	Extra     []Row
}

// Equal reports whether the two sides were equal as multisets.
func (d *Difference) Equal() bool { return len(d.Missing) == 0 && len(d.Extra) == 0 }

// Diff compares the oracle (want) with the result (got) as multisets of
// rows: every row and every column must match, duplicates included.
// Neither slice is modified.
func Diff(want, got []Row) *Difference {
	count := make(map[string]int, len(want))
	byKey := make(map[string]Row, len(want))
	for _, r := range want {
		k := r.key()
		count[k]++
		byKey[k] = r
	}
	d := &Difference{Want: len(want), Got: len(got)}
	for _, r := range got {
		k := r.key()
		if count[k] > 0 {
			count[k]--
			continue
		}
		d.Extra = append(d.Extra, r)
	}
	for k, n := range count {
		for ; n > 0; n-- {
			d.Missing = append(d.Missing, byKey[k])
		}
	}
	SortRows(d.Missing)
	SortRows(d.Extra)
	return d
}

// Report describes the difference for a human, listing at most max rows of
// each kind.
func (d *Difference) Report(max int) string {
	if d.Equal() {
		return fmt.Sprintf("equal: %d rows", d.Want)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "DIFFERENT: PostgreSQL has %d rows, ClickHouse %d; %d missing from ClickHouse, %d extra in ClickHouse",
		d.Want, d.Got, len(d.Missing), len(d.Extra))
	list := func(what string, rows []Row) {
		for i, r := range rows {
			if i == max {
				fmt.Fprintf(&b, "\n  … %d more %s", len(rows)-max, what)
				break
			}
			fmt.Fprintf(&b, "\n  %s %s", what, r)
		}
	}
	list("missing", d.Missing)
	list("extra  ", d.Extra)
	return b.String()
}

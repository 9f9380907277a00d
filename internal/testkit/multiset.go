package testkit

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// MultisetDiff compares two multisets of rows (each a string): one line
// per row that want holds more often than got ("- row (×n)") or got more
// often than want ("+ row (×n)"), sorted, at most max lines (and a count
// of the rest); "" when they are equal.
func MultisetDiff(want, got []string, max int) string {
	count := map[string]int{}
	for _, w := range want {
		count[w]++
	}
	for _, g := range got {
		count[g]--
	}
	var lines []string
	for k, n := range count {
		switch {
		case n > 0:
			lines = append(lines, fmt.Sprintf("- %s (×%d)", k, n))
		case n < 0:
			lines = append(lines, fmt.Sprintf("+ %s (×%d)", k, -n))
		}
	}
	slices.Sort(lines)
	if len(lines) > max {
		lines = append(lines[:max], fmt.Sprintf("… %d more", len(lines)-max))
	}
	return strings.Join(lines, "\n")
}

// SortedDiff lists up to n rows only in got ("+ row") or only in want
// ("- row"), both sorted, in order.
func SortedDiff(got, want []string, n int) []string {
	var out []string
	i, j := 0, 0
	for (i < len(got) || j < len(want)) && len(out) < n {
		switch {
		case j >= len(want) || i < len(got) && got[i] < want[j]:
			out = append(out, "+ "+got[i])
			i++
		case i >= len(got) || want[j] < got[i]:
			out = append(out, "- "+want[j])
			j++
		default:
			i, j = i+1, j+1
		}
	}
	return out
}

// Rows is what database/sql-like result sets (pgx.Rows, clickhouse-go's
// driver.Rows) have in common.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// Strings reads every row of a one-column text result, in order, failing
// the test on an error.
func Strings(t testing.TB, rows Rows) []string {
	t.Helper()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// FirstLineDiff returns the first line (1-based) at which the texts want
// and got differ, with that line of each ("" past a text's end); ok is
// false when every line is equal.
func FirstLineDiff(want, got string) (line int, w, g string, ok bool) {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		w, g = "", ""
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return i + 1, w, g, true
		}
	}
	return 0, "", "", false
}

package progress

import (
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
)

func TestByPartition(t *testing.T) {
	r := func(p, c string, v ...string) cdcgen.JoinedRow {
		return cdcgen.JoinedRow{Key: cdcgen.RowKey{Parent: p, Child: c}, Values: v}
	}
	want := []cdcgen.JoinedRow{r("1", "1", "a"), r("1", "2", "b"), r("2", "3", "c"), r("7", "4", "d")}
	got := []cdcgen.JoinedRow{r("1", "1", "a"), r("2", "3", "x"), r("9", "5", "e")}
	m := ByPartition(want, got, 3)
	var total Counts
	for _, c := range m {
		total.Missing += c.Missing
		total.Extra += c.Extra
		total.Different += c.Different
	}
	if total != (Counts{Missing: 2, Extra: 1, Different: 1}) {
		t.Fatalf("totals %+v", total)
	}
	p1 := keyedlog.Partition(row.AppendKey(nil, []row.Value{row.Int(1)}), 3)
	if c := m[p1]; c == nil || c.Missing < 1 {
		t.Fatalf("parent 1 (partition %d) missing row not counted: %+v", p1, m)
	}
	if s := Report(want, want, 3); s != "" {
		t.Fatalf("equal tables reported %q", s)
	}
	if s := Report(want, got, 3); !strings.Contains(s, "rows missing") {
		t.Fatalf("report %q", s)
	}
}

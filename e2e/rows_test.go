package e2e

import (
	"reflect"
	"strings"
	"testing"
)

func row(vals ...any) Row {
	r := make(Row, len(vals))
	for i, v := range vals {
		if v == nil {
			r[i] = Cell{Null: true}
		} else {
			r[i] = Cell{Text: v.(string)}
		}
	}
	return r
}

func TestDiffEqualIgnoresOrder(t *testing.T) {
	a := []Row{row("1", "a", "b", "10", "x"), row("2", "c", nil, nil, nil)}
	b := []Row{a[1], a[0]}
	if d := Diff(a, b); !d.Equal() || d.Want != 2 || d.Got != 2 {
		t.Fatalf("got %s", d.Report(5))
	}
}

func TestDiffEveryColumnCounts(t *testing.T) {
	base := row("1", "a", "b", "10", "x")
	for i := range base {
		changed := append(Row(nil), base...)
		changed[i] = Cell{Text: changed[i].Text + "!"}
		d := Diff([]Row{base}, []Row{changed})
		if d.Equal() || len(d.Missing) != 1 || len(d.Extra) != 1 {
			t.Errorf("column %d: change not detected: %s", i, d.Report(5))
		}
	}
}

func TestDiffNullIsNotEmpty(t *testing.T) {
	if d := Diff([]Row{row("1", "", "b", "10", "x")}, []Row{row("1", nil, "b", "10", "x")}); d.Equal() {
		t.Fatal("NULL and '' compared equal")
	}
}

func TestDiffMultiplicity(t *testing.T) {
	r := row("1", "a", "b", "10", "x")
	d := Diff([]Row{r, r}, []Row{r})
	if d.Equal() || len(d.Missing) != 1 || len(d.Extra) != 0 {
		t.Fatalf("duplicate not counted: %s", d.Report(5))
	}
	d = Diff([]Row{r}, []Row{r, r})
	if d.Equal() || len(d.Extra) != 1 {
		t.Fatalf("extra duplicate not counted: %s", d.Report(5))
	}
}

func TestSortRowsNumericNullFirst(t *testing.T) {
	rows := []Row{row("10", "a", "", "2", ""), row("9", "a", "", nil, nil), row("9", "a", "", "10", ""), row("9", "a", "", "9", "")}
	SortRows(rows)
	var got []string
	for _, r := range rows {
		got = append(got, r[0].String()+"/"+r[3].String())
	}
	want := []string{`"9"/NULL`, `"9"/"9"`, `"9"/"10"`, `"10"/"2"`}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func TestReportLimitsRows(t *testing.T) {
	var want []Row
	for i := 0; i < 20; i++ {
		want = append(want, row(strings.Repeat("1", i+1), "a", "b", "1", "x"))
	}
	rep := Diff(want, nil).Report(3)
	if !strings.Contains(rep, "… 17 more missing") || !strings.Contains(rep, "20 missing from ClickHouse") {
		t.Fatalf("report:\n%s", rep)
	}
}

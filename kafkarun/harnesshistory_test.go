package kafkarun_test

import (
	"context"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/row"
)

// TestModelHistory: the report of a failing comparison names, for every
// row that differs from the oracle, the changes its row key reached the
// model with (which sink, op, version, in order), and says so for a row
// that never reached it; rows that agree are not reported.
func TestModelHistory(t *testing.T) {
	m := newModel()
	m.ordered = true
	a, b := m.sink(), m.sink()
	a.name, b.name = "i0", "i1"
	ctx := context.Background()
	change := func(op row.ChangeOp, v uint64, p, c int64, val string) row.Change {
		return row.Change{Op: op, Version: v, ParentKey: []row.Value{row.Int(p)}, ChildKey: []row.Value{row.Int(c)},
			Values: []row.Value{row.Int(p), row.Int(c), row.String(val)}}
	}
	for _, step := range []struct {
		s *modelSink
		c row.Change
	}{
		{a, change(row.Upsert, 1, 1, 10, "x")}, // (1,10): upserted, then retracted by another sink
		{a, change(row.Upsert, 2, 2, 20, "y")}, // (2,20): as wanted
		{b, change(row.Retract, 3, 1, 10, "x")},
	} {
		if err := step.s.Write(ctx, []row.Change{step.c}); err != nil {
			t.Fatal(err)
		}
		if err := step.s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := []cdcgen.JoinedRow{
		{Key: cdcgen.RowKey{Parent: "1", Child: "10"}, Values: []string{"1", "10", "x"}},
		{Key: cdcgen.RowKey{Parent: "2", Child: "20"}, Values: []string{"2", "20", "y"}},
		{Key: cdcgen.RowKey{Parent: "3", Child: "30"}, Values: []string{"3", "30", "z"}},
	}
	got, err := m.live()
	if err != nil {
		t.Fatal(err)
	}
	h := m.history(want, got, 20)
	for _, line := range []string{"(1,10): i0 upsert v1, i1 retract v3\n", "(3,30): never reached the sink\n"} {
		if !strings.Contains(h, line) {
			t.Errorf("history lacks %q:\n%s", line, h)
		}
	}
	if strings.Contains(h, "(2,20)") {
		t.Errorf("history reports a row that agrees with the oracle:\n%s", h)
	}
	if n := strings.Count(m.history(want, got, 1), "\n"); n != 1 {
		t.Errorf("history with limit 1 has %d lines", n)
	}
}

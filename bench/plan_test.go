package bench

import (
	"context"
	"strings"
	"testing"
)

// TestRunPlanChain runs the chain benchmark on a small history: every
// system's final join is checked against the query over the generator's
// final tables inside RunPlan (an error fails the test), the rename at the
// top fans out further in the chain than in the two-table join, and a
// negative control shows that the check catches a missing row.
func TestRunPlanChain(t *testing.T) {
	dir := t.TempDir()
	o := Options{Workload: Workload{Seed: 7, Rows: 3000, CDCEvents: 3000, Partitions: 3}, Dir: dir}
	rep, err := RunPlan(context.Background(), o, ShapeChain, 1, "")
	if err != nil {
		t.Fatalf("seed 7: %v", err)
	}
	if len(rep.Systems) != 4 {
		t.Fatalf("systems: %+v", rep.Systems)
	}
	two, chain := rep.Systems[0], rep.Systems[3]
	for _, s := range rep.Systems {
		if s.FinalRows == 0 || s.SnapshotRecords == 0 || s.CDCRecords == 0 || s.StateBytesPerRow <= 0 || s.CDCCPUMicros <= 0 {
			t.Errorf("%s: empty figures: %+v", s.Name, s)
		}
		if s.Name != "chain" && s.FinalRows != two.FinalRows {
			t.Errorf("%s: %d final rows, two-table has %d", s.Name, s.FinalRows, two.FinalRows)
		}
	}
	// Each joined row of the renamed user is retracted and upserted.
	if chain.FanoutChanges < 2 || chain.FanoutChanges <= two.FanoutChanges {
		t.Errorf("fan-out: chain %d changes, two-table %d", chain.FanoutChanges, two.FanoutChanges)
	}
	if chain.CDCRecords <= two.CDCRecords {
		t.Errorf("chain reads %d CDC records, two-table %d", chain.CDCRecords, two.CDCRecords)
	}

	// Negative control: the same run with one expected row dropped fails.
	h, err := ChainHistory(o)
	if err != nil {
		t.Fatal(err)
	}
	_, rename, err := chainRename(h)
	if err != nil {
		t.Fatal(err)
	}
	s := &planSystem{PlanSystem: PlanSystem{Name: "chain", Query: ChainQuery, Core: "plan", RowByRow: true}}
	o = o.withDefaults()
	if err := s.prepare(o, h); err != nil {
		t.Fatal(err)
	}
	s.want = s.want[1:]
	_, err = s.run(context.Background(), o, t.TempDir()+"/neg", rename, "")
	if err == nil || !strings.Contains(err.Error(), "final join differs") {
		t.Fatalf("negative control: want a difference, got %v", err)
	}
	t.Logf("negative control: %v", err)
}

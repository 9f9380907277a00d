package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/bench/peers"
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
	if len(rep.Systems) != 5 {
		t.Fatalf("systems: %+v", rep.Systems)
	}
	two, chain, chainRows := rep.Systems[0], rep.Systems[3], rep.Systems[4]
	if chain.Name != "chain" || chainRows.Name != "chain-rows" || chain.FinalRows != chainRows.FinalRows || chain.FanoutChanges != chainRows.FanoutChanges {
		t.Errorf("chain (bulk snapshot) and chain-rows differ: %+v, %+v", chain, chainRows)
	}
	for _, s := range rep.Systems {
		if s.FinalRows == 0 || s.SnapshotRecords == 0 || s.CDCRecords == 0 || s.StateBytesPerRow <= 0 || s.CDCCPUMicros <= 0 {
			t.Errorf("%s: empty figures: %+v", s.Name, s)
		}
		if !strings.HasPrefix(s.Name, "chain") && s.FinalRows != two.FinalRows {
			t.Errorf("%s: %d final rows, two-table has %d", s.Name, s.FinalRows, two.FinalRows)
		}
	}
	// Each joined row of the renamed user is upserted with a new version:
	// the chain has more rows below a user than the two-table join.
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
	if err := s.prepare(o, h, chainOracle); err != nil {
		t.Fatal(err)
	}
	s.want = s.want[1:]
	_, err = s.run(context.Background(), o, t.TempDir()+"/neg", rename, "")
	if err == nil || !strings.Contains(err.Error(), "final join differs") {
		t.Fatalf("negative control: want a difference, got %v", err)
	}
	t.Logf("negative control: %v", err)
}

// TestChainPeers runs `cdcjoin bench --shape chain --peer …` small: each
// peer's final join must equal cdcjoin's (RunPeers' check), and cdcjoin's
// must equal the chain query over the generator's final tables
// (chainOracle), so all of them compute PostgreSQL's answer. Set
// CDCJOIN_PEER_FLINK=1 and/or CDCJOIN_PEER_DBSP=1 (the toolchains of
// TestSmokePeerFlink and peers.TestDBSPOracle).
func TestChainPeers(t *testing.T) {
	var names []string
	if os.Getenv("CDCJOIN_PEER_DBSP") != "" {
		names = append(names, PeerDBSP)
	}
	if os.Getenv("CDCJOIN_PEER_FLINK") != "" {
		names = append(names, PeerFlink)
	}
	if len(names) == 0 {
		t.Skip("set CDCJOIN_PEER_FLINK=1 and/or CDCJOIN_PEER_DBSP=1 to run the chain's peers")
	}
	dir := t.TempDir()
	o := Options{Workload: Workload{Seed: 11, Rows: 7000, CDCEvents: 5000, Partitions: 3}, Dir: dir, KeepState: true,
		Progress: func(l string) { t.Log(l) }}
	rep, err := RunPeers(context.Background(), o, PeerOptions{Peers: names, Rounds: 1, Check: true, Shape: ShapeChain})
	if err != nil {
		t.Fatalf("seed 11: %v", err)
	}
	c := rep.Peers
	if c.Shape != ShapeChain || len(c.Checks) != len(names) || c.FinalRows == 0 {
		t.Fatalf("comparison incomplete: %+v", c)
	}
	for _, ch := range c.Checks {
		if !ch.Equal {
			t.Fatalf("%s differs: %s", ch.System, ch.Diff)
		}
	}
	h, err := ChainHistory(o)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "oracle.jsonl")
	if err := os.WriteFile(want, []byte(strings.Join(chainOracle(h.Final, []string{"users", "domains", "dns_records"}), "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := peers.CompareFinal(want, filepath.Join(dir, "peer-work", "final-cdcjoin.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !d.Equal() || d.RowsA == 0 {
		t.Fatalf("seed 11: cdcjoin's chain differs from the oracle: %v", d)
	}
	t.Logf("%d rows; %v", c.FinalRows, c.Checks)
}

// TestRunPlanStar runs the star benchmark (domains ⋈ users ⋈ registrars)
// on a small history: every system's final join is checked inside RunPlan
// against starOracle over the generator's final tables (an error fails the
// test), the registrar's rename fans out to its domains, and a negative
// control shows that the check catches a missing row.
func TestRunPlanStar(t *testing.T) {
	o := Options{Workload: Workload{Seed: 11, Rows: 3000, CDCEvents: 3000, Partitions: 3}, Dir: t.TempDir()}
	rep, err := RunPlan(context.Background(), o, ShapeStar, 1, "")
	if err != nil {
		t.Fatalf("seed 11: %v", err)
	}
	if len(rep.Systems) != 5 {
		t.Fatalf("systems: %+v", rep.Systems)
	}
	two, star, starRows := rep.Systems[0], rep.Systems[3], rep.Systems[4]
	if star.Name != "star" || starRows.Name != "star-rows" || star.FinalRows != starRows.FinalRows || star.FanoutChanges != starRows.FanoutChanges {
		t.Errorf("star (bulk snapshot) and star-rows differ: %+v, %+v", star, starRows)
	}
	for _, s := range rep.Systems {
		if s.FinalRows == 0 || s.SnapshotRecords == 0 || s.CDCRecords == 0 || s.StateBytesPerRow <= 0 || s.CDCCPUMicros <= 0 {
			t.Errorf("%s: empty figures: %+v", s.Name, s)
		}
		if !strings.HasPrefix(s.Name, "star") && s.FinalRows != two.FinalRows {
			t.Errorf("%s: %d final rows, two-table has %d", s.Name, s.FinalRows, two.FinalRows)
		}
	}
	// INNER on a nullable registrar_id: fewer rows than the two-table join.
	if star.FinalRows >= two.FinalRows {
		t.Errorf("star has %d final rows, two-table %d", star.FinalRows, two.FinalRows)
	}
	if star.FanoutChanges < 2 {
		t.Errorf("fan-out of the registrar's rename: %d changes", star.FanoutChanges)
	}
	if star.CDCRecords <= two.CDCRecords {
		t.Errorf("star reads %d CDC records, two-table %d", star.CDCRecords, two.CDCRecords)
	}

	// Negative control: the same run with one expected row dropped fails.
	h, err := StarHistory(o)
	if err != nil {
		t.Fatal(err)
	}
	_, rename, err := starRename(h, "registrars")
	if err != nil {
		t.Fatal(err)
	}
	s := &planSystem{PlanSystem: PlanSystem{Name: "star", Query: StarQuery, Core: "plan"}}
	o = o.withDefaults()
	if err := s.prepare(o, h, starOracle); err != nil {
		t.Fatal(err)
	}
	s.want = s.want[1:]
	_, err = s.run(context.Background(), o, t.TempDir()+"/neg", rename, "")
	if err == nil || !strings.Contains(err.Error(), "final join differs") {
		t.Fatalf("negative control: want a difference, got %v", err)
	}
	t.Logf("negative control: %v", err)
}

package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSmokePeerFlink runs `cdcjoin bench --peer flink` small: one round
// after the correctness check, whose final joins must be equal, and a
// report with both figures and their ratio. It needs a JDK 17+ and Maven;
// set CDCJOIN_PEER_FLINK=1 to run it (bench/smoke.sh does).
func TestSmokePeerFlink(t *testing.T) {
	if os.Getenv("CDCJOIN_PEER_FLINK") == "" {
		t.Skip("set CDCJOIN_PEER_FLINK=1 to run the Flink peer (needs a JDK 17+ and Maven)")
	}
	dir := t.TempDir()
	o := Options{Workload: Workload{Seed: 3, Rows: 1e4, StormRenames: 3}, Dir: dir, Progress: func(l string) { t.Log(l) }}
	rep, err := RunPeers(context.Background(), o, PeerOptions{Peers: []string{PeerFlink}, Rounds: 1, Check: true})
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Peers
	if c == nil || len(c.Systems) != 2 || len(c.Runs) != 2 || len(c.Checks) != 1 {
		t.Fatalf("comparison incomplete: %+v", c)
	}
	if !c.Checks[0].Equal || c.FinalRows == 0 {
		t.Fatalf("check: %+v, %d final rows", c.Checks[0], c.FinalRows)
	}
	for _, s := range c.Systems {
		if s.MedianRecordsPerSecond <= 0 || s.CdcjoinRatio <= 0 {
			t.Fatalf("%s: no figure: %+v", s.Name, s)
		}
	}
	if c.Records == 0 || c.Tombstones == 0 || c.Systems[0].CdcjoinRatio != 1 {
		t.Fatalf("workload counts: %+v", c)
	}
	md, err := os.ReadFile(filepath.Join(dir, "REPORT.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| flink |", "| cdcjoin |", "flink: equal"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("REPORT.md lacks %q", want)
		}
	}
	back, err := ReadReport(filepath.Join(dir, "report.json"))
	if err != nil || back.Peers == nil || len(back.Peers.Runs) != 2 {
		t.Fatalf("report.json: %v %+v", err, back)
	}
}

func TestRunPeersRejects(t *testing.T) {
	ctx := context.Background()
	base := Options{Workload: Workload{Rows: 100}, Dir: t.TempDir()}
	for name, c := range map[string]struct {
		o Options
		p PeerOptions
	}{
		"no peer":  {base, PeerOptions{}},
		"unknown":  {base, PeerOptions{Peers: []string{"spark"}, CacheDir: t.TempDir()}},
		"twice":    {base, PeerOptions{Peers: []string{"dbsp", "dbsp"}, CacheDir: t.TempDir()}},
		"kafka":    {Options{Workload: base.Workload, Dir: base.Dir, Pipeline: PipelineKafka}, PeerOptions{Peers: []string{PeerFlink}}},
		"sweep":    {Options{Workload: base.Workload, Dir: base.Dir, Sweep: []int64{100, 1000}}, PeerOptions{Peers: []string{PeerFlink}}},
		"rounds<0": {base, PeerOptions{Peers: []string{PeerFlink}, Rounds: -1}},
	} {
		if _, err := RunPeers(ctx, c.o, c.p); err == nil || !strings.HasPrefix(err.Error(), "cdcjoin: bench: ") {
			t.Errorf("%s: want a cdcjoin: bench: error, got %v", name, err)
		}
	}
}

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
)

// TestReplayChangelogKills: `cdcjoin replay --clickhouse` writing a
// changelog table is killed with SIGKILL at random points, 22 times, and
// resumed each time (--resume) on the same input; at the end every row's
// sum(_sign) is 0 or 1 and the live rows equal the join of the final
// tables. The state is not synced (a kill also loses its newest commits),
// so most restarts find ClickHouse ahead of the state: before the engine
// bracketed its batches with delivery markers (engine/exact.go), those
// batches were inserted again and counted twice.
func TestReplayChangelogKills(t *testing.T) { replayChangelogKills(t, "", 0) }

// TestReplayChangelogKillsHotKeys is TestReplayChangelogKills with hot
// parents (Zipf) and skew.chunk_rows 2: with the Positioned sink the
// engine cuts fan-out chunks by input records (2 rows per record), so
// re-created batches emit what the killed run emitted.
func TestReplayChangelogKillsHotKeys(t *testing.T) {
	replayChangelogKills(t, "skew: {chunk_rows: 2}\n", 1.2)
}

// replayChangelogKills runs the replay kill test with extra YAML and the
// history's Zipf exponent over parents (0: uniform).
func replayChangelogKills(t *testing.T, extra string, parentSkew float64) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	seed := testSeed(t)
	t.Logf("seed %d (rerun with CDCJOIN_SEED=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 12))
	o := cdcgen.DefaultOptions(int64(seed))
	o.Ops, o.Users, o.Domains = 50000, 300, 800
	o.ParentSkew = parentSkew
	h := generate(t, o)
	dir := t.TempDir()
	in, err := os.Create(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cdcgen.WriteJSONL(in, h.Records); err != nil {
		t.Fatal(err)
	}
	in.Close()
	table := fmt.Sprintf("replay_kills_%d_%d", time.Now().Unix(), seed)
	cfg := writeFile(t, dir, "job.yaml", fmt.Sprintf(`name: replay-kills
parent: {topic: %s, key: id}
child:  {topic: %s, key: id, parent_key: user_id}
select: parent.id AS user_id, parent.firstname, parent.lastname, child.id AS domain_id, child.domain_name
state: {dir: %s, batch_events: 150}
clickhouse:
  addr: [%s]
  database: cdcjoin_test
  table: %s
  mode: changelog
  batch: {rows: 8, interval: 40ms}
  retry: {initial: 20ms, max: 200ms, max_elapsed: 1m}
%s`, cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic, filepath.Join(dir, "state"), addr, table, extra))
	log := childLog(t, dir)
	conn := openClickHouse(t, addr)
	args := func(resume bool) []string {
		a := []string{"replay", "--config", cfg, "--input", in.Name(), "--clickhouse", addr}
		if resume {
			a = append(a, "--resume")
		}
		return a
	}
	// Kill each run at a random point; a run that finished before its
	// kill ends the kills (the input is done).
	const kills = 22
	killed, ahead := 0, 0
	for k := 0; k < kills; k++ {
		mark := logSize(t, log)
		if runKilled(t, log, args(k > 0), time.Duration(50+r.IntN(700))*time.Millisecond) {
			killed++
		} else {
			t.Logf("run %d finished before its kill", k+1)
			k = kills
		}
		b, _ := os.ReadFile(log.Name())
		if strings.Contains(string(b[mark:]), "held by ClickHouse already") {
			ahead++
		}
		fmt.Fprintf(log, "--- kill %d\n", k+1)
	}
	// The last run completes.
	mark := logSize(t, log)
	cmd := child(t, log, args(true)...)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the last replay: %v", err)
	}
	b, _ := os.ReadFile(log.Name())
	if strings.Contains(string(b[mark:]), "held by ClickHouse already") {
		ahead++
	}
	t.Logf("%d kills; %d runs found batches in ClickHouse that their state had not committed (inserted twice before the delivery markers)", killed, ahead)
	if killed < kills/2 {
		t.Fatalf("only %d of %d runs were killed mid-run: the history is too small for the test", killed, kills)
	}
	want := cdcgen.Join(h.Final.Users, h.Final.Domains, false)
	got := changelogRows(t, conn, "cdcjoin_test."+table)
	if diff := cdcgen.Diff(want, got, 10); diff != "" {
		t.Fatalf("after the kills, ClickHouse does not equal the join:\n%s", diff)
	}
	inserts := checkSigns(t, conn, "cdcjoin_test."+table)
	t.Logf("%d rows of the join equal; %d INSERTs", len(want), inserts)
	if inserts == 0 {
		t.Fatal("no INSERT carried a delivery marker")
	}
	conn.Exec(context.Background(), "DROP TABLE IF EXISTS cdcjoin_test."+table)
}

// runKilled runs the replay args as a child process and kills it with
// SIGKILL after d; it reports whether it was killed (false: it finished
// in time, successfully).
func runKilled(t *testing.T, log *os.File, args []string, d time.Duration) bool {
	t.Helper()
	cmd := child(t, log, args...)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("replay exited: %v", err)
		}
		return false
	case <-time.After(d):
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-exited
		return true
	}
}

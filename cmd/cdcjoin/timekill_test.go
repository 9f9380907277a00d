package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/timejoin"
	"github.com/cdcjoin/cdcjoin/timejoin/timegen"
)

// TestTimeReplayKills: `cdcjoin replay --clickhouse` of an interval LEFT
// join is killed with SIGKILL at random points, 15 times, and resumed
// (--resume) on the same input; the last run ends the input
// (--end-of-input). The state is not synced, so restarts often find
// ClickHouse ahead of the state. At the end the table (a MergeTree) holds
// exactly the reference's rows, each once: the insert-only sink skipped
// what a killed run had inserted.
func TestTimeReplayKills(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	seed := testSeed(t)
	t.Logf("seed %d (rerun with CDCJOIN_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 19))
	const ms = 1000
	s := &timejoin.Spec{Kind: timejoin.Interval, Join: timejoin.LeftOuter, Lower: -3 * ms, Upper: 5 * ms,
		OutOfOrderness: 2 * ms, AllowedLateness: ms, IdleTimeout: 60 * ms, LeftWidth: 1, RightWidth: 1,
		Out: []timejoin.Column{{From: timejoin.FromLeft}, {From: timejoin.FromRight}}}
	events := timegen.Generate(rng, timegen.Options{Kind: s.Kind, N: 40000, OutOfOrderness: 2, Keys: 8, Scale: ms})
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	writeHistory(t, input, timegen.Encode(events, timegen.EncodeOptions{Seed: seed}))
	table := fmt.Sprintf("time_kills_%d_%d", time.Now().Unix(), seed)
	yaml := timegen.Config(timegen.ConfigOptions{Name: "time-kills", Spec: s,
		StateDir: filepath.Join(dir, "state"), DLQ: true,
		Extra: fmt.Sprintf(`clickhouse:
  addr: [%s]
  database: cdcjoin_test
  table: %s
  batch: {rows: 50, interval: 40ms}
  retry: {initial: 20ms, max: 200ms, max_elapsed: 1m}
`, addr, table)})
	cfg := writeFile(t, dir, "job.yaml", strings.Replace(yaml, "state: {dir: ", "state: {batch_events: 200, dir: ", 1))
	log := childLog(t, dir)
	conn := openClickHouse(t, addr)
	args := func(k int, last bool) []string {
		a := []string{"replay", "--config", cfg, "--input", input, "--clickhouse", addr,
			"--bad-records", filepath.Join(dir, fmt.Sprintf("bad-%d.jsonl", k))}
		if k > 0 {
			a = append(a, "--resume")
		}
		if last {
			a = append(a, "--end-of-input")
		}
		return a
	}
	const kills = 15
	killed := 0
	k := 0
	for ; k < kills; k++ {
		if runKilled(t, log, args(k, false), time.Duration(100+rng.IntN(900))*time.Millisecond) {
			killed++
		} else {
			t.Logf("run %d finished before its kill", k+1)
			k = kills
		}
	}
	if err := child(t, log, args(k+1, true)...).Wait(); err != nil {
		t.Fatalf("the last replay: %v", err)
	}
	if killed < 3 {
		t.Fatalf("only %d runs were killed", killed)
	}
	want, _ := timegen.Expected(s, events, true, nil, true)
	rows, err := conn.Query(context.Background(), fmt.Sprintf("SELECT lv, rv FROM cdcjoin_test.%s", table))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var lv, rv *string
		if err := rows.Scan(&lv, &rv); err != nil {
			t.Fatal(err)
		}
		txt := func(p *string) string {
			if p == nil {
				return "null"
			}
			return *p
		}
		got = append(got, txt(lv)+","+txt(rv)+",")
	}
	rows.Close()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("%d kills: ClickHouse has %d rows, the reference %d", killed, len(got), len(want))
	}
	var dup int64
	if err := conn.QueryRow(context.Background(), fmt.Sprintf("SELECT count() - uniqExact(_stream, _seq) FROM cdcjoin_test.%s", table)).Scan(&dup); err != nil || dup != 0 {
		t.Fatalf("%d rows inserted twice (%v)", dup, err)
	}
	t.Logf("%d kills; %d rows, each once", killed, len(got))
}

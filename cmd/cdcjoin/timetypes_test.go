package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/timejoin"
	"github.com/cdcjoin/cdcjoin/timejoin/timegen"
)

// TestTimeRunPaddedFirstBatchRealKafka: `cdcjoin run` of a LEFT interval
// join of schemaless records, no declared types for lv and rv, whose first
// emitted batch is a padded row only (rv NULL): the table it creates
// types rv from the right topic's records (sampled when the first rows
// arrive) and the run converges. Before the time join's sinks sampled
// the topics, the run died at that batch ("cannot create table … yet: no
// type is known for column(s) rv"), as TestTimeRunKillsRealKafka did with
// seed 68719.
func TestTimeRunPaddedFirstBatchRealKafka(t *testing.T) {
	chAddr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	brokers := testenv.Require(t, testenv.KafkaEnv, "Kafka")
	suffix := fmt.Sprintf("-padded-%d", time.Now().UnixNano())
	left, right := timegen.LeftTopic+suffix, timegen.RightTopic+suffix
	createTopics(t, brokers, 1, left, right)
	const ms = 1000
	s := &timejoin.Spec{Kind: timejoin.Interval, Join: timejoin.LeftOuter, Lower: -3 * ms, Upper: 5 * ms,
		OutOfOrderness: 2 * ms, AllowedLateness: ms, LeftWidth: 1, RightWidth: 1,
		Out: []timejoin.Column{{From: timejoin.FromLeft}, {From: timejoin.FromRight}}}
	ins := func(side timejoin.Side, tm int64, key, pk, val string) timegen.Event {
		return timegen.Event{Side: side, Op: timejoin.Insert, Time: tm, Key: key, PK: pk, Val: val}
	}
	// Phase 1: l1 (key a) has no match and is due once both sides are at
	// 100 ms: the first batch is its padded row alone (r1 and l2 wait, of
	// other keys). Phase 2: r2 joins l2, and the flush records make it due.
	events := []timegen.Event{
		ins(timejoin.SideLeft, 10*ms, "a", "l1", "x"),
		ins(timejoin.SideRight, 100*ms, "b", "r1", "r1"),
		ins(timejoin.SideLeft, 100*ms, "c", "l2", "y"),
		ins(timejoin.SideRight, 101*ms, "c", "r2", "z"),
	}
	events, _ = timegen.WithFlush(events, 1, 100*ms)
	recs := timegen.Encode(events, timegen.EncodeOptions{Seed: 1})
	for i := range recs {
		recs[i].Topic += suffix
	}
	dir := t.TempDir()
	name := "time-padded" + suffix
	table := fmt.Sprintf("time_padded_%d", time.Now().UnixNano())
	yaml := timegen.Config(timegen.ConfigOptions{Name: name, Spec: s, StateDir: filepath.Join(dir, "state"),
		Extra: fmt.Sprintf(`kafka:
  brokers: [%s]
  keyed_partitions: 1
  commit_interval: 100ms
  drain_timeout: 1s
  metrics_addr: 127.0.0.1:0
clickhouse:
  addr: [%s]
  database: cdcjoin_test
  table: %s
  batch: {rows: 20, interval: 40ms}
`, brokers, chAddr, table)})
	yaml = strings.ReplaceAll(strings.ReplaceAll(yaml, timegen.LeftTopic, left), timegen.RightTopic, right)
	cfg := writeFile(t, dir, "job.yaml", yaml)
	log := childLog(t, dir)
	conn := openClickHouse(t, chAddr)
	t.Cleanup(func() { conn.Exec(context.Background(), "DROP TABLE IF EXISTS cdcjoin_test."+table) })

	p := startRun(t, log, "--config", cfg, "--log-level", "info")
	stopped := false
	defer func() {
		if !stopped {
			p.stop(stopWait)
		}
	}()
	waitLog(t, log, p.mark, "partition assigned", 3*time.Minute)
	produced := 0
	await := func(want []string) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for {
			p.alive(t) // (the log's tail is printed at the test's end)
			got := timeRows(t, conn, "cdcjoin_test."+table)
			if slices.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("ClickHouse has %q, want %q", got, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	produceTime(t, []string{brokers}, recs, &produced, 3)
	await([]string{"x,null,"})
	var typ string
	if err := conn.QueryRow(context.Background(), "SELECT type FROM system.columns WHERE database = 'cdcjoin_test' AND table = ? AND name = 'rv'", table).Scan(&typ); err != nil {
		t.Fatal(err)
	}
	if typ != "Nullable(String)" {
		t.Fatalf("rv is %s, want Nullable(String) (the right topic's values)", typ)
	}
	produceTime(t, []string{brokers}, recs, &produced, len(recs))
	await([]string{"x,null,", "y,z,"})
	stopped = true
	if err := p.stop(stopWait); err != nil {
		t.Fatalf("cdcjoin run after SIGTERM: %v", err)
	}
}

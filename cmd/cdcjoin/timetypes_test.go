package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

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
	s, recs := paddedFirstHistory(suffix)
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
	produceTime(t, []string{brokers}, recs, &produced, 3) // l1, r1, l2
	await([]string{"x,null,"})
	checkRV(t, conn, table)
	produceTime(t, []string{brokers}, recs, &produced, len(recs))
	await([]string{"x,null,", "y,z,"})
	stopped = true
	if err := p.stop(stopWait); err != nil {
		t.Fatalf("cdcjoin run after SIGTERM: %v", err)
	}
}

// TestTimeReplayPaddedFirstBatch is TestTimeRunPaddedFirstBatchRealKafka
// for `cdcjoin replay --clickhouse` (a commit every record: the first
// INSERT is l1's padded row alone): the table's rv is typed by the right
// side's records applied before it. Before the engine observed the types
// of what it applied, the replay stopped there with "no type is known for
// column(s) rv".
func TestTimeReplayPaddedFirstBatch(t *testing.T) {
	chAddr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	suffix := fmt.Sprintf("-padded-replay-%d", time.Now().UnixNano())
	s, recs := paddedFirstHistory(suffix)
	dir := t.TempDir()
	table := fmt.Sprintf("time_padded_replay_%d", time.Now().UnixNano())
	yaml := timegen.Config(timegen.ConfigOptions{Name: "time-padded" + suffix, Spec: s, StateDir: filepath.Join(dir, "state"),
		Extra: fmt.Sprintf("clickhouse: {addr: [%s], database: cdcjoin_test, table: %s}\n", chAddr, table)})
	yaml = strings.ReplaceAll(strings.ReplaceAll(yaml, timegen.LeftTopic, timegen.LeftTopic+suffix), timegen.RightTopic, timegen.RightTopic+suffix)
	cfg := writeFile(t, dir, "job.yaml", strings.Replace(yaml, "state: {dir: ", "state: {batch_events: 1, dir: ", 1))
	input := filepath.Join(dir, "in.jsonl")
	writeHistory(t, input, recs)
	conn := openClickHouse(t, chAddr)
	t.Cleanup(func() { conn.Exec(context.Background(), "DROP TABLE IF EXISTS cdcjoin_test."+table) })
	if code, _, errs := run(t, "replay", "--config", cfg, "--input", input, "--clickhouse", chAddr, "--quiet"); code != 0 {
		t.Fatalf("replay: exit %d: %s", code, errs)
	}
	if got, want := timeRows(t, conn, "cdcjoin_test."+table), []string{"x,null,", "y,z,"}; !slices.Equal(got, want) {
		t.Fatalf("ClickHouse has %q, want %q", got, want)
	}
	checkRV(t, conn, table)
}

// checkRV fails the test unless column rv of table is Nullable(String),
// the type of the right side's (schemaless) values.
func checkRV(t *testing.T, conn ch.Conn, table string) {
	t.Helper()
	var typ string
	if err := conn.QueryRow(context.Background(), "SELECT type FROM system.columns WHERE database = 'cdcjoin_test' AND table = ? AND name = 'rv'", table).Scan(&typ); err != nil {
		t.Fatal(err)
	}
	if typ != "Nullable(String)" {
		t.Fatalf("rv is %s, want Nullable(String) (the right side's values)", typ)
	}
}

// paddedFirstHistory is a LEFT interval join's history (timegen's columns,
// lv and rv, schemaless, one partition per topic, topics named with
// suffix) whose first emitted row is padded: l1 (key a) has no match and
// is due once both sides are at 100 ms, while r1 and l2 (other keys) wait;
// r2 then joins l2, and the flush records make it due. The join's rows:
// x,null and y,z.
func paddedFirstHistory(suffix string) (*timejoin.Spec, []timegen.Record) {
	const ms = 1000
	s := &timejoin.Spec{Kind: timejoin.Interval, Join: timejoin.LeftOuter, Lower: -3 * ms, Upper: 5 * ms,
		OutOfOrderness: 2 * ms, AllowedLateness: ms, LeftWidth: 1, RightWidth: 1,
		Out: []timejoin.Column{{From: timejoin.FromLeft}, {From: timejoin.FromRight}}}
	ins := func(side timejoin.Side, tm int64, key, pk, val string) timegen.Event {
		return timegen.Event{Side: side, Op: timejoin.Insert, Time: tm, Key: key, PK: pk, Val: val}
	}
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
	return s, recs
}

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
)

// TestReemit: an operator truncates the ClickHouse table while `run`
// keeps going; later changes land on the empty table (rows not touched
// again are missing; in changelog mode retractions of truncated rows leave
// sum(_sign) < 0). `cdcjoin reemit` on the stopped instance brings the
// table back to the join, in both sink modes; a second reemit writes
// nothing; `run` continues on it. The table differs from the join before
// the reemit (negative control).
func TestReemit(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	for _, tc := range []struct{ mode, join string }{{"upsert", "inner"}, {"changelog", "left"}} {
		t.Run(tc.mode, func(t *testing.T) {
			seed := testSeed(t)
			t.Logf("seed %d", seed)
			o := cdcgen.DefaultOptions(int64(seed))
			o.Ops, o.Users, o.Domains = 2000, 40, 100
			o.Mix.TruncateUsers, o.Mix.TruncateDomains = 0, 0
			h := generate(t, o)
			c := sourceCluster(t, int32(o.Partitions))
			dir := t.TempDir()
			table := fmt.Sprintf("reemit_%s_%d_%d", tc.mode, time.Now().Unix(), seed)
			cfg := writeFile(t, dir, "job.yaml", fmt.Sprintf(`name: reemit
parent: {topic: %s, key: id}
child:  {topic: %s, key: id, parent_key: user_id}
join: %s
select: parent.id AS user_id, parent.firstname, parent.lastname, child.id AS domain_id, child.domain_name
state: {dir: %s, batch_events: 200}
kafka:
  brokers: [%s]
  session_timeout: 3s
  commit_interval: 100ms
  drain_timeout: 2s
  metrics_addr: 127.0.0.1:0
clickhouse:
  addr: [%s]
  database: cdcjoin_test
  table: %s
  mode: %s
  batch: {rows: 50, interval: 40ms}
`, cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic, tc.join, filepath.Join(dir, "state"), strings.Join(c.ListenAddrs(), ", "), addr, table, tc.mode))
			log := childLog(t, dir)
			conn := openClickHouse(t, addr)
			full := "cdcjoin_test." + table
			rows := func() []cdcgen.JoinedRow {
				if tc.mode == "upsert" {
					return upsertRows(t, conn, full)
				}
				return changelogRows(t, conn, full)
			}
			cp := len(h.Checkpoints) / 2
			mid, err := h.TablesAt(cp)
			if err != nil {
				t.Fatal(err)
			}
			left := tc.join == "left"
			produceRecords(t, c.ListenAddrs(), h.Records[:h.Checkpoints[cp].Records])
			p := startRun(t, log, "--config", cfg, "--log-level", "info")
			untilEqual := func(want []cdcgen.JoinedRow, what string) {
				t.Helper()
				if why, diff, _ := p.awaitRows(t, want, rows); why != "" {
					t.Fatalf("%s: %s:\n%s\n%s", what, why, diff, childProgress(p.metrics))
				}
			}
			untilEqual(cdcgen.Join(mid.Users, mid.Domains, left), "the first half")
			if err := conn.Exec(context.Background(), "TRUNCATE TABLE "+full); err != nil {
				t.Fatal(err)
			}
			produceRecords(t, c.ListenAddrs(), h.Records[h.Checkpoints[cp].Records:])
			waitCaughtUp(t, c.ListenAddrs(), "reemit", cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic)
			waitQuiet(t, p.metrics)
			want := cdcgen.Join(h.Final.Users, h.Final.Domains, left)
			before := cdcgen.Diff(want, rows(), 3)
			if before == "" {
				t.Fatal("the table equals the join after the truncate: the test proves nothing")
			}
			t.Logf("after the truncate and the second half: %s", strings.SplitN(before, "\n", 2)[0])
			if err := p.stop(stopWait); err != nil {
				t.Fatalf("run after SIGTERM: %v", err)
			}
			code, out, errs := run(t, "reemit", "--config", cfg, "--log-level", "warn")
			if code != 0 {
				t.Fatalf("reemit: exit %d: %s", code, errs)
			}
			t.Logf("%s", strings.TrimSpace(out))
			if d := cdcgen.Diff(want, rows(), 10); d != "" {
				t.Fatalf("after reemit the table differs from the join:\n%s", d)
			}
			if tc.mode == "changelog" {
				checkSigns(t, conn, full)
			}
			code, out, errs = run(t, "reemit", "--config", cfg, "--log-level", "warn")
			if code != 0 || !strings.Contains(out, "0 inserted, 0 cancelled, 0 deleted") {
				t.Fatalf("a second reemit: exit %d, %q %s; want nothing written", code, out, errs)
			}
			// `run` continues on the repaired table.
			p = startRun(t, log, "--config", cfg, "--log-level", "info")
			waitLog(t, log, p.mark, "partition assigned", 3*time.Minute)
			waitQuiet(t, p.metrics)
			untilEqual(want, "run after reemit")
			if err := p.stop(stopWait); err != nil {
				t.Fatalf("run after SIGTERM: %v", err)
			}
			if tc.mode == "changelog" {
				checkSigns(t, conn, full)
			}
			conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+full)
		})
	}
}

// waitCaughtUp waits until job's run has applied everything in its source
// topics: the keying group's committed offsets reach the sources' ends,
// and then the join group's reach the keyed topic's (a caught-up join
// position is past the last transaction's marker, so it equals the end).
// Counters alone do not tell: a rebalance under load (the keying group's
// membership lost, its indexes restored) can leave them still for seconds
// while input is left.
func waitCaughtUp(t *testing.T, brokers []string, job string, sources ...string) {
	t.Helper()
	adm := kadm.NewClient(mustKgo(t, brokers))
	deadline := time.Now().Add(5 * time.Minute)
	for _, g := range []struct {
		group  string
		topics []string
	}{{job + "-keying", sources}, {job + "-join", []string{job + ".keyed"}}} {
		for {
			behind, err := groupBehind(adm, g.group, g.topics)
			if err == nil && behind == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("group %s did not catch up with %v within 5m: %s %v", g.group, g.topics, behind, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// groupBehind lists the partitions of topics whose committed offset in
// group is short of the partition's end ("" when none is).
func groupBehind(adm *kadm.Client, group string, topics []string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return "", err
	}
	committed, err := adm.FetchOffsetsForTopics(ctx, group, topics...)
	if err == nil {
		err = committed.Error()
	}
	if err != nil {
		return "", err
	}
	var behind []string
	ends.Each(func(e kadm.ListedOffset) {
		c, ok := committed.Lookup(e.Topic, e.Partition)
		if e.Offset > 0 && (!ok || c.At < e.Offset) {
			behind = append(behind, fmt.Sprintf("%s/%d at %d of %d", e.Topic, e.Partition, c.At, e.Offset))
		}
	})
	return strings.Join(behind, ", "), nil
}

// waitQuiet waits until a run's counters have not moved for 3 s (it has
// done the work there was).
func waitQuiet(t *testing.T, metrics string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	last, since := "", time.Now()
	for time.Since(since) < 3*time.Second {
		if time.Now().After(deadline) {
			t.Fatalf("the run kept working for 5 minutes:\n%s", childProgress(metrics))
		}
		if c := counterText(scrape(metrics)); c != last {
			last, since = c, time.Now()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

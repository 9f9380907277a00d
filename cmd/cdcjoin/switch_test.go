package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/kafkarun"
)

// viewRows reads the live view's rows of the default select list.
func viewRows(t *testing.T, conn ch.Conn, view string) []cdcgen.JoinedRow {
	t.Helper()
	out, err := queryJoined(t, conn, selectJoined(view))
	if err != nil {
		t.Fatalf("reading %s: %v", view, err)
	}
	cdcgen.SortRows(out)
	return out
}

// TestSwitchJob changes a running job without downtime: the old job
// (`cdcjoin run`) serves the live view; a new job with another select list
// (a column added) runs next to it, building its own state and table from
// the source topics; `cdcjoin switch` waits until it caught up and points
// the view at its table. Queries of the view, four goroutines in a tight
// loop from before the new job starts until after the switch, must always
// read the complete join — the same row count and checksum — never a
// partial or empty table, nor an error; after the switch the view has the
// new column.
func TestSwitchJob(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	o := cdcgen.DefaultOptions(int64(testSeed(t)))
	o.Ops, o.Users, o.Domains = 3000, 80, 200
	o.Mix.TruncateUsers, o.Mix.TruncateDomains = 0, 0
	h := generate(t, o)
	c := sourceCluster(t, int32(o.Partitions))
	produceRecords(t, c.ListenAddrs(), h.Records)
	dir := t.TempDir()
	stamp := time.Now().UnixNano() % 1e9
	view := fmt.Sprintf("switch_live_%d", stamp)
	job := func(name, selectList string) (string, *config.Config) {
		path := writeFile(t, dir, name+".yaml", fmt.Sprintf(`name: %s
parent: {topic: %s, key: id}
child:  {topic: %s, key: id, parent_key: user_id}
select: %s
state: {dir: %s}
kafka: {brokers: [%s], session_timeout: 1s, commit_interval: 100ms, rebalance_timeout: 3s, drain_timeout: 1s}
clickhouse: {addr: [%s], database: cdcjoin_test, table: %s_%d, batch: {interval: 50ms}}
`, name, cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic, selectList, filepath.Join(dir, name+"-state"),
			strings.Join(c.ListenAddrs(), ", "), addr, name, stamp))
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return path, cfg
	}
	base := "parent.id AS user_id, parent.firstname, parent.lastname, child.id AS domain_id, child.domain_name"
	oldPath, oldCfg := job("switch_old", base)
	newPath, newCfg := job("switch_new", base+", parent.email")
	conn := openClickHouse(t, addr)
	log := childLog(t, dir)
	start := func(path string) (*exec.Cmd, chan error) {
		cmd := child(t, log, "run", "--config", path, "--log-level", "info")
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		return cmd, done
	}
	waitCaught := func(cfg *config.Config) {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			ok, behind, err := kafkarun.CaughtUp(context.Background(), cfg)
			if err == nil && ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not catch up: %s %v", cfg.Name, behind, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	want := cdcgen.Join(h.Final.Users, h.Final.Domains, false)
	old, oldDone := start(oldPath)
	defer func() { old.Process.Kill(); <-oldDone }()
	waitCaught(oldCfg)
	if code, out, errs := run(t, "switch", "--config", oldPath, "--view", view, "--wait", "1m"); code != 0 {
		t.Fatalf("first switch (creating the view): %d %s %s", code, out, errs)
	}
	live := "cdcjoin_test." + view
	defer conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+live)
	deadline := time.Now().Add(time.Minute)
	for cdcgen.Diff(want, viewRows(t, conn, live), 5) != "" {
		if time.Now().After(deadline) {
			t.Fatalf("the old job's view does not equal the join:\n%s", cdcgen.Diff(want, viewRows(t, conn, live), 10))
		}
		time.Sleep(200 * time.Millisecond)
	}
	sum := "SELECT count(), sum(cityHash64(toString(user_id), toString(domain_id), ifNull(firstname, ''), ifNull(lastname, ''), ifNull(domain_name, ''))) FROM " + live
	var wantN, wantH uint64
	if err := conn.QueryRow(context.Background(), sum).Scan(&wantN, &wantH); err != nil {
		t.Fatal(err)
	}
	// Queriers: every read of the view must be the complete join.
	var stop atomic.Bool
	var queries, bad atomic.Int64
	var firstBad atomic.Value
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				var n, hh uint64
				err := conn.QueryRow(context.Background(), sum).Scan(&n, &hh)
				queries.Add(1)
				if err != nil || n != wantN || hh != wantH {
					bad.Add(1)
					firstBad.CompareAndSwap(nil, fmt.Sprintf("rows %d (want %d), checksum %d (want %d), err %v", n, wantN, hh, wantH, err))
				}
			}
		}()
	}
	nw, newDone := start(newPath)
	defer func() { nw.Process.Kill(); <-newDone }()
	code, out, errs := run(t, "switch", "--config", newPath, "--view", view, "--wait", "2m")
	if code != 0 {
		t.Fatalf("switch: %d %s %s", code, out, errs)
	}
	switched := queries.Load()
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()
	t.Logf("%d queries of the view during the new job's build and the switch (%d after it): %d not the complete join; %s", queries.Load(), queries.Load()-switched, bad.Load(), strings.TrimSpace(out))
	if bad.Load() > 0 {
		t.Fatalf("%d queries saw something else than the complete join, first: %v", bad.Load(), firstBad.Load())
	}
	if d := cdcgen.Diff(want, viewRows(t, conn, live), 10); d != "" {
		t.Fatalf("after the switch the view differs from the join:\n%s", d)
	}
	var emails uint64
	if err := conn.QueryRow(context.Background(), "SELECT countIf(email IS NOT NULL) FROM "+live).Scan(&emails); err != nil || emails == 0 {
		t.Fatalf("the view has no email column from the new job: %v (%d)", err, emails)
	}
	// Negative control: a switch that is not one atomic step (drop the
	// view, create it again) is seen by the same queriers.
	stop.Store(false)
	queries.Store(0)
	bad.Store(0)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				var n, hh uint64
				err := conn.QueryRow(context.Background(), sum).Scan(&n, &hh)
				queries.Add(1)
				if err != nil || n != wantN || hh != wantH {
					bad.Add(1)
				}
			}
		}()
	}
	var def string
	if err := conn.QueryRow(context.Background(), "SELECT create_table_query FROM system.tables WHERE database = 'cdcjoin_test' AND name = ?", view).Scan(&def); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30 && bad.Load() == 0; i++ {
		conn.Exec(context.Background(), "DROP TABLE "+live)
		time.Sleep(5 * time.Millisecond)
		if err := conn.Exec(context.Background(), def); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if bad.Load() == 0 {
		t.Fatalf("negative control: %d queries saw nothing of 30 non-atomic switches: the check proves nothing", queries.Load())
	}
	t.Logf("negative control: a DROP + CREATE switch was seen by %d of %d queries", bad.Load(), queries.Load())
	// The old job stops; the view goes on from the new one.
	old.Process.Signal(syscall.SIGTERM)
	if err := <-oldDone; err != nil {
		t.Errorf("old job after SIGTERM: %v", err)
	}
	oldDone <- nil
	nw.Process.Signal(syscall.SIGTERM)
	if err := <-newDone; err != nil {
		t.Errorf("new job after SIGTERM: %v", err)
	}
	newDone <- nil
	for _, cfg := range []*config.Config{oldCfg, newCfg} {
		conn.Exec(context.Background(), "DROP TABLE IF EXISTS cdcjoin_test."+cfg.ClickHouse.Table+"_current")
		conn.Exec(context.Background(), "DROP TABLE IF EXISTS cdcjoin_test."+cfg.ClickHouse.Table)
	}
}

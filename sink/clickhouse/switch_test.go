package clickhouse

import (
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/internal/testenv"
)

// TestSwitchStatementsModern runs the live-view switch of a current server
// (CREATE OR REPLACE VIEW) on one (chdb): the view first reads the old
// job's table, then the new job's, with its added column. 18.16's RENAME
// form runs against the real server in cmd/cdcjoin TestSwitchJob.
func TestSwitchStatementsModern(t *testing.T) {
	python := testenv.Require(t, testenv.ChdbEnv, "chdb (current ClickHouse)")
	srv := LatestServer()
	oldCfg := testConfig(t, "127.0.0.1:9000", "upsert", "inner", "")
	newCfg := testConfig(t, "127.0.0.1:9000", "upsert", "inner", "")
	oldCfg.ClickHouse.Database, newCfg.ClickHouse.Database = "sw", "sw"
	var stmts []string
	ddlOld, err := DDL(oldCfg, testTypes(), srv)
	if err != nil {
		t.Fatal(err)
	}
	ddlNew, err := DDL(newCfg, testTypes(), srv)
	if err != nil {
		t.Fatal(err)
	}
	stmts = append(append(stmts, ddlOld...), ddlNew[1:]...)
	ins := func(table, name string) string {
		return "INSERT INTO sw." + table + " (user_id, user_name, domain_id, domain, amount, created, _pk, _ck, _version, _deleted) VALUES (1, '" + name + "', 2, 'd', 1.5, now64(6), 'a', 'b', 1, 0)"
	}
	stmts = append(stmts, ins(oldCfg.ClickHouse.Table, "old"), ins(newCfg.ClickHouse.Table, "new"))
	first, err := SwitchStatements(oldCfg, "live", srv, false)
	if err != nil {
		t.Fatal(err)
	}
	second, err := SwitchStatements(newCfg, "live", srv, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(second) != 1 || !strings.HasPrefix(second[0], "CREATE OR REPLACE VIEW") {
		t.Fatalf("current server's switch: %q", second)
	}
	stmts = append(append(stmts, first...), "SELECT 1")
	before := runChdb(t, python, t.TempDir(), append(append([]string(nil), stmts[:len(stmts)-1]...), "SELECT user_name FROM sw.live"))
	after := runChdb(t, python, t.TempDir(), append(append(append([]string(nil), stmts[:len(stmts)-1]...), second...), "SELECT user_name FROM sw.live"))
	if strings.TrimSpace(before) != "old" || strings.TrimSpace(after) != "new" {
		t.Errorf("live view before the switch %q, after %q", before, after)
	}
	old := Server{Major: 18, Minor: 16}
	rename, _ := SwitchStatements(newCfg, "live", old, true)
	if len(rename) != 5 || !strings.HasPrefix(rename[3], "RENAME TABLE `sw`.`live` TO `sw`.`live_cdcjoin_prev`, `sw`.`live_cdcjoin_next` TO `sw`.`live`") {
		t.Errorf("18.16's switch: %q", rename)
	}
	if _, err := SwitchStatements(newCfg, newCfg.ClickHouse.Table, srv, true); err == nil {
		t.Error("a live view named like the job's table was accepted")
	}
}

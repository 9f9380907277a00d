package clickhouse

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/row"
)

// purgeJob is a small upsert job with declared types (the DDL's column
// types come from them, as `cdcjoin ddl` prints them).
const purgeJob = `
name: purge_demo
parent: {topic: u, key: id, types: {id: bigint, firstname: text}}
child:  {topic: d, key: id, parent_key: user_id, types: {id: bigint, user_id: bigint, domain_name: text}}
join: left
select: parent.id AS user_id, parent.firstname, child.id AS domain_id, child.domain_name
state: {dir: ./state}
clickhouse: {addr: ["127.0.0.1:9000"], database: analytics, table: user_domains}
`

func purgeConfig(t *testing.T, extra string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(purgeJob+extra), "purge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func userDomain(op row.ChangeOp, ver uint64, user int64, name string, domain int64, dname string) row.Change {
	c := row.Change{Op: op, Version: ver, ParentKey: []row.Value{row.Int(user)},
		Values: []row.Value{row.Int(user), row.String(name), row.Int(domain), row.String(dname)}}
	if domain != 0 {
		c.ChildKey = []row.Value{row.Int(domain)}
	} else {
		c.Values[2], c.Values[3] = row.Null(), row.Null()
	}
	return c
}

// TestModernDeletesAndPurge runs, on a current ClickHouse (chdb,
// in-process), what the upsert sink does with deletions: the table and view
// from `cdcjoin ddl` (ReplacingMergeTree(_version, _deleted) with the
// cleanup setting), three INSERTs encoded by the sink's batches exactly as
// it sends them (new rows; a deletion, an update, a padded row replaced by a
// child; a row re-created after its deletion), then the live view, the
// table under FINAL without any filter (the engine parameter drops the
// deletions), the purge of Purge, and both again: the deleted rows are gone
// from the table itself, the live join unchanged. Negative control: the
// 18.16 engine (ReplacingMergeTree(_version)) shows the deletions under a
// bare FINAL.
func TestModernDeletesAndPurge(t *testing.T) {
	python := testenv.Require(t, testenv.ChdbEnv, "chdb (current ClickHouse)")
	srv := LatestServer()
	cfg := purgeConfig(t, "")
	stmts, err := DDL(cfg, nil, srv)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stmts[1], "ReplacingMergeTree(_version, _deleted)") || !strings.Contains(stmts[1], "allow_experimental_replacing_merge_with_cleanup = 1") {
		t.Fatalf("modern DDL:\n%s", stmts[1])
	}
	batches := [][]row.Change{
		{
			userDomain(row.Upsert, 1, 1, "Egor", 1, "Approval"),
			userDomain(row.Upsert, 2, 1, "Egor", 2, "Rejection"),
			userDomain(row.Upsert, 3, 2, "Pavel", 3, "Stoppage"),
			userDomain(row.Upsert, 4, 3, "Mitya", 0, ""), // padded: user 3 without domains
		},
		{
			userDomain(row.Retract, 5, 1, "Egor", 2, "Rejection"),    // domain 2 deleted
			userDomain(row.Upsert, 6, 2, "Pavel2", 3, "Stoppage"),    // user 2 renamed
			userDomain(row.Retract, 7, 3, "Mitya", 0, ""),            // user 3 gets a domain:
			userDomain(row.Upsert, 7, 3, "Mitya", 4, "Cancellation"), // the padded row goes
			userDomain(row.Retract, 8, 1, "Egor", 1, "Approval"),     // domain 1 deleted …
		},
		{
			userDomain(row.Upsert, 9, 1, "Egor", 1, "Approval"), // … and re-created
		},
	}
	colTypes := ColumnTypes(cfg, nil, nil, srv)
	dir := t.TempDir()
	table := tableName(cfg.ClickHouse)
	for i, b := range batches {
		file := filepath.Join(dir, fmt.Sprintf("batch%d.native", i))
		if err := os.WriteFile(file, nativeInsert(t, cfg, colTypes, b), 0o644); err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, fmt.Sprintf("INSERT INTO %s SELECT * FROM file('%s', Native)", table, file))
	}
	db := filepath.Join(dir, "db")
	runChdb(t, python, db, stmts)
	const live = "1 Egor 1 Approval 9\n2 Pavel2 3 Stoppage 6\n3 Mitya 4 Cancellation 7\n"
	view := fmt.Sprintf("SELECT user_id, firstname, domain_id, domain_name FROM analytics.%s ORDER BY user_id, domain_id", ViewName(cfg.ClickHouse))
	final := "SELECT user_id, firstname, domain_id, domain_name, _version FROM " + table + " FINAL ORDER BY user_id, domain_id"
	deleted := "SELECT count() FROM " + table + " WHERE _deleted = 1"
	q := func(sql string) string {
		t.Helper()
		return strings.ReplaceAll(runChdb(t, python, db, []string{sql}), "\t", " ")
	}
	if got, want := q(view), dropLastField(live); got != want {
		t.Errorf("live view:\n%s\nwant:\n%s", got, want)
	}
	if got := q(final); got != live {
		t.Errorf("FINAL without a filter (the engine drops deletions):\n%s\nwant:\n%s", got, live)
	}
	if got := q(deleted); got == "0\n" {
		t.Fatalf("no deleted row in the table before the purge: nothing to show")
	}
	purge, err := Purge(cfg.ClickHouse, srv)
	if err != nil {
		t.Fatal(err)
	}
	runChdb(t, python, db, purge)
	if got := q(deleted); got != "0\n" {
		t.Errorf("after %s: %s deleted rows left", purge, got)
	}
	if got := q("SELECT count() FROM " + table); got != "3\n" {
		t.Errorf("after the purge the table holds %s rows, want the 3 live ones", got)
	}
	if got := q(final); got != live {
		t.Errorf("FINAL after the purge:\n%s\nwant:\n%s", got, live)
	}
	if got, want := q(view), dropLastField(live); got != want {
		t.Errorf("live view after the purge:\n%s\nwant:\n%s", got, want)
	}
	// An upsert after the purge (a later version of a purged row) shows again.
	file := filepath.Join(dir, "batch3.native")
	if err := os.WriteFile(file, nativeInsert(t, cfg, colTypes, []row.Change{userDomain(row.Upsert, 10, 1, "Egor", 2, "Rejection2")}), 0o644); err != nil {
		t.Fatal(err)
	}
	runChdb(t, python, db, []string{fmt.Sprintf("INSERT INTO %s SELECT * FROM file('%s', Native)", table, file)})
	if got, want := q(final), "1 Egor 1 Approval 9\n1 Egor 2 Rejection2 10\n2 Pavel2 3 Stoppage 6\n3 Mitya 4 Cancellation 7\n"; got != want {
		t.Errorf("FINAL after a re-insert:\n%s\nwant:\n%s", got, want)
	}

	// Negative control: the 18.16 table (no is_deleted parameter) keeps the
	// deletions visible under a bare FINAL; only the view's filter hides them.
	old, err := DDL(cfg, nil, Server{18, 16})
	if err != nil {
		t.Fatal(err)
	}
	oldDB := filepath.Join(dir, "old")
	for i, b := range batches {
		file := filepath.Join(dir, fmt.Sprintf("old%d.native", i))
		if err := os.WriteFile(file, nativeInsert(t, cfg, ColumnTypes(cfg, nil, nil, Server{18, 16}), b), 0o644); err != nil {
			t.Fatal(err)
		}
		old = append(old, fmt.Sprintf("INSERT INTO %s SELECT * FROM file('%s', Native)", table, file))
	}
	runChdb(t, python, oldDB, old)
	got := strings.ReplaceAll(runChdb(t, python, oldDB, []string{final}), "\t", " ")
	if got == live || !strings.Contains(got, "Rejection") {
		t.Errorf("negative control: a table without the is_deleted parameter hid the deletions under FINAL:\n%s", got)
	}
	if got := strings.ReplaceAll(runChdb(t, python, oldDB, []string{view}), "\t", " "); got != dropLastField(live) {
		t.Errorf("18.16 DDL's view:\n%s\nwant:\n%s", got, dropLastField(live))
	}
}

// dropLastField removes the last space-separated field of every line.
func dropLastField(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l == "" {
			continue
		}
		b.WriteString(l[:strings.LastIndexByte(l, ' ')] + "\n")
	}
	return b.String()
}

// TestClusterDDL: with clickhouse.cluster the DDL runs ON CLUSTER with
// Replicated* engines (both modes, 18.16 and current); a current server
// parses every statement, and the purge's (formatQuery: chdb has no Keeper
// to create replicated tables).
func TestClusterDDL(t *testing.T) {
	var all []string
	for _, mode := range []string{"upsert", "changelog"} {
		cfg := purgeConfig(t, "")
		cfg.ClickHouse.Mode = mode
		cfg.ClickHouse.Cluster = "prod"
		cfg.ClickHouse.ReplicaPath = "/clickhouse/tables/{shard}/analytics/user_domains"
		for _, srv := range []Server{{18, 16}, LatestServer()} {
			stmts, err := DDL(cfg, nil, srv)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, fmt.Sprintf("-- %s, %s", mode, srv))
			all = append(all, stmts...)
			if mode == "upsert" && srv.HasCleanup() {
				p, err := Purge(cfg.ClickHouse, srv)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, p...)
			}
		}
	}
	got := strings.Join(all, ";\n") + ";\n"
	checkGolden(t, "testdata/ddl-cluster.golden", got)
	for _, want := range []string{
		"CREATE DATABASE IF NOT EXISTS `analytics` ON CLUSTER `prod`",
		"ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/analytics/user_domains', '{replica}', _version, _deleted)",
		"ENGINE = ReplicatedVersionedCollapsingMergeTree('/clickhouse/tables/{shard}/analytics/user_domains', '{replica}', _sign, _version)",
		"replicated_deduplication_window = 1000",
		"SYSTEM SYNC REPLICA ON CLUSTER `prod` `analytics`.`user_domains`",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("cluster DDL lacks %q", want)
		}
	}
	python := testenv.Require(t, testenv.ChdbEnv, "chdb (current ClickHouse)")
	var parse []string
	for _, s := range all {
		if !strings.HasPrefix(s, "-- ") {
			parse = append(parse, "formatQuery("+quoteString(s)+")")
		}
	}
	out := runChdb(t, python, t.TempDir(), []string{"SELECT arrayJoin([" + strings.Join(parse, ", ") + "])"})
	if n, want := strings.Count(out, "ON CLUSTER"), strings.Count(got, "ON CLUSTER"); n != want {
		t.Errorf("the server's formatQuery shows ON CLUSTER %d times, the DDL has it %d times:\n%s", n, want, out)
	}
}

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/internal/testkit"
)

// TestReplayPlanKills: a job written as SQL over three tables (cdcgen
// Schema4: every hard case at every table), a multi-stage plan, runs as
// `cdcjoin replay --clickhouse` into a real ClickHouse and is killed with
// SIGKILL at random points and resumed (--resume) each time; at the end
// the table's live rows equal, row for row (as a multiset, every column
// as text), PostgreSQL's answer to the same query over the final tables.
// Two shapes: the query (INNER + LEFT with conditions in ON and
// WHERE) into a changelog table (exactly once: every sum(_sign) is 0 or
// 1), and a chain of two FULL joins with match conditions into an upsert
// table (ReplacingMergeTree, read with FINAL).
func TestReplayPlanKills(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	dsn := testenv.Require(t, testenv.PostgresEnv, "PostgreSQL oracle")
	for _, tc := range []struct {
		name, mode string
		truncates  bool // the history truncates tables (about one per 150 operations)
		batch      int  // clickhouse.batch.rows
		sql        string
	}{
		{"inner-left-filter", "changelog", false, 8, `SELECT u.id AS user_id, u.firstname, u.lastname, d.id AS domain_id, d.domain_name,
       r.id AS record_id, r.rtype, r.ttl
FROM users u
JOIN domains d ON d.user_id = u.id
LEFT JOIN dns_records r ON r.domain_id = d.id AND r.rtype <> 'TXT'
WHERE d.domain_name LIKE '%.com' AND u.lastname IS NOT NULL`},
		{"full-full", "upsert", true, 200, `SELECT u.id AS uid, u.lastname, d.id AS did, d.domain_name, r.id AS rid, r.rtype
FROM users u FULL JOIN domains d ON d.user_id = u.id AND u.firstname <> 'Egor'
FULL JOIN dns_records r ON r.domain_id = d.id AND r.rtype IN ('A', 'AAAA')`},
	} {
		t.Run(tc.name, func(t *testing.T) { replayPlanKills(t, addr, dsn, tc.mode, tc.truncates, tc.batch, tc.sql) })
	}
}

func replayPlanKills(t *testing.T, addr, dsn, mode string, truncates bool, batch int, sql string) {
	seed := testSeed(t)
	t.Logf("seed %d (rerun with CDCJOIN_SEED=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 20))
	o := cdcgen.DefaultMultiOptions(int64(seed))
	o.Rows, o.Ops, o.Truncates = 400, 20000, truncates
	if testing.Short() {
		o.Ops = 4000
	}
	h, err := cdcgen.GenerateMulti(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("history: %s", h.Stats)
	dir := t.TempDir()
	in, err := os.Create(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var tables strings.Builder
	topics := map[string]bool{}
	for _, tb := range cdcgen.Schema4() {
		if strings.Contains(sql, " "+tb.Name+" ") {
			fmt.Fprintf(&tables, "  %s: {topic: %s, key: id}\n", tb.Name, tb.Topic())
			topics[tb.Topic()] = true
		}
	}
	var recs []cdcgen.Record
	for _, rec := range h.Records {
		if topics[rec.Topic] {
			recs = append(recs, rec)
		}
	}
	if err := cdcgen.WriteJSONL(in, recs); err != nil {
		t.Fatal(err)
	}
	in.Close()
	table := fmt.Sprintf("replay_plan_%s_%d_%d", mode, time.Now().Unix(), seed)
	query := "  " + strings.ReplaceAll(sql, "\n", "\n  ")
	cfg := writeFile(t, dir, "job.yaml", fmt.Sprintf(`name: replay-plan
tables:
%squery: |
%s
state: {dir: %s, batch_events: 150}
clickhouse:
  addr: [%s]
  database: cdcjoin_test
  table: %s
  mode: %s
  batch: {rows: %d, interval: 40ms}
  retry: {initial: 20ms, max: 200ms, max_elapsed: 1m}
`, tables.String(), query, filepath.Join(dir, "state"), addr, table, mode, batch))
	log := childLog(t, dir)
	conn := openClickHouse(t, addr)
	defer conn.Exec(context.Background(), "DROP TABLE IF EXISTS cdcjoin_test."+table)
	args := func(resume bool) []string {
		a := []string{"replay", "--config", cfg, "--input", in.Name(), "--clickhouse", addr, "--quiet"}
		if resume {
			a = append(a, "--resume")
		}
		return a
	}
	kills := 8
	if testing.Short() {
		kills = 3
	}
	killed := 0
	for k := 0; k < kills; k++ {
		if runKilled(t, log, args(k > 0), time.Duration(100+r.IntN(900))*time.Millisecond) {
			killed++
		} else {
			t.Logf("run %d finished before its kill", k+1)
			k = kills
		}
		fmt.Fprintf(log, "--- kill %d\n", k+1)
	}
	cmd := child(t, log, args(true)...)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the last replay: %v", err)
	}
	if killed == 0 {
		t.Fatalf("no run was killed mid-run: the history is too small for the test")
	}
	names := selectNames(t, sql)
	want := postgresRows(t, dsn, h.Final, sql, names)
	got := clickhouseRows(t, conn, "cdcjoin_test."+table, mode, names)
	if diff := testkit.MultisetDiff(want, got, 10); diff != "" {
		t.Fatalf("after %d kills, ClickHouse does not equal PostgreSQL (- missing, + extra):\n%s", killed, diff)
	}
	if mode == "changelog" {
		if inserts := checkSigns(t, conn, "cdcjoin_test."+table); inserts == 0 {
			t.Fatal("no INSERT carried a delivery marker")
		}
	}
	t.Logf("%d kills; %d rows equal PostgreSQL's (%d records)", killed, len(want), len(recs))
	if len(want) == 0 {
		t.Fatal("the query yields no rows: the test proves nothing")
	}
}

// selectNames returns the output names of sql (the words after AS, or the
// column of a bare t.col), in order.
func selectNames(t *testing.T, sql string) []string {
	t.Helper()
	list := sql[len("SELECT "):strings.Index(sql, "\nFROM")]
	var names []string
	for _, item := range strings.Split(list, ",") {
		f := strings.Fields(item)
		n := f[len(f)-1]
		if i := strings.IndexByte(n, '.'); i >= 0 {
			n = n[i+1:]
		}
		names = append(names, n)
	}
	return names
}

// postgresRows loads the final tables into a fresh schema and returns the
// query's rows, each the \x1f-joined text of its columns (NULL as \N).
func postgresRows(t *testing.T, dsn string, final cdcgen.MultiTables, sql string, names []string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	schema := fmt.Sprintf("replay_plan_%d", time.Now().UnixNano())
	stmts := append([]string{"CREATE SCHEMA " + schema}, final.SQL(cdcgen.Schema4(), schema)...)
	defer conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("postgres: %.80s: %v", s, err)
		}
	}
	if _, err := conn.Exec(ctx, "SET search_path TO "+schema); err != nil {
		t.Fatal(err)
	}
	cols := make([]string, len(names))
	for i, n := range names {
		cols[i] = fmt.Sprintf(`coalesce(q.%s::text, '\N')`, n)
	}
	rows, err := conn.Query(ctx, "SELECT "+strings.Join(cols, ` || chr(31) || `)+" FROM ("+sql+") q")
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	defer rows.Close()
	out := testkit.Strings(t, rows)
	slices.Sort(out)
	return out
}

// clickhouseRows reads the live rows of the job's table like postgresRows:
// a changelog table's row keys with sum(_sign) > 0, an upsert table's rows
// under FINAL that are not deletions (delivery markers excluded).
func clickhouseRows(t *testing.T, conn ch.Conn, table, mode string, names []string) []string {
	t.Helper()
	cols := make([]string, len(names))
	for i, n := range names {
		cols[i] = fmt.Sprintf(`ifNull(toString(%s), '\\N')`, n)
	}
	row := "concat(" + strings.Join(cols, ", '\\x1f', ") + ")"
	q := "SELECT " + row + " FROM " + table + " FINAL WHERE _deleted = 0 AND _pk != '\\0cdcjoin'"
	if mode == "changelog" {
		q = "SELECT " + row + " FROM " + table + " WHERE _pk != '\\0cdcjoin' GROUP BY _pk, _ck, " +
			strings.Join(names, ", ") + " HAVING sum(_sign) > 0"
	}
	rows, err := conn.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("clickhouse: %s: %v", q, err)
	}
	defer rows.Close()
	out := testkit.Strings(t, rows)
	slices.Sort(out)
	return out
}

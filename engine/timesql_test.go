package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/timejoin"
	"github.com/cdcjoin/cdcjoin/timejoin/timegen"
)

// TestTimeSQLOracle replays seeded histories of each kind (interval and
// window: INNER, LEFT, and without -short RIGHT, FULL; temporal: INNER,
// LEFT) through the engine, crashing and resuming, to the end of input,
// and compares the emitted rows with PostgreSQL's answer to the join
// written in SQL (the seeds' BETWEEN form of the interval join; windows
// from generate_series; the temporal join as the newest version at or
// before the left time) over the rows that are not late. Late is the
// reference's watermark rule (timegen.Late), independent of the
// implementation, and every late record must be dead-lettered. Negative
// control: the same SQL over all rows, late ones included, differs for
// some history.
func TestTimeSQLOracle(t *testing.T) {
	dsn := testenv.Require(t, testenv.PostgresEnv, "PostgreSQL oracle")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	defer conn.Close(ctx)
	seed := timeSeed(t)
	schema := fmt.Sprintf("timesql_%d", seed%1_000_000_007)
	for _, s := range []string{"DROP SCHEMA IF EXISTS " + schema + " CASCADE", "CREATE SCHEMA " + schema, "SET search_path TO " + schema} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("postgres: %s: %v", s, err)
		}
	}
	defer conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	rounds, types := 3, []timejoin.JoinType{timejoin.Inner, timejoin.LeftOuter, timejoin.RightOuter, timejoin.FullOuter}
	if testing.Short() {
		rounds, types = 1, types[:2]
	}
	controls := 0
	for round := 0; round < rounds; round++ {
		for _, kind := range []timejoin.Kind{timejoin.Interval, timejoin.Window, timejoin.Temporal} {
			for _, jt := range types {
				if kind == timejoin.Temporal && jt > timejoin.LeftOuter {
					continue
				}
				rng := rand.New(rand.NewPCG(seed, uint64(round*100)+uint64(kind)*10+uint64(jt)+7))
				r := replayTime(t, rng, kind, jt, round%2 == 1, true)
				late, _ := timegen.Late(r.spec, r.events, true, nil, true)
				var wantLate []int
				for i, l := range late {
					if l {
						wantLate = append(wantLate, i)
					}
				}
				if !slices.Equal(r.late, wantLate) {
					t.Errorf("seed %d %s %s: dead-lettered %v, late %v", seed, kind, jt, r.late, wantLate)
				}
				sql := timeSQL(r.spec)
				want := postgresTime(t, conn, r.spec, r.events, late, false, sql)
				if !slices.Equal(r.got, want) {
					t.Errorf("seed %d %s %s: %d rows, PostgreSQL %d over the non-late rows\n%s\n%s", seed, kind, jt, len(r.got), len(want), sql, r.yaml)
					for _, d := range diff(r.got, want) {
						t.Error(d)
					}
				}
				if all := postgresTime(t, conn, r.spec, r.events, late, true, sql); !slices.Equal(all, want) {
					controls++
				}
				t.Logf("%s %s: %d rows = PostgreSQL's, %d late", kind, jt, len(want), len(wantLate))
				if t.Failed() {
					t.FailNow()
				}
			}
		}
	}
	if controls == 0 {
		t.Error("negative control: the SQL over all rows (late ones included) never differed from the SQL over the non-late rows")
	}
}

// postgresTime loads the events (late ones only with withLate) into
// tables l and r (interval, window: distinct rows by pk; temporal: r holds
// the right side's changes in arrival order) and returns sql's rows,
// sorted.
func postgresTime(t *testing.T, conn *pgx.Conn, s *timejoin.Spec, events []timegen.Event, late []bool, withLate bool, sql string) []string {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{"DROP TABLE IF EXISTS l, r",
		"CREATE TABLE l (pk text PRIMARY KEY, k text, t bigint NOT NULL, v text NOT NULL)",
		"CREATE TABLE r (a int PRIMARY KEY, op text NOT NULL, pk text, k text, t bigint NOT NULL, v text)"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("postgres: %s: %v", q, err)
		}
	}
	nullable := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	b := &pgx.Batch{}
	for i, e := range events {
		if late[i] && !withLate {
			continue
		}
		if e.Side == timejoin.SideLeft {
			b.Queue("INSERT INTO l VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING", e.PK, nullable(e.Key), e.Time, e.Val)
			continue
		}
		op := map[timejoin.Op]string{timejoin.Insert: "c", timejoin.Delete: "d", timejoin.Truncate: "t"}[e.Op]
		if s.Kind != timejoin.Temporal {
			// An append-only side: a redelivered event is the same row.
			b.Queue("INSERT INTO r SELECT $1, $2, $3, $4, $5, $6 WHERE NOT EXISTS (SELECT FROM r WHERE pk = $3)", i, op, e.PK, nullable(e.Key), e.Time, e.Val)
			continue
		}
		b.Queue("INSERT INTO r VALUES ($1, $2, $3, $4, $5, $6)", i, op, nullable(e.PK), nullable(e.Key), e.Time, nullable(e.Val))
	}
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		t.Fatalf("postgres: loading the events: %v", err)
	}
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		t.Fatalf("postgres: %v\n%s", err, sql)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var txt string
		if err := rows.Scan(&txt); err != nil {
			t.Fatal(err)
		}
		out = append(out, txt)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("postgres: %v\n%s", err, sql)
	}
	slices.Sort(out)
	return out
}

// timeSQL is the join of s in SQL over tables l (pk, k, t, v) and r, one
// text per row rendered as timegen.Text does (each column and a comma,
// NULL as null, window bounds as ws<µs>, we<µs>).
func timeSQL(s *timejoin.Spec) string {
	join := map[timejoin.JoinType]string{timejoin.Inner: "JOIN", timejoin.LeftOuter: "LEFT JOIN",
		timejoin.RightOuter: "RIGHT JOIN", timejoin.FullOuter: "FULL JOIN"}[s.Join]
	var cols []string
	for _, c := range s.Out {
		switch c.From {
		case timejoin.FromLeft:
			cols = append(cols, "coalesce(l.v, 'null')")
		case timejoin.FromRight:
			cols = append(cols, "coalesce(r.v, 'null')")
		case timejoin.FromWindowStart:
			cols = append(cols, "'ws' || coalesce(l.ws, r.ws)")
		case timejoin.FromWindowEnd:
			cols = append(cols, fmt.Sprintf("'we' || (coalesce(l.ws, r.ws) + %d)", s.Size))
		}
	}
	sel := "SELECT " + strings.Join(cols, " || ',' || ") + " || ','"
	switch s.Kind {
	case timejoin.Interval:
		// The seeds' form: l.k = r.k AND r.t BETWEEN l.t + lower AND l.t + upper.
		return fmt.Sprintf("%s FROM l %s r ON l.k = r.k AND r.t BETWEEN l.t + (%d) AND l.t + (%d)", sel, join, s.Lower, s.Upper)
	case timejoin.Window:
		// Every window of size and slide that holds a row's time.
		windows := func(tab string) string {
			return fmt.Sprintf(`(SELECT x.*, w.ws FROM %[1]s x, LATERAL (
  SELECT ((floor(x.t::numeric / %[2]d) - g) * %[2]d)::bigint AS ws FROM generate_series(0, %[3]d) g) w
  WHERE w.ws <= x.t AND w.ws + %[4]d > x.t)`, tab, s.Slide, s.Size/s.Slide+1, s.Size)
		}
		return fmt.Sprintf("%s FROM %s l %s %s r ON l.k = r.k AND l.ws = r.ws", sel, windows("l"), join, windows("r"))
	}
	// Temporal. The right side's versions: its changes, a truncate a
	// delete of every row seen before it; an upsert's TOAST value "?" is
	// the value of the version it follows (newest at or before its time
	// among those that came before it), or NULL after a delete. Each left
	// row joins, per right row, that row's version at l.t (newest time,
	// then newest arrival), when it is present and has the left row's key.
	return sel + ` FROM l ` + join + ` (
WITH RECURSIVE
v0 AS (
  SELECT pk, a, t, op, k, v FROM r WHERE op <> 't'
  UNION ALL
  SELECT DISTINCT p.pk, tr.a, tr.t, 'd', NULL, NULL FROM r tr JOIN r p ON p.a < tr.a AND p.op <> 't' WHERE tr.op = 't'
),
chain(pk, a0, pa, pt) AS (
  SELECT pk, a, a, t FROM v0 WHERE op = 'c' AND v = '?'
  UNION ALL
  SELECT ch.pk, ch.a0, p.a, p.t FROM chain ch
  JOIN v0 cur ON cur.pk = ch.pk AND cur.a = ch.pa AND cur.op = 'c' AND cur.v = '?'
  CROSS JOIN LATERAL (SELECT q.a, q.t FROM v0 q WHERE q.pk = ch.pk AND q.a < ch.pa AND q.t <= ch.pt ORDER BY q.t DESC, q.a DESC LIMIT 1) p
),
ver AS (
  SELECT x.pk, x.a, x.t, x.op = 'c' AND x.k IS NOT NULL AS present, x.k,
    CASE WHEN x.op = 'c' AND x.v = '?' THEN (
      SELECT CASE WHEN q.op = 'c' THEN q.v END FROM chain ch JOIN v0 q ON q.pk = ch.pk AND q.a = ch.pa AND NOT (q.op = 'c' AND q.v = '?')
      WHERE ch.pk = x.pk AND ch.a0 = x.a) ELSE x.v END AS v
  FROM v0 x
)
SELECT lx.pk AS lpk, cur.* FROM l lx CROSS JOIN LATERAL (
  SELECT DISTINCT ON (ver.pk) ver.* FROM ver WHERE ver.t <= lx.t ORDER BY ver.pk, ver.t DESC, ver.a DESC) cur
) r ON r.lpk = l.pk AND r.present AND r.k = l.k`
}

package clickhouse

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/row"
)

func insertConfig(t testing.TB, addr string) *config.Config {
	t.Helper()
	return insertConfigTypes(t, addr, "id: bigint", "name: text")
}

// insertConfigTypes is insertConfig with the left and right side's types
// besides t (a YAML map's entries).
func insertConfigTypes(t testing.TB, addr, left, right string) *config.Config {
	t.Helper()
	table := fmt.Sprintf("t_insert_%d_%d", time.Now().UnixNano()%1e9, tableSeq.Add(1))
	y := fmt.Sprintf(`
name: test
join: left
time_join:
  kind: interval
  left: {topic: a, key: k, time: t, types: {t: timestamp%s}}
  right: {topic: b, key: k, time: t, types: {t: timestamp%s}}
  upper: 1m
select: left.id, left.t, right.name
state: {dir: /tmp/unused}
clickhouse:
  addr: [%q]
  database: %s
  table: %s
  batch: {rows: 37, interval: 20ms}
  retry: {initial: 20ms, max: 500ms, max_elapsed: 2m}
`, sep(left), sep(right), addr, testDB, table)
	cfg, err := config.Parse([]byte(y), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func sep(types string) string {
	if types == "" {
		return ""
	}
	return ", " + types
}

func insertRow(seq uint64) row.Change {
	name := row.String(fmt.Sprintf("n%d", seq))
	if seq%5 == 0 {
		name = row.Null() // padded
	}
	return row.Change{Op: row.Insert, Version: seq, Values: []row.Value{row.Int(int64(seq)), row.Timestamp(int64(seq) * 1000), name}}
}

// TestInsertExactlyOnce: a driver that crashes after some of its rows
// reached the table (whole INSERTs or not) and re-emits them with the same
// sequence numbers inserts each row once; two streams share a table; the
// table is a plain MergeTree ordered by (_stream, _seq).
func TestInsertExactlyOnce(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	if rows, distinct := insertCrashes(t, addr, false); rows != distinct {
		t.Fatalf("%d rows, %d distinct", rows, distinct)
	}
}

// TestInsertNegativeControl: the same crashes with a sink that ignores
// what the table holds insert rows twice.
func TestInsertNegativeControl(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	if rows, distinct := insertCrashes(t, addr, true); rows == distinct {
		t.Fatalf("%d rows, %d distinct: the control did not duplicate", rows, distinct)
	}
}

func insertCrashes(t *testing.T, addr string, noDedup bool) (rows, distinct uint64) {
	cfg := insertConfig(t, addr)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	const n = 1000
	for _, stream := range []string{"s1", "s2"} {
		emitted := uint64(0) // what the "driver" has committed
		for round := 0; emitted < n; round++ {
			s, err := Open(ctx, cfg, Options{Stream: stream, noDedup: noDedup})
			if err != nil {
				t.Fatal(err)
			}
			// Re-emit from the last commit, write a random amount, flush
			// part of it (a commit), then crash (Close without Flush).
			upto := min(n, emitted+uint64(1+rng.IntN(300)))
			var batch []row.Change
			for seq := emitted + 1; seq <= upto; seq++ {
				batch = append(batch, insertRow(seq))
			}
			if err := s.Write(ctx, batch); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(3) > 0 || upto == n {
				if err := s.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				// The commit lost some of the flushed ones (never more than
				// this round added: a commit does not go back, and an
				// unsigned underflow here once ended a stream's loop early).
				emitted = upto - min(uint64(rng.IntN(50)), upto-emitted)
				if upto == n {
					emitted = n
				}
			}
			time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond) // let some INSERTs of the unflushed tail land
			s.Close()
		}
	}
	conn := rawConn(t, addr)
	q := fmt.Sprintf("SELECT count(), uniqExact(_stream, _seq) FROM %s.%s", testDB, cfg.ClickHouse.Table)
	if err := conn.QueryRow(ctx, q).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if noDedup {
		// The control's rows are only counted (its duplicates are the
		// point); the deduplicating run above must have every one.
		t.Logf("control: %d rows, %d distinct of %d", rows, distinct, 2*n)
		return rows, distinct
	}
	if distinct != 2*n {
		t.Fatalf("%d distinct rows, want %d", distinct, 2*n)
	}
	var engine, key string
	if err := conn.QueryRow(ctx, "SELECT engine, sorting_key FROM system.tables WHERE database = ? AND name = ?", testDB, cfg.ClickHouse.Table).Scan(&engine, &key); err != nil {
		t.Fatal(err)
	}
	if engine != "MergeTree" || strings.ReplaceAll(key, " ", "") != "_stream,_seq" {
		t.Errorf("engine %s, key %s", engine, key)
	}
	var nulls uint64
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT countIf(isNull(name)) FROM %s.%s", testDB, cfg.ClickHouse.Table)).Scan(&nulls); err != nil {
		t.Fatal(err)
	}
	if nulls != 2*n/5 {
		t.Errorf("%d padded rows, want %d", nulls, 2*n/5)
	}
	return rows, distinct
}

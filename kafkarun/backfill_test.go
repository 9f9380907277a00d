package kafkarun_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	chsink "github.com/cdcjoin/cdcjoin/sink/clickhouse"
)

// TestReplayThenRun: a table backfilled by replay (the engine, as
// `cdcjoin replay --clickhouse`) from the first part of the topics, then
// handed over (kafkarun.Handover) and continued by run, shows exactly the
// join of the final tables: the live view in upsert mode, sum(_sign) per
// row in changelog mode. run's versions exceed the replay's (an epoch above
// the replay's), and its state continues the replay's with the versions
// the replay emitted, so every cancel matches. The negative control
// continues without a handover (run keys the topics again from their
// start): rows only the replay formed stay, and the check must see them.
func TestReplayThenRun(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	for _, tc := range []struct {
		name     string
		mode     string
		join     string
		cutoff   float64
		handover bool
		seed     int64 // 0: random
	}{
		{"upsert-inner", config.ModeUpsert, "inner", 0.6, true, 0},
		{"upsert-left", config.ModeUpsert, "left", 0.4, true, 0},
		{"changelog-left", config.ModeChangelog, "left", 0.5, true, 0},
		{"negative-control-no-handover", config.ModeUpsert, "inner", 0.5, false, 817},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := tc.seed
			if seed == 0 {
				seed = time.Now().UnixNano() % 1000
			}
			t.Logf("seed %d", seed)
			h := smallHistory(t, seed, 3000)
			c := newCluster(t, 3)
			root := t.TempDir()
			cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), join: tc.join, keyedParts: 4, batch: 200,
				stateDir: filepath.Join(root, "run")})
			cfg, err := cfg.WithClickHouse(addr)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ClickHouse.Database = "cdcjoin_test"
			cfg.ClickHouse.Mode = tc.mode
			cfg.ClickHouse.Table = fmt.Sprintf("backfill_%s_%d", strings.ReplaceAll(tc.name, "-", "_"), time.Now().UnixNano()%1e9)
			ctx := context.Background()

			// Backfill: replay the first part of the history.
			rcfg := *cfg
			rcfg.State.Dir = filepath.Join(root, "replay")
			ch, err := chsink.Open(ctx, &rcfg, chsink.Options{})
			if err != nil {
				t.Fatal(err)
			}
			eng, err := engine.Open(&rcfg, engine.Options{Sink: ch})
			if err != nil {
				t.Fatal(err)
			}
			n := int(float64(len(h.Records)) * tc.cutoff)
			for _, r := range h.Records[:n] {
				rec := engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
				if err := eng.Process(ctx, &rec); err != nil {
					t.Fatal(err)
				}
			}
			if err := eng.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			eng.Close()
			ch.Close()

			// Continue: hand over, run over the topics into the same table.
			produce(t, c.ListenAddrs(), h.Records)
			if tc.handover {
				st, err := kafkarun.Handover(ctx, cfg, rcfg.State.Dir, nil)
				if err != nil {
					t.Fatalf("seed %d: handover: %v", seed, err)
				}
				t.Logf("handover: %+v", st)
				if _, err := kafkarun.Handover(ctx, cfg, rcfg.State.Dir, nil); err == nil || !strings.Contains(err.Error(), "already run") {
					t.Fatalf("a second handover of the same job: %v", err)
				}
			}
			sk, err := chsink.Open(ctx, cfg, chsink.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer sk.Close()
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- kafkarun.Run(rctx, cfg, kafkarun.Options{Sink: sk}) }()
			want := cdcgen.Join(h.Final.Users, h.Final.Domains, tc.join == "left")
			timeout := 90 * time.Second
			if !tc.handover {
				timeout = 20 * time.Second // the stale rows never go
			}
			diff := waitClickHouse(t, addr, cfg, want, timeout, done)
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("seed %d: run: %v", seed, err)
			}
			switch {
			case tc.handover && diff != "":
				t.Fatalf("seed %d: %s differs from the join of the final tables:\n%s", seed, cfg.ClickHouse.Table, diff)
			case !tc.handover && diff == "":
				t.Fatalf("seed %d: rows only the replay formed went unnoticed (the check is blind)", seed)
			}
		})
	}
}

// waitClickHouse polls the live view until it equals want or timeout
// passes, and returns the last difference ("" when equal).
func waitClickHouse(t *testing.T, addr string, cfg *config.Config, want []cdcgen.JoinedRow, timeout time.Duration, stopped <-chan error) string {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cols := []string{"user_id", "firstname", "lastname", "domain_id", "domain_name"}
	var sel []string
	for _, c := range cols {
		sel = append(sel, fmt.Sprintf(`ifNull(toString(%s), '\\N')`, c))
	}
	q := fmt.Sprintf("SELECT %s FROM %s.%s", strings.Join(sel, ", "), cfg.ClickHouse.Database, chsink.ViewName(cfg.ClickHouse))
	if cfg.ClickHouse.Mode == config.ModeChangelog {
		// A row is live when its signs sum to 1; any other sum than 0 or
		// 1 is a double count or a lost cancel, and shows as a difference.
		q = fmt.Sprintf("SELECT %s, toString(sum(_sign)) FROM %s.%s GROUP BY %s HAVING sum(_sign) != 0",
			strings.Join(sel, ", "), cfg.ClickHouse.Database, cfg.ClickHouse.Table, strings.Join(sel, ", "))
	}
	deadline := time.Now().Add(timeout)
	diff := "(not compared)"
	for time.Now().Before(deadline) {
		select {
		case err := <-stopped:
			t.Fatalf("run stopped early: %v", err)
		case <-time.After(500 * time.Millisecond):
		}
		rows, err := conn.Query(context.Background(), q)
		var ex *clickhouse.Exception
		if errors.As(err, &ex) && ex.Code == 60 {
			diff = "(the table does not exist yet)"
			continue // UNKNOWN_TABLE: the sink creates it with its first rows
		}
		if err != nil {
			t.Fatal(err)
		}
		var got []cdcgen.JoinedRow
		for rows.Next() {
			vals := make([]string, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			var sum string
			if cfg.ClickHouse.Mode == config.ModeChangelog {
				ptrs = append(ptrs, &sum)
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			if sum != "" && sum != "1" {
				vals[len(vals)-1] += " (sum(_sign) = " + sum + ")"
			}
			k := cdcgen.RowKey{Parent: vals[0], Child: vals[3]}
			if vals[3] == cdcgen.Null {
				k = cdcgen.RowKey{Parent: vals[0], Padded: true}
			}
			got = append(got, cdcgen.JoinedRow{Key: k, Values: vals})
		}
		rows.Close()
		if diff = cdcgen.Diff(want, got, 10); diff == "" {
			return ""
		}
	}
	return diff
}

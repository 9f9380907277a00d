package engine_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/bench"
	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/engine"
)

// TestMultiThroughput is a rough figure (not an assertion): replay records
// per second of a three-table chain. CDCJOIN_MULTI_BENCH=1 runs it.
func TestMultiThroughput(t *testing.T) {
	if os.Getenv("CDCJOIN_MULTI_BENCH") == "" {
		t.Skip("set CDCJOIN_MULTI_BENCH=1")
	}
	o := cdcgen.DefaultMultiOptions(1)
	o.Rows, o.Ops, o.Redeliver, o.SnapshotRerun, o.Truncates = 20000, 100000, 0, false, false
	h, err := cdcgen.GenerateMulti(o)
	if err != nil {
		t.Fatal(err)
	}
	two := `SELECT u.id AS user_id, u.firstname, u.lastname, d.id AS domain_id, d.domain_name
		FROM users u JOIN domains d ON d.user_id = u.id`
	for _, q := range []string{"two-table (parent/child core)", "two-table (plan core)", "chain-inner-left"} {
		var cfg *config.Config
		switch q {
		case "two-table (parent/child core)":
			cfg = sqlConfig(t, two)
		case "two-table (plan core)":
			cfg = sqlConfig(t, two).AsPlan()
		default:
			cfg = multiConfig(t, multiQueries[q])
		}
		cfg.State.Dir = t.TempDir()
		cfg.State.BatchEvents = 1000
		e, err := engine.Open(cfg, engine.Options{})
		if err != nil {
			t.Fatal(err)
		}
		topics := map[string]bool{}
		for _, n := range cfg.TableNames() {
			topics[cfg.Tables[n].Topic] = true
		}
		start, cpu0 := time.Now(), cpuTime()
		n := 0
		for _, r := range h.Records {
			if !topics[r.Topic] {
				continue
			}
			n++
			rec := engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
			if err := e.Process(context.Background(), &rec); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		cpu := cpuTime() - cpu0
		t.Logf("%s: %d records in %v: %.0f records/s; %.2f CPU-s, %.0f records per CPU-second", q, n, d, float64(n)/d.Seconds(), cpu.Seconds(), float64(n)/cpu.Seconds())
		e.Close()
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPlanChain replays the chain of `cdcjoin bench --shape chain`
// (bench.ChainQuery over bench.ChainHistory) at 1e5 source rows through
// Engine.Run, with caches (block cache 6 MiB, row cache 6 MiB, memtable
// 1 MiB) far smaller than the state, as at 1e6 rows with the defaults:
// the CDC records only are timed, on a state the snapshot built before
// the timer starts (row by row). Reports records/s and process CPU µs per
// CDC record (steadier than wall time on a shared machine), and the row
// cache's hits, misses and entries installed by read-ahead per record.
func BenchmarkPlanChain(b *testing.B) {
	h, err := bench.ChainHistory(bench.Options{Workload: bench.Workload{Seed: 1, Rows: 100_000}})
	if err != nil {
		b.Fatal(err)
	}
	var snap, cdc []engine.Record
	for i, r := range h.Records {
		rec := engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
		if i < h.Stats.Snapshot {
			snap = append(snap, rec)
		} else {
			cdc = append(cdc, rec)
		}
	}
	ctx := context.Background()
	replay := func(e *engine.Engine, recs []engine.Record) error {
		err := e.Run(ctx, func(yield func(*engine.Record) error) error {
			for i := range recs {
				if err := yield(&recs[i]); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil {
			err = e.Commit(ctx)
		}
		return err
	}
	var cpu float64
	var hits, misses, prefetched uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cfg, err := bench.ChainJob(bench.Options{CacheMB: 6, RowCacheMB: 6, MemTableMB: 1, BatchEvents: 1000}, bench.ChainQuery, b.TempDir(), true)
		if err != nil {
			b.Fatal(err)
		}
		e, err := engine.Open(cfg, engine.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := replay(e, snap); err != nil {
			b.Fatal(err)
		}
		st0, _ := e.Store().Stats()
		b.StartTimer()
		cpu0 := processCPU()
		err = replay(e, cdc)
		cpu += processCPU() - cpu0
		b.StopTimer()
		st1, _ := e.Store().Stats()
		misses += st1.RowCacheMisses - st0.RowCacheMisses
		hits += st1.RowCacheHits - st0.RowCacheHits
		prefetched += st1.RowCachePrefetched - st0.RowCachePrefetched
		if err != nil {
			b.Fatal(err)
		}
		e.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(len(cdc))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(cpu*1e6/float64(len(cdc))/float64(b.N), "cpu-µs/record")
	n := float64(len(cdc)) * float64(b.N)
	b.ReportMetric(float64(misses)/n, "row-cache-misses/record")
	b.ReportMetric(float64(hits)/n, "row-cache-hits/record")
	b.ReportMetric(float64(prefetched)/n, "prefetched/record")
}

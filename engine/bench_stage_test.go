package engine_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// BenchmarkEngineReplay measures the whole single-process path (decode,
// key, join, pebble commit every 1000 records, changes encoded as JSON) on
// pre-generated cdcgen records: a snapshot of 20,000 rows, then CDC. The
// records are generated before the timer starts.
func BenchmarkEngineReplay(b *testing.B) {
	for _, schema := range []cdcgen.SchemaMode{cdcgen.SchemaOff, cdcgen.SchemaOn} {
		b.Run(fmt.Sprintf("schema=%v", map[cdcgen.SchemaMode]string{cdcgen.SchemaOff: "off", cdcgen.SchemaOn: "on"}[schema]), func(b *testing.B) {
			o := cdcgen.Options{Seed: 1, Users: 7000, Domains: 13000, Ops: b.N, Partitions: 4, SchemaMode: schema,
				Mix: cdcgen.Mix{InsertUser: 10, InsertDomain: 25, UpdateUserSelected: 10, UpdateUserUnselected: 10,
					UpdateDomain: 15, MoveDomain: 10, DeleteUser: 2, DeleteDomain: 8, PKChangeUser: 1, PKChangeDomain: 1},
				Toast: 0.1, Tombstones: true, UserPads: 10, DomainPads: 5, Interleave: cdcgen.InterleaveProduction}
			h, err := cdcgen.Generate(o)
			if err != nil {
				b.Fatal(err)
			}
			cfg := benchConfig(b)
			names := cfg.OutputNames()
			var buf []byte
			var changes int
			eng, err := engine.Open(cfg, engine.Options{Sink: sink.Func(func(c *row.Change) error {
				buf = c.AppendJSON(buf[:0], names)
				changes++
				return nil
			})})
			if err != nil {
				b.Fatal(err)
			}
			defer eng.Close()
			ctx := context.Background()
			var bytes int64
			b.ResetTimer()
			for i := range h.Records {
				r := &h.Records[i]
				bytes += int64(len(r.Key) + len(r.Value))
				if err := eng.Process(ctx, &engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}); err != nil {
					b.Fatal(err)
				}
			}
			if err := eng.Commit(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			s := b.Elapsed().Seconds()
			b.ReportMetric(float64(len(h.Records))/s, "records/s")
			b.ReportMetric(float64(bytes)/s/1e6, "MB/s")
			b.ReportMetric(float64(changes)/float64(len(h.Records)), "changes/record")
		})
	}
}

// BenchmarkEngineHistory replays the history `cdcjoin bench
// --write-history` writes (cdcgen.DefaultOptions: the oracle's mix, every
// hard case, truncates, a small state of a few hundred rows; schemas off)
// of 100,000 operations per iteration through Engine.Run, committing every
// 1000 records, changes encoded as JSON. The records are generated before
// the timer starts.
func BenchmarkEngineHistory(b *testing.B) {
	o := cdcgen.DefaultOptions(1)
	o.Ops, o.SchemaMode = 100_000, cdcgen.SchemaOff
	benchHistory(b, o, "")
}

// BenchmarkEngineHistoryFits replays an eighth of the peers' history
// (`--write-history --history-ops 4.5e5 --history-users 6e4
// --history-domains 1.6e5 --history-peers`: 56,000 operations after a
// snapshot of 7,500 users and 20,000 domains, no truncates or TOAST
// placeholders) with an 8 MiB row cache, which the state fills to ~80%
// (the row cache's live bytes at the end): a state that fits in the row
// cache, but in more than half of it, like the full history's state in
// the default 64 MiB (87%).
func BenchmarkEngineHistoryFits(b *testing.B) {
	o := cdcgen.DefaultOptions(1)
	o.Ops, o.SchemaMode, o.Users, o.Domains = 56_000, cdcgen.SchemaOff, 7_500, 20_000
	o.Mix.TruncateUsers, o.Mix.TruncateDomains, o.Toast = 0, 0, 0
	benchHistory(b, o, "row_cache_mb: 8")
}

// benchHistory replays o's history through Engine.Run once per iteration,
// on a fresh state of benchConfig with the extra state settings.
func benchHistory(b *testing.B, o cdcgen.Options, state string) {
	h, err := cdcgen.Generate(o)
	if err != nil {
		b.Fatal(err)
	}
	var bytes int64
	for i := range h.Records {
		bytes += int64(len(h.Records[i].Key) + len(h.Records[i].Value))
	}
	ctx := context.Background()
	var cpu float64 // process CPU seconds (user+sys) of the timed parts: steadier than wall time on a shared machine
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cfg := benchConfigState(b, state)
		names := cfg.OutputNames()
		var buf []byte
		eng, err := engine.Open(cfg, engine.Options{Sink: sink.Func(func(c *row.Change) error {
			buf = c.AppendJSON(buf[:0], names)
			return nil
		})})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		cpu0 := processCPU()
		err = eng.Run(ctx, func(yield func(*engine.Record) error) error {
			for i := range h.Records {
				r := &h.Records[i]
				if err := yield(&engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil {
			err = eng.Commit(ctx)
		}
		cpu += processCPU() - cpu0
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		eng.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(len(h.Records))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(cpu*1e6/float64(len(h.Records))/float64(b.N), "cpu-µs/record")
	b.ReportMetric(float64(bytes)/1e6, "MB/op")
}

// benchConfig is the benchmarks' join (the oracle's select list) on a
// fresh state directory, without fsync.
func benchConfig(b *testing.B) *config.Config { return benchConfigState(b, "") }

// benchConfigState is benchConfig with extra state settings (YAML flow
// mapping entries, such as "row_cache_mb: 8"; "" for none).
func benchConfigState(b *testing.B, state string) *config.Config {
	if state != "" {
		state = ", " + state
	}
	y := fmt.Sprintf(`name: b
parent: {topic: %s, key: id}
child:  {topic: %s, key: id, parent_key: user_id}
select: parent.id AS user_id, parent.firstname, parent.lastname, child.id AS domain_id, child.domain_name
state: {dir: %q, sync: false%s}
`, cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic, b.TempDir(), state)
	cfg, err := config.Parse([]byte(y), "b.yaml")
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

// processCPU returns the process's user+system CPU seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

package engine_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/sink"
)

// TestWarmingPipeline: Run's decoding goroutine reads ahead (Warmer, forced
// on; a state several times the 1 MiB row cache, 1 MiB memtables, so that
// the cache evicts and flushes come often) while the applying one installs
// what it read and joins; the result still equals the oracle (and -race
// sees the two goroutines on one store).
func TestWarmingPipeline(t *testing.T) {
	for _, seed := range seeds(t)[:2] {
		o := cdcgen.DefaultOptions(seed)
		o.Users, o.Domains, o.Ops = 4000, 8000, 40000
		h, err := cdcgen.Generate(o)
		if err != nil {
			t.Fatal(err)
		}
		cfg := jobConfig(t, "left")
		cfg.State.RowCacheMB, cfg.State.MemTableMB = 1, 1
		model := newSinkModel()
		e, err := engine.Open(cfg, engine.Options{Sink: sink.Func(model.emit), FS: vfs.NewMem(), WarmAlways: true})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		err = e.Run(ctx, func(yield func(*engine.Record) error) error {
			for _, r := range h.Records {
				rec := engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
				if err := yield(&rec); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil {
			err = e.Commit(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		want := oracle(t, h.Final, true)
		check(t, seed, "final sink model (warming pipeline)", want, model.rmt.Live())
		check(t, seed, "final state (warming pipeline)", want, materialized(t, e))
		e.Close()
	}
}

// TestSyncBehindCommits: with state.sync, a commit is durable (survives an
// OS crash: unsynced writes lost) once the next commit returned, and the
// last one once Close returned.
func TestSyncBehindCommits(t *testing.T) {
	cfg := jobConfig(t, "inner")
	cfg.State.Sync, cfg.State.BulkLoadMB = true, -1
	fs := vfs.NewCrashableMem()
	ctx := context.Background()
	e, err := engine.Open(cfg, engine.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	process := func(e *engine.Engine, from, to int) {
		for i := from; i < to; i++ {
			rec := engine.Record{Topic: cdcgen.DefaultParentTopic, Partition: 0, Offset: int64(i),
				Value: []byte(`{"op":"c","after":{"id":` + strconv.Itoa(i) + `,"firstname":"a","lastname":"b"}}`)}
			if err := e.Process(ctx, &rec); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	position := func(fs vfs.FS) int64 {
		e, err := engine.Open(cfg, engine.Options{FS: fs, Resume: true})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		next, _, err := e.Store().Position(cdcgen.DefaultParentTopic, 0)
		if err != nil {
			t.Fatal(err)
		}
		return next
	}
	process(e, 0, 10)
	process(e, 10, 20)
	if got := position(fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})); got < 10 {
		t.Fatalf("after two commits an OS crash kept position %d, want ≥ 10", got)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if got := position(fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})); got != 20 {
		t.Fatalf("after Close an OS crash kept position %d, want 20", got)
	}
}

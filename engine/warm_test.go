package engine_test

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/sink"
)

// TestWarmingPipeline: with the row cache off the state never fits in it,
// so Run's decoding goroutine reads ahead (Warmer) while the applying one
// joins; the result still equals the oracle (and -race sees the two
// goroutines on one store).
func TestWarmingPipeline(t *testing.T) {
	for _, seed := range seeds(t)[:2] {
		h, err := cdcgen.Generate(cdcgen.DefaultOptions(seed))
		if err != nil {
			t.Fatal(err)
		}
		cfg := jobConfig(t, "left")
		cfg.State.RowCacheMB = -1
		model := newSinkModel()
		e, err := engine.Open(cfg, engine.Options{Sink: sink.Func(model.emit), FS: vfs.NewMem()})
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

package kafkarun

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/bulkload"
	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/keyedlog"
)

// Bulk rebuild of a keyed partition.
//
// A worker that starts without local state on a partition whose group has
// committed an offset (the partition moved, or the disk was lost) must
// apply the keyed topic up to that offset without emitting. With
// state.bulk_load_mb not -1 it feeds those records to a bulkload.Loader
// (Rebuild mode: folded per row, sorted, written as tables) instead of the
// Join, and ingests the result with the position and the version clock in
// one atomic step when it reaches the committed offset: at the first
// record at or after it, at the record just before it, or when no input
// arrives for rebuildIdle (the records just before it were compacted away
// or are transaction markers). Versions are the keyed offsets' (the clock,
// raised by the epoch markers read on the way), as the Join would give
// them. Nothing is committed before the ingest: a worker stopped or
// crashed mid-rebuild leaves an empty state, and the next owner rebuilds
// again.
//
// A router stepped by input (changelog mode) is rebuilt in bulk only up to
// the group's committed offset (rebuildTo), row by row from there.
//
// Hot keys: the bulk path rebuilds the plain keyed records only. At the
// first of the skew.Router's records (a forward to a replica, a layout
// change, an ack) it ingests what it has, with the position of that
// record, and the worker goes on row by row through the router, which
// rebuilds the skew state (layouts, replicas, tasks) from there as it was
// made. Before the first such record the partition had no salted key and
// no replica, and (Quiet: not chunked) no work in progress, so the bulk
// result is the router's state too, except child counts: the rebuild marks
// them inexact (skew.Router.MarkInexact), and the router counts a key's
// children on first use.

// rebuildIdle ends a bulk rebuild that has received no input for this
// long.
const rebuildIdle = 500 * time.Millisecond

// rebuild is a worker's bulk rebuild in progress.
type rebuild struct {
	*bulkload.KeyedRebuild
	dir string
}

// startRebuild puts a new worker into bulk rebuild mode when its state is
// empty and there is committed input to rebuild.
func (w *worker) startRebuild(dir string, hasState bool) error {
	if hasState || w.rebuildTo() <= 0 || w.j.cfg.State.BulkLoadMB <= 0 || w.op.BulkRebuild == nil {
		return nil
	}
	spill := filepath.Join(dir, "bulk-load")
	l, err := bulkload.New(w.j.spec, bulkload.Options{Mode: bulkload.Rebuild, Dir: filepath.Join(spill, "runs"),
		MemoryBytes: w.j.cfg.State.BulkLoadMB << 20})
	if err != nil {
		return err
	}
	t := w.store.Begin()
	err = w.op.BulkRebuild(t)
	if err == nil {
		err = t.Commit()
	} else {
		t.Abort()
	}
	if err != nil {
		l.Close()
		return err
	}
	w.rb = &rebuild{KeyedRebuild: bulkload.NewKeyedRebuild(l, w.j.spec, w.clock), dir: spill}
	return nil
}

// idle returns a channel that fires when a bulk rebuild has waited for
// input for rebuildIdle, or a row-by-row catch-up for catchUpIdle (nil
// when neither is in progress).
func (w *worker) idle() <-chan time.Time {
	switch {
	case w.rb != nil:
		return time.After(rebuildIdle)
	case !w.caught.Load():
		return time.After(catchUpIdle)
	}
	return nil
}

// rebuildRecords feeds the records below the committed offset to the bulk
// rebuild and ends it when it reaches that offset or a record of the skew
// router; it returns the records left for the router.
func (w *worker) rebuildRecords(recs []*kgo.Record) ([]*kgo.Record, error) {
	rb := w.rb
	for i, r := range recs {
		if r.Offset >= w.rebuildTo() {
			return recs[i:], w.finishRebuild()
		}
		if !r.Attrs.IsControl() && keyedlog.IsRouter(r.Key) {
			w.j.log.Info("bulk rebuild: hot-key records from here on; rebuilding the rest row by row", "partition", w.p, "offset", r.Offset)
			return recs[i:], w.finishRebuild()
		}
		if r.Attrs.IsControl() {
			rb.Last = r.Offset // a transaction marker: only the position moves past it
			continue
		}
		if err := rb.Add(r.Offset, r.Key, r.Value); err != nil {
			return nil, fmt.Errorf("%s/%d: %w", r.Topic, r.Partition, err)
		}
	}
	if rb.Last+1 >= w.rebuildTo() {
		return nil, w.finishRebuild()
	}
	return nil, nil
}

// rebuildTo is where a bulk rebuild ends: the emit-from position, or, for
// a router stepped by input, the group's committed offset (forwardFrom, a
// position without work in progress): above it the work a record leaves
// in progress must be what the run that wrote the sink's batches left,
// which only the router rebuilds, row by row.
func (w *worker) rebuildTo() int64 {
	if w.byInput {
		return min(w.forwardFrom, w.out.EmitFrom())
	}
	return w.out.EmitFrom()
}

// finishRebuild writes the rebuilt state with its position and clock in
// one atomic step and leaves rebuild mode.
func (w *worker) finishRebuild() error {
	rb := w.rb
	w.rb = nil
	defer rb.L.Close()
	if rb.Last < 0 {
		return nil // nothing to rebuild after all
	}
	if err := driver.FinishRebuild(context.Background(), w.store, rb.KeyedRebuild, filepath.Join(rb.dir, "tables"), w.j.topic, w.p); err != nil {
		return err
	}
	w.clock = rb.Clock
	w.pos.Store(rb.Last + 1)
	w.j.m.StateRebuilt.Add(float64(rb.Records))
	w.j.log.Info("partition rebuilt in bulk", "partition", w.p, "records", rb.Records, "next", rb.Last+1)
	return nil
}

// stopRebuild drops a bulk rebuild in progress (the worker stops).
func (w *worker) stopRebuild() {
	if w.rb != nil {
		w.rb.L.Close()
		w.rb = nil
	}
}

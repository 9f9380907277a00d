package engine

import (
	"context"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/bulkload"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/internal/cerr"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/row"
)

// Bulk load of the initial snapshot.
//
// A new state (no committed input positions) starts in bulk mode when
// state.bulk_load_mb is not -1: snapshot reads (op=r) go to a
// bulkload.Loader instead of the Keyer and the Join, one position (and so
// one version) per record. Nothing is committed meanwhile, except the
// version clock, once, at the start, so that a load run again after a crash
// gives the same versions. The load ends (handover) at the first event that
// is not a snapshot read (streaming has begun: the change may concern a
// row still in an unsorted run, so everything loaded is applied first), at
// a record whose source.snapshot is "last", or at Commit: the Loader's
// joined rows go to the sink, the sink is flushed, and the state, the
// positions and the clock are ingested in one atomic step. Then the engine
// applies records one by one as usual. A crash before the ingest leaves
// the state empty but for the clock (synced to disk even without
// state.sync): with Resume, the input is read from the start and loaded
// again, emitting the same rows with the same versions.

// bulkDir is the spill directory of a bulk load, inside the state
// directory.
const bulkDir = "bulk-load"

// startBulk puts a new state into bulk mode (see above).
func (e *Engine) startBulk() error {
	fs := e.opts.FS
	if fs == nil {
		fs = vfs.Default
	}
	dir := filepath.Join(e.cfg.State.Dir, bulkDir)
	l, err := bulkload.New(e.spec, bulkload.Options{Mode: bulkload.Snapshot, FS: fs, Dir: filepath.Join(dir, "runs"),
		MemoryBytes: e.cfg.State.BulkLoadMB << 20})
	if err != nil {
		return err
	}
	if err := e.commitBulkStart(); err != nil {
		l.Close()
		return err
	}
	e.bulk, e.bulkDir = l, dir
	return nil
}

// Loading reports whether the engine is bulk loading a snapshot: records
// are being sorted, and nothing reaches the sink or is committed until the
// load ends (at the first streaming event, a snapshot=last record, or
// Commit).
func (e *Engine) Loading() bool { return e.bulk != nil || e.pbulk != nil }

// bulkApply feeds a decoded event to the bulk load, or ends the load first
// when the event is not a snapshot read. It reports whether it consumed
// the event.
func (e *Engine) bulkApply(ctx context.Context, d *Decoded) (bool, error) {
	ev := &d.ev
	if ev.Op != debezium.OpRead {
		return false, e.endBulk(ctx)
	}
	var err error
	if e.bulkKey, err = e.spec.SnapshotKey(e.bulkKey[:0], d.side, ev); err != nil {
		r := &d.Record
		bad, _ := driver.BadKey(err, &driver.Source{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset})
		return true, bad
	}
	v := e.clock.At(e.inputs)
	if d.side == row.Parent {
		err = e.bulk.Parent(e.bulkKey, v, d.Record.Partition, ev.After.Values)
	} else {
		err = e.bulk.Child(e.bulkKey, v, d.Record.Partition, ev.After.Values)
	}
	if err != nil {
		return true, err
	}
	e.inputs++
	if ev.Source.Snapshot == "last" {
		e.endAfter = true
	}
	return true, nil
}

// endBulk ends the bulk load: the loaded snapshot is emitted, flushed to
// the sink and committed (see above). After an error the Engine must be
// closed.
func (e *Engine) endBulk(ctx context.Context) error {
	if e.pbulk != nil {
		return e.endPlanBulk(ctx)
	}
	l := e.bulk
	if l == nil {
		return nil
	}
	e.bulk, e.endAfter = nil, false
	defer l.Close()
	res, err := e.finishLoad(ctx, func(load *joinstate.Load) (bulkload.Result, error) {
		return l.Finish(load, e.output(ctx).Emit)
	})
	if err != nil {
		return err
	}
	e.join.Stats.Inputs += res.Records
	e.join.Stats.Upserts += res.Upserts
	return nil
}

// finishLoad ends a bulk load (either kind): fill writes the loaded state
// to a joinstate.Load (emitting what the load emits, if anything), which
// driver.Commit commits as the next batch, with the positions, the
// metadata and the bulk flag cleared. After an error the Engine must be
// closed.
func (e *Engine) finishLoad(ctx context.Context, fill func(*joinstate.Load) (bulkload.Result, error)) (bulkload.Result, error) {
	e.txn.Abort()
	e.txn = nil
	load, err := e.store.BeginLoad(filepath.Join(e.bulkDir, "tables"))
	if err != nil {
		return bulkload.Result{}, err
	}
	res, err := fill(load)
	if err == nil {
		err = driver.Commit(ctx, load, driver.Batch{Out: e.out, To: e.batches + 1, Write: func(c driver.Committer) error {
			if err := e.writeBatch(c); err != nil {
				return err
			}
			return driver.MetaBulkLoad.Put(c, false)
		}})
	}
	if err != nil {
		load.Abort()
		return res, cerr.Wrap(err, "bulk load")
	}
	e.committed()
	e.stats.Bulk = res
	e.txn = e.store.Begin()
	return res, nil
}

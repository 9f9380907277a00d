package engine

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/cdcjoin/cdcjoin/bulkload"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/memstate"
	"github.com/cdcjoin/cdcjoin/stage"
)

// Bulk load of a plan's snapshot.
//
// A new state of a multi-table plan starts in bulk mode when
// state.bulk_load_mb is not -1, as the parent/child join does (bulk.go),
// with one difference in how: the snapshot's records go through the very
// same stage.Pipeline as streaming records, in input order, but on a
// memstate.State (an ordered map in memory) instead of the pebble transaction.
// So the load emits exactly the changes the row-by-row path emits, in the
// same order and with the same versions (every stage input takes the next
// position, as always), and reaches exactly the same state: when the load
// ends, the memstate.State is written in key order as sorted tables and ingested
// with the positions and metadata in one atomic step (joinstate.Load), the
// changes having gone to the sink in the same batch (driver.Commit). What
// it saves is pebble: no memtable inserts, no block reads, seeks,
// compactions or row-cache upkeep while loading.
//
// The load ends like the parent/child join's: before the first event that
// is not a snapshot read (applied row by row, on the loaded state), after
// a record whose source.snapshot is "last", at Commit or Checkpoint — and
// after the record that takes the memstate.State past state.bulk_load_mb (an
// estimate of its memory), the rest going row by row on the ingested state.
// Nothing but the version clock is committed before the end (once, at the
// start, synced): a crash while loading leaves a state with no positions
// and the same clock, so the load is run again from the first record and
// emits the same changes with the same versions (the upsert sink absorbs
// them; a Positioned sink sees the load as one batch, re-created).
//
// The state after the load differs from the row-by-row path's only in
// metadata: one batch instead of one per state.batch_events, and the bulk
// flag (driver.MetaBulkLoad) written false.

// startPlanBulk puts a new plan state into bulk mode.
func (e *Engine) startPlanBulk() error {
	if err := e.commitBulkStart(); err != nil {
		return err
	}
	e.pbulk = memstate.New()
	e.bulkDir = filepath.Join(e.cfg.State.Dir, bulkDir)
	return nil
}

// commitBulkStart commits (and syncs) the clock and the bulk flag of a
// new state, before anything is loaded, so that a load run again after a
// crash gives the same versions.
func (e *Engine) commitBulkStart() error {
	t := e.store.Begin()
	err := errors.Join(driver.MetaClock.Put(t, e.clock), driver.MetaInputs.Put(t, 0),
		driver.MetaFingerprint.Put(t, e.fingerprint()), driver.MetaBulkLoad.Put(t, true))
	if err != nil {
		t.Abort()
		return err
	}
	if err := t.Commit(); err != nil {
		return err
	}
	return e.store.SyncWAL()
}

// planState is the State the plan's pipeline applies to: the memstate.State
// while bulk loading, else the engine's transaction.
func (e *Engine) planState() stage.State {
	if e.pbulk != nil {
		return e.pbulk
	}
	return e.kv
}

// planBulkBefore ends a plan's bulk load before d when d is not made of
// snapshot reads.
func (e *Engine) planBulkBefore(ctx context.Context, d *Decoded) error {
	if e.pbulk == nil {
		return nil
	}
	for i := range d.items {
		if d.evs[i].Op != debezium.OpRead {
			return e.endPlanBulk(ctx)
		}
	}
	return nil
}

// planBulkAfter marks the load to end after the record just applied when
// it ended the snapshot or filled the memory budget.
func (e *Engine) planBulkAfter(d *Decoded) {
	if e.pbulk == nil {
		return
	}
	for i := range d.items {
		if d.evs[i].Source.Snapshot == "last" {
			e.endAfter = true
		}
	}
	limit := e.cfg.State.BulkLoadMB << 20
	if e.pbulkLimit > 0 {
		limit = e.pbulkLimit
	}
	if e.pbulk.Bytes() >= limit {
		e.endAfter = true
	}
}

// endPlanBulk ends a plan's bulk load: the memstate.State is written to a
// joinstate.Load and committed with the batch (the load's changes, already
// emitted, are delivered first: driver.Commit). Records counts the
// records of the load; Children its rows, Parents its values. After an
// error the Engine must be closed.
func (e *Engine) endPlanBulk(ctx context.Context) error {
	m := e.pbulk
	if m == nil {
		return nil
	}
	e.pbulk, e.endAfter = nil, false
	_, err := e.finishLoad(ctx, func(load *joinstate.Load) (bulkload.Result, error) {
		res := bulkload.Result{Records: uint64(e.pending)}
		w := memstate.Writer(load)
		if e.pbulkDrop != nil {
			w = memstate.Drop(load, e.pbulkDrop, &e.pbulkDropped)
		}
		var err error
		res.Children, res.Parents, err = m.WriteTo(w)
		return res, err
	})
	return err
}

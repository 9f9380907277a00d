package kafkarun

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/bulkload"
	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/memstate"
	"github.com/cdcjoin/cdcjoin/stage"
	"github.com/cdcjoin/cdcjoin/version"
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
// arrives for rebuildIdle and the log has no records left to read below
// it (worker.moreBelow: the topic was recreated shorter, or its records
// there deleted; a fetch slow under load is waited for). Versions are the keyed offsets' (the clock,
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

// Plan stages (Operator.StateStep): the same, with what the stage's
// operator keeps instead of the regular join's state. The records below
// the group's committed offset (forwardFrom: the operator forwards what it
// applies above it, which the bulk path does not) go through the very same
// stage.Operator, Quiet (nothing sent, nothing emitted) and at the same
// versions, but on a memstate.State instead of the pebble transaction,
// which is written out in key order and ingested with the position and the
// clock in one atomic step as above: the state is the one the records
// would have left row by row. The bulk path ends (the rest goes row by row
// on the ingested state) also before a clear of a side (a truncate: a scan
// across groups) and after the record that takes the memstate.State past
// state.bulk_load_mb (an estimate of its memory).

// rebuildIdle ends a bulk rebuild that has received no input for this
// long, rebuildStartIdle one that has received none yet, when the brokers
// say no record is left to read below its end (worker.moreBelow; else it
// waits on). Only a fallback: the epoch markers every Run writes at its
// start lie at or after the committed offset, so a rebuild normally ends
// at the first record at or after it. An early end costs only speed (the
// rest goes row by row), but a short wait ended rebuilds under load before
// their first fetch came back (500 ms: most of a loaded machine's rebuilds
// went row by row).
const (
	rebuildIdle      = 2 * time.Second
	rebuildStartIdle = 10 * time.Second
)

// rebuild is a worker's bulk rebuild in progress: of the regular join's
// state (kr) or of a plan stage's (sr).
type rebuild struct {
	kr  *bulkload.KeyedRebuild
	sr  *stateRebuild
	dir string
}

// stateRebuild is a plan stage's bulk rebuild in progress: its log's
// records stepped (Operator.StateStep) on mem.
type stateRebuild struct {
	mem   *memstate.State
	step  func(stage.State, *keyedlog.Msg) error
	clock version.Clock
	// last is the offset of the last record applied (-1 before the
	// first); records counts them.
	last    int64
	records int
	limit   int  // bytes of mem that end the bulk path
	full    bool // mem reached limit: the bulk path ends
	m       keyedlog.Msg
	skip    func(offset int64) bool // tests: testHooks.bulkSkip
}

// last is the offset of the last record the rebuild applied (-1: none).
func (rb *rebuild) last() int64 {
	if rb.sr != nil {
		return rb.sr.last
	}
	return rb.kr.Last
}

func (rb *rebuild) close() {
	if rb.kr != nil {
		rb.kr.L.Close()
	}
	rb.sr = nil
}

// startRebuild puts a new worker into bulk rebuild mode when its state is
// empty and there is committed input to rebuild.
func (w *worker) startRebuild(dir string, hasState bool) error {
	if hasState || w.rebuildTo() <= 0 || w.j.cfg.State.BulkLoadMB <= 0 || w.op.BulkRebuild == nil && w.op.StateStep == nil {
		return nil
	}
	spill := filepath.Join(dir, "bulk-load")
	if w.op.StateStep != nil {
		limit := w.j.cfg.State.BulkLoadMB << 20
		if w.j.hooks.bulkLimit > 0 {
			limit = w.j.hooks.bulkLimit
		}
		sr := &stateRebuild{mem: memstate.New(), step: w.op.StateStep, clock: w.clock, last: -1, limit: limit}
		if skip := w.j.hooks.bulkSkip; skip != nil {
			n, p := w.j.def.n, w.p
			sr.skip = func(offset int64) bool { return skip(n, p, offset) }
		}
		w.rb = &rebuild{sr: sr, dir: spill}
		return nil
	}
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
	w.rb = &rebuild{kr: bulkload.NewKeyedRebuild(l, w.j.spec, w.clock), dir: spill}
	return nil
}

// idle returns a channel that fires when a bulk rebuild has waited for
// input for rebuildIdle (rebuildStartIdle before its first record), or a
// row-by-row catch-up for catchUpIdle (nil
// when neither is in progress).
func (w *worker) idle() <-chan time.Time {
	switch {
	case w.rb != nil && w.rb.last() < 0:
		return time.After(rebuildStartIdle)
	case w.rb != nil:
		return time.After(rebuildIdle)
	case !w.caught.Load():
		return time.After(catchUpIdle)
	}
	return nil
}

// rebuildRecords feeds the records below the committed offset to the bulk
// rebuild and ends it when it reaches that offset or a record the bulk
// path does not take (the skew router's; a plan stage's clear); it returns
// the records left for the row-by-row path.
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
		if rb.sr != nil {
			if r.Offset <= rb.sr.last {
				continue // redelivered
			}
			took, err := rb.sr.add(r)
			if err != nil {
				return nil, fmt.Errorf("%s/%d: %w", r.Topic, r.Partition, err)
			}
			if !took {
				w.j.log.Info("bulk rebuild: a record the bulk path does not take (a clear of a side: a truncate); rebuilding the rest row by row", "partition", w.p, "offset", r.Offset)
				return recs[i:], w.finishRebuild()
			}
			if rb.sr.full {
				w.j.log.Info("bulk rebuild: state.bulk_load_mb reached; rebuilding the rest row by row", "partition", w.p, "offset", r.Offset, "bytes", rb.sr.mem.Bytes())
				return recs[i+1:], w.finishRebuild()
			}
			continue
		}
		if r.Attrs.IsControl() {
			rb.kr.Last = r.Offset // a transaction marker: only the position moves past it
			continue
		}
		if err := rb.kr.Add(r.Offset, r.Key, r.Value); err != nil {
			return nil, fmt.Errorf("%s/%d: %w", r.Topic, r.Partition, err)
		}
	}
	if rb.last()+1 >= w.rebuildTo() {
		return nil, w.finishRebuild()
	}
	return nil, nil
}

// add applies record r (after the last applied) to the rebuild as the
// worker's batch would (batch.route: epoch markers raise the clock; every
// stage record is stepped at its offset's version); it reports false,
// without applying it, for a record the bulk path leaves to the row-by-row
// one (a clear, or a record that is not the stage's own).
func (s *stateRebuild) add(r *kgo.Record) (bool, error) {
	if !r.Attrs.IsControl() {
		m := &s.m
		if err := keyedlog.Decode(nil, r.Key, r.Value, nil, m); err != nil {
			return false, fmt.Errorf("keyed record @%d: %w", r.Offset, err)
		}
		switch m.Kind {
		case keyedlog.KindEpoch:
			s.clock.Raise(r.Offset, m.Epoch)
		case keyedlog.KindStep:
		case keyedlog.KindStage:
			if stage.IsClearRecord(m.Key) {
				return false, nil
			}
			m.Pos, m.Version = r.Offset, s.clock.At(r.Offset)
			if s.skip != nil && s.skip(r.Offset) {
				break
			}
			if err := s.step(s.mem, m); err != nil {
				return false, fmt.Errorf("keyed record @%d: %w", r.Offset, err)
			}
		default:
			return false, nil
		}
	}
	s.last = r.Offset
	s.records++
	s.full = s.mem.Bytes() >= s.limit
	return true, nil
}

// rebuildNext is the next offset the bulk rebuild reads (0 before its
// first record: the log's start, as far as it knows).
func (w *worker) rebuildNext() int64 { return w.rb.last() + 1 }

// rebuildTo is where a bulk rebuild ends: the emit-from position, or, for
// a router stepped by input, the group's committed offset (forwardFrom, a
// position without work in progress): above it the work a record leaves
// in progress must be what the run that wrote the sink's batches left,
// which only the router rebuilds, row by row. A plan stage's too stops at
// forwardFrom: its records above it are forwarded to the next stage.
func (w *worker) rebuildTo() int64 {
	if w.byInput || w.op.StateStep != nil {
		return min(w.forwardFrom, w.out.EmitFrom())
	}
	return w.out.EmitFrom()
}

// finishRebuild writes the rebuilt state with its position and clock in
// one atomic step and leaves rebuild mode.
func (w *worker) finishRebuild() error {
	rb := w.rb
	w.rb = nil
	defer rb.close()
	last := rb.last()
	if last < 0 {
		return nil // nothing to rebuild after all
	}
	dir := filepath.Join(rb.dir, "tables")
	var records int
	var clock version.Clock
	var err error
	if sr := rb.sr; sr != nil {
		records, clock = sr.records, sr.clock
		err = driver.IngestRebuild(context.Background(), w.store, dir, func(load *joinstate.Load) error {
			h := w.j.hooks
			var wr memstate.Writer = load
			var dropped uint64
			if h.bulkDrop != nil {
				wr = memstate.Drop(load, h.bulkDrop, &dropped)
			}
			_, _, err := sr.mem.WriteTo(wr)
			h.bulkDropped.Add(dropped)
			if err == nil && h.bulkKill != nil {
				err = h.bulkKill(w.j.def.n, w.p)
			}
			return err
		}, w.j.topic, w.p, last+1, clock)
	} else {
		records, clock = rb.kr.Records, rb.kr.Clock
		err = driver.FinishRebuild(context.Background(), w.store, rb.kr, dir, w.j.topic, w.p)
	}
	if err != nil {
		return err
	}
	w.clock = clock
	w.pos.Store(last + 1)
	w.j.m.StateRebuilt.Add(float64(records))
	w.j.m.StateRebuiltBulk.Add(float64(records))
	w.j.log.Info("partition rebuilt in bulk", "partition", w.p, "stage", w.j.def.n, "records", records, "next", last+1)
	return nil
}

// stopRebuild drops a bulk rebuild in progress (the worker stops).
func (w *worker) stopRebuild() {
	if w.rb != nil {
		w.rb.close()
		w.rb = nil
	}
}

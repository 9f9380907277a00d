package kafkarun

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/version"
)

// batch is one batch of a worker, made by the worker for each batch and
// dropped when it has committed or failed: its state transaction, its
// version clock (committed with it, or dropped with it), the positions it
// spans and what it emitted. See worker for what a batch is.
type batch struct {
	w     *worker
	ctx   context.Context // the worker's sink context
	t     *joinstate.Txn
	clock version.Clock
	// start is the batch's first position (-1: the first record's), next
	// the position after what it applied.
	start, next int64
	// writing: records at or above the emit-from position were applied
	// (or work stepped): the sink has (or may have) this batch's changes.
	writing bool
	applied int // records applied
	rebuilt int // records applied without emitting (below emit-from)

	emit              keyed.Emit // into the sink buffer, counting
	fan               int        // changes of the record being applied
	upserts, retracts int
	inserts           int // a time join's rows
}

// newBatch begins a batch at the worker's durable position.
func (w *worker) newBatch() *batch {
	b := &batch{w: w, ctx: w.ctx, t: w.store.Begin(), clock: w.clock, start: w.pos.Load()}
	b.next = b.start
	bufEmit := w.out.Emitter(b.ctx)
	b.emit = func(c *row.Change) error {
		b.fan++
		switch c.Op {
		case row.Upsert:
			b.upserts++
		case row.Insert:
			b.inserts++
		default:
			b.retracts++
		}
		return bufEmit(c)
	}
	return b
}

// close drops what the batch did not commit: its state writes, its open
// forwarding transaction, its unwritten changes.
func (b *batch) close() {
	b.t.Abort()
	b.w.fwd.abort()
	b.w.out.Discard()
}

// run runs the batch starting with recs (none: a batch of steps of the
// work in progress) and returns the records received but not applied
// (when the batch ended in the middle of a delivery).
func (b *batch) run(recs []*kgo.Record) ([]*kgo.Record, error) {
	w := b.w
	w.status.set(phaseApply)
	emitFrom := w.out.EmitFrom()
	batcher := w.out.Batcher()
	var maxDelay <-chan time.Time
	if batcher {
		tm := time.NewTimer(w.out.MaxDelay())
		defer tm.Stop()
		maxDelay = tm.C
	}
	var rest []*kgo.Record
apply:
	for {
		round, inputs := time.Now(), 0
		for i, r := range recs {
			if b.next >= 0 && r.Offset < b.next {
				continue // already applied (redelivered after a rewind)
			}
			if r.Offset >= emitFrom && b.start < emitFrom {
				// The first record to emit: a batch that applied records
				// below emitFrom ends there; the next begins at emitFrom.
				if b.applied > 0 {
					b.next, rest = emitFrom, recs[i:]
					break apply
				}
				b.start, b.next = emitFrom, emitFrom
			}
			if b.start < 0 {
				b.start = r.Offset
			}
			if r.Offset >= emitFrom && !b.writing {
				b.writing = true
				if err := w.out.Begin(b.start); err != nil {
					return nil, err
				}
			}
			if err := b.apply(r); err != nil {
				return nil, err
			}
			b.next = r.Offset + 1
			b.applied++
			inputs++
			if b.writing && batcher {
				// The sink sees every change at once, so that Full and
				// Replaying (which count its rows) are current.
				if err := w.out.Write(b.ctx); err != nil {
					return nil, err
				}
				if w.out.Full() && !w.out.Replaying() {
					rest = recs[i+1:]
					break apply
				}
			}
		}
		recs = nil
		if w.steps(b.next) {
			// Steps of the work in progress: as long as the inputs just
			// applied took, or idleQuantum when there were none.
			if !b.writing {
				b.writing = true
				// (Never Positioned but in the negative control of
				// stepping by input: see unchunked, byInput.)
				if err := w.out.Begin(b.start); err != nil {
					return nil, err
				}
			}
			quantum := idleQuantum
			if inputs > 0 {
				w.pacer.Earn(time.Since(round))
				quantum = 0
			}
			if err := b.step(quantum); err != nil {
				return nil, err
			}
			if batcher {
				if err := w.out.Write(b.ctx); err != nil {
					return nil, err
				}
				if w.out.Full() {
					break apply
				}
			}
		}
		if !batcher {
			if more := w.queued(b); more != nil {
				recs = more
				continue
			}
			break
		}
		if w.stopping() && !w.out.Replaying() {
			break
		}
		if w.steps(b.next) {
			// Do not wait for input while there is work to step.
			select {
			case recs = <-w.in:
			case <-maxDelay:
				break apply
			default:
			}
			continue
		}
		w.status.set(phaseInput)
		select {
		case recs = <-w.in:
		case <-maxDelay:
			if !w.out.Replaying() {
				break apply
			}
			maxDelay = nil // a replayed batch goes on to what landed of it
		case <-w.stop:
			if w.out.Replaying() {
				return nil, errAbandoned
			}
			break apply
		}
		w.status.set(phaseApply)
	}
	w.j.log.Debug("batch end", "partition", w.p, "start", b.start, "next", b.next, "applied", b.applied, "writing", b.writing, "rest", len(rest), "pos", w.pos.Load())
	if b.next < 0 || b.next <= w.pos.Load() && b.t.Empty() {
		return rest, nil // nothing new
	}
	if err := b.commit(b.next); err != nil {
		return nil, err
	}
	w.snap.committed(b.applied)
	if b.rebuilt > 0 {
		w.j.m.StateRebuilt.Add(float64(b.rebuilt))
	}
	return rest, nil
}

// apply applies one record of the partition (a keyed record, or one of the
// router's) to the batch, emitting its changes unless the record lies
// below the emit-from position. Below it (in upsert mode), and with an
// unchunked router, the work in progress the record can advance is drained
// with it (before: an earlier run's; after: what the record unblocked), so
// that such a batch leaves only work waiting for other partitions. A
// router stepped by input advances its work after every record instead,
// by Operator.ByInput rows (a step marker: its rows), also below the
// emit-from position (Quiet, below forwardFrom, drains).
func (b *batch) apply(r *kgo.Record) error {
	w := b.w
	if r.Attrs.IsControl() {
		return nil // a transaction marker: only the position moves past it
	}
	b.fan = 0
	emit := b.emit
	silent := w.out.Silent(r.Offset)
	if silent {
		emit = driver.Discard
		b.rebuilt++
	}
	out := w.opOut(emit, r.Offset)
	drain := silent && !w.byInput || w.unchunked
	if drain {
		if err := driver.Drain(w.op, b.t, out); err != nil {
			return err
		}
	}
	if err := b.route(r, out); err != nil {
		return err
	}
	if w.byInput {
		budget := w.op.ByInput
		if w.msg.Kind == keyedlog.KindStep {
			budget, w.stepOut = w.msg.Rows, false
		}
		if _, err := w.op.Advance(b.t, budget, out); err != nil {
			return err
		}
	}
	if drain {
		if err := driver.Drain(w.op, b.t, out); err != nil {
			return err
		}
	}
	if !silent {
		w.j.m.FanOut.Observe(float64(b.fan))
	}
	return nil
}

// route decodes one record of the partition into the worker's message and
// steps the router with it at the batch's clock, which epoch markers raise.
func (b *batch) route(r *kgo.Record, out keyedlog.Out) error {
	w := b.w
	var h []byte
	for _, hd := range r.Headers {
		if hd.Key == keyedlog.ForwardHeader {
			h = hd.Value
		}
	}
	m := &w.msg
	if err := keyedlog.Decode(w.j.spec, r.Key, r.Value, h, m); err != nil {
		return fmt.Errorf("keyed record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	switch m.Kind {
	case keyedlog.KindEpoch:
		b.clock.Raise(r.Offset, m.Epoch)
		return nil
	case keyedlog.KindStep:
		return nil // budget for the work in progress (apply)
	}
	m.Pos, m.Version = r.Offset, b.clock.At(r.Offset)
	return w.op.Step(b.t, m, out)
}

// step advances the work in progress, in steps of skew.chunk_rows, for
// the time the pacer allows (quantum: at least that long, when no input
// waits).
func (b *batch) step(quantum time.Duration) error {
	w := b.w
	return w.pacer.Work(w.op, b.t, w.j.cfg.Skew.ChunkRows, quantum, w.opOut(b.emit, b.next))
}

// drain finishes the runnable work in progress at the batch's position
// (emitting unless that lies below the emit-from position).
func (b *batch) drain() error {
	emit := b.emit
	if b.w.out.Silent(b.next) {
		emit = driver.Discard
	}
	return driver.Drain(b.w.op, b.t, b.w.opOut(emit, b.next))
}

// commit ends the batch at position next (driver.Commit): position and
// clock into its transaction, the sink flushed (End for a Positioned sink
// that was written), the router's records committed to Kafka, and only
// then the transaction committed. Then the worker moves on to it.
func (b *batch) commit(next int64) error {
	w := b.w
	m := w.j.m
	flushStart := time.Now()
	w.status.set(phaseSink)
	err := driver.Commit(b.ctx, b.t, driver.Batch{
		Write: func(c driver.Committer) error {
			if err := c.SetPosition(w.j.topic, w.p, next); err != nil {
				return err
			}
			return driver.MetaClock.Put(c, b.clock)
		},
		Out: w.out, To: next,
		AfterEnd: func(ctx context.Context) error {
			if !w.op.Busy() {
				// The sink has the batch, its work in progress included
				// (none left): a restarted worker emits from here
				// (joinStage.restartFailed).
				w.flushed.Store(next)
			}
			if n := b.upserts + b.retracts + b.inserts; n > 0 {
				m.SinkFlushSeconds.Observe(time.Since(flushStart).Seconds())
				m.SinkBatchChanges.Observe(float64(n))
				m.Changes.WithLabelValues(row.Upsert.String()).Add(float64(b.upserts))
				m.Changes.WithLabelValues(row.Retract.String()).Add(float64(b.retracts))
				if b.inserts > 0 {
					m.Changes.WithLabelValues(row.Insert.String()).Add(float64(b.inserts))
				}
			}
			w.status.set(phaseForward)
			if _, err := w.fwd.commit(ctx); err != nil {
				m.Errors.WithLabelValues("join", "forward").Inc()
				return err
			}
			w.status.set(phaseCommit)
			return nil
		},
	})
	if driver.IsSinkError(err) {
		m.Errors.WithLabelValues("join", "sink").Inc()
	}
	if err != nil {
		return err
	}
	w.committed(b.clock, next)
	return nil
}

// queued returns a delivery already waiting for a batch whose sink is not
// a sink.Batcher, which the batch then applies too (one state commit and
// one sink flush for both: under a backlog the dispatcher's polls of
// state.batch_events records are split over the partitions, and a batch
// per delivery committed and flushed every few hundred records), or nil:
// the batch ends. It never waits. A batch takes more only while it holds
// fewer than state.batch_events records, and never for a Positioned sink
// (its batches stay one delivery each), a time join's worker (checkTrimmed
// looks at every delivery before its batch), a bulk rebuild, or a worker
// asked to stop.
func (w *worker) queued(b *batch) []*kgo.Record {
	if w.out.Positioned() || w.j.snapCl != nil || w.rb != nil || w.stopping() || b.applied >= w.j.cfg.State.BatchEvents {
		return nil
	}
	select {
	case recs := <-w.in:
		w.countCatchUp(recs)
		return recs
	default:
		return nil
	}
}

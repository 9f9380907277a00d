package kafkarun

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
	"github.com/cdcjoin/cdcjoin/skew"
	"github.com/cdcjoin/cdcjoin/version"
)

// worker joins one keyed partition. It owns its store and its sink (opened
// on its own goroutine, so that a slow sink does not hold up a rebalance).
//
// Batches: a batch applies keyed records to one state transaction, writes
// the changes to the sink, flushes it, and only then commits the state with
// the new position and version clock; on error nothing of the batch is
// committed. With a sink.Batcher (the ClickHouse sink) a batch gathers
// deliveries until the sink is Full or its MaxDelay passed, so INSERTs come
// near batch.rows; otherwise a batch is one delivery. A batch never mixes
// records below emitFrom (applied without writing: an earlier owner, or a
// run before a crash, delivered their changes) with records at or above it.
//
// With a sink.Positioned (changelog mode) the worker brackets every batch
// it writes with Begin(from)/End(to) in keyed offsets, and starts emitting
// at what the sink reports delivered: a crash between a batch's INSERTs and
// its commit then costs nothing twice.
//
// Stopping (revoke, shutdown): the batch in progress finishes and commits,
// within kafka.drain_timeout of the stop request; past it, the sink's
// context is cancelled, the batch is abandoned uncommitted (the next owner
// redoes it) and the worker returns.
//
// Hot keys (skew.go): records go through the partition's skew.Router. A
// fan-out too large for skew.chunk_rows becomes work in progress, stepped
// inside batches between later records (paced: about as much time as the
// records took; idleQuantum at a time when no input waits), so a driven
// batch fills with steps while it waits for input, and a worker with work
// in progress and no input runs batches of steps alone (the position does
// not move). The router's records go in one Kafka transaction per batch,
// committed after the sink's flush (End) and before the state commit.
// Records below emitFrom are applied without writing and their work is
// drained with them (nothing of it is written: the sink has it); the
// router sends nothing for records below forwardFrom (the group's
// committed offset: an earlier owner applied them, sent their records and
// committed), but does for records between forwardFrom and a Positioned
// sink's delivered position (a crash between End and the forwarding
// transaction's commit; replicas drop the duplicates). With a Positioned
// sink the router does all the work of an input at once (skew.chunk_rows
// does not apply): a replayed batch must write the same changes in the
// same order, which time-paced steps would not. Salting still spreads hot
// keys over partitions there.
type worker struct {
	j     *joinStage
	p     int32
	store *joinstate.Store
	open  func(context.Context) (sink.Sink, error)
	sink  sink.Sink // set by run; read by remove after done
	// out is the sink side (set by start): records below out.EmitFrom()
	// were emitted already (by an earlier owner, or before a crash).
	out *driver.Output
	// forwardFrom: the router's records of input below this offset (the
	// group's committed offset when the worker started) were sent and
	// committed by an earlier owner; output below it too (out's first
	// emit-from).
	forwardFrom int64
	// emitFloor: records below it were emitted by this process's previous
	// worker of the partition (its flushed position: a restart after a
	// Kafka failure, joinStage.restartFailed); 0 otherwise.
	emitFloor int64
	clock     version.Clock

	router    *skew.Router // the operator: the join, fair fan-out, hot keys (skew.go)
	fwd       *forwarder   // the router's records
	pacer     driver.Pacer
	unchunked bool // the router does an input's work at once (a Positioned sink)
	msg       keyedlog.Msg

	pos atomic.Int64 // durable next offset (state committed, sink flushed); -1: none yet
	// flushed: the sink has every change of the records below it, their
	// work in progress included (set at a flush without any, before the
	// state commits); a restarted worker emits from there
	// (joinStage.restartFailed).
	flushed atomic.Int64
	quiet   atomic.Int64 // the last durable position without work in progress (-1: none); committed to Kafka
	hot     atomic.Pointer[hotSnapshot]
	in      chan []*kgo.Record
	stop    chan struct{} // closed by requestStop
	once    sync.Once     // closes stop

	ctx    context.Context // the sink's; cancelled drainTimeout after stop, and at exit
	cancel context.CancelFunc
	done   chan struct{}

	busySince atomic.Int64 // UnixNano when the batch in progress began; 0 when idle
	status    workerStatus // what it does, for Status (status.go)
	stats     reporter     // the sink's counters, for the scraper

	fan      int
	upserts  int
	retracts int
	rstats   skew.RouterStats // the router's, as of the last commit (metrics deltas)

	dir      string   // the partition's state directory
	hasState bool     // the state had a position when the worker started
	rb       *rebuild // a bulk rebuild in progress (rebuild.go), or nil

	// Readiness (ready.go): caught is set once the partition's state
	// reached the committed position; cuTarget is that position (-1 until
	// the sink is open); cu is the catch-up in progress.
	caught   atomic.Bool
	cuTarget atomic.Int64
	cu       joinCatchUp
}

// errAbandoned ends a batch that could not finish before the drain deadline.
var errAbandoned = errors.New("batch abandoned at the drain deadline")

// requestStop asks the worker to stop after its batch in progress, within
// the drain timeout. Safe to call more than once and from any goroutine:
// the run loop's final stop and a revoke callback (which a rebalance may
// run meanwhile) can both ask.
func (w *worker) requestStop() {
	w.once.Do(func() {
		close(w.stop)
		time.AfterFunc(w.j.cfg.Kafka.DrainTimeout, w.cancel)
	})
}

func (w *worker) stopAndWait() {
	w.requestStop()
	<-w.done
}

func (w *worker) stopping() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

func (w *worker) run() {
	defer close(w.done)
	defer w.cancel()
	defer w.stopRebuild()
	if err := w.start(); err != nil {
		if w.stopping() && w.ctx.Err() != nil {
			return
		}
		w.j.m.Errors.WithLabelValues("join", "sink").Inc()
		w.j.workerFailed(w, err)
		return
	}
	if err := w.startRebuild(w.dir, w.hasState); err != nil {
		w.j.m.Errors.WithLabelValues("join", "worker").Inc()
		w.j.workerFailed(w, err)
		return
	}
	w.beginCatchUp()
	var recs []*kgo.Record
	for {
		if len(recs) == 0 {
			w.status.set(phaseInput)
			if w.stepping() {
				// Work in progress: input first, else a batch of steps.
				select {
				case <-w.stop:
					w.finishWork()
					return
				case recs = <-w.in:
					w.countCatchUp(recs)
				default:
				}
			} else {
				select {
				case <-w.stop:
					w.finishWork()
					return
				case recs = <-w.in:
					w.countCatchUp(recs)
				case <-w.idle():
					if w.rb != nil {
						if err := w.finishRebuild(); err != nil {
							w.j.m.Errors.WithLabelValues("join", "worker").Inc()
							w.j.workerFailed(w, err)
							return
						}
					}
					w.checkCatchUp(true)
					continue
				}
			}
		}
		var err error
		if w.rb != nil && len(recs) > 0 {
			w.status.set(phaseRebuild)
			if recs, err = w.rebuildRecords(recs); err != nil {
				w.j.m.Errors.WithLabelValues("join", "worker").Inc()
				w.j.workerFailed(w, err)
				return
			}
			if len(recs) == 0 {
				w.checkCatchUp(false)
				continue
			}
		}
		recs, err = w.batch(recs)
		switch {
		case err == nil:
		case w.stopping() && (w.ctx.Err() != nil || errors.Is(err, errAbandoned)):
			w.j.log.Warn("partition stopped with its batch in progress uncommitted (the next owner redoes it)",
				"partition", w.p, "position", w.pos.Load(), "drain_timeout", w.j.cfg.Kafka.DrainTimeout, "err", err)
			return
		default:
			w.j.m.Errors.WithLabelValues("join", "worker").Inc()
			w.j.workerFailed(w, err)
			return
		}
		w.checkCatchUp(false)
		if w.stopping() {
			w.finishWork()
			return
		}
	}
}

// start opens the sink and, for a Positioned one, starts emitting where
// the delivered input ends.
func (w *worker) start() error {
	s, err := w.open(w.ctx)
	if err != nil {
		return &driver.SinkError{Err: err}
	}
	w.sink = s
	w.stats.set(s)
	w.out = driver.NewOutput(s, writeChunk)
	w.out.RaiseEmitFrom(max(w.forwardFrom, w.emitFloor))
	w.status.emitFrom.Store(w.out.EmitFrom())
	if !w.out.Positioned() {
		return nil
	}
	w.unchunked = true
	w.router.SetChunk(-1)
	d, err := w.out.Delivered(w.ctx)
	if err != nil {
		return err
	}
	if d.Pos > max(w.pos.Load(), 0) {
		// The sink got a batch whose state commit was lost (a crash
		// between the two), or the state is rebuilt here.
		w.j.log.Info("the sink holds this partition's output beyond the local state; applying the records below its position without emitting them again",
			"partition", w.p, "delivered", d.Pos, "complete", d.Complete, "chunks", d.Chunks, "local", w.pos.Load(), "committed", w.forwardFrom)
	}
	w.status.emitFrom.Store(w.out.EmitFrom())
	return nil
}

const writeChunk = 1024

// batch runs one batch starting with recs (none: a batch of steps of the
// work in progress) and returns the records received but not applied
// (when the batch ended in the middle of a delivery).
func (w *worker) batch(recs []*kgo.Record) ([]*kgo.Record, error) {
	ctx := w.ctx
	began := time.Now()
	w.busySince.Store(began.UnixNano())
	defer w.busySince.Store(0)
	w.status.set(phaseApply)
	start := w.pos.Load() // the batch's first position; -1: the first record's
	next := start
	t := w.store.Begin()
	defer t.Abort()
	defer w.fwd.abort()
	clock := w.clock // committed with the batch, or dropped with it
	defer w.out.Discard()
	emit := w.emitter(ctx)
	applied, rebuilt := 0, 0
	writing := false // records at or above emitFrom were applied (or stepped): the sink has (or may have) this batch's changes
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
			if next >= 0 && r.Offset < next {
				continue // already applied (redelivered after a rewind)
			}
			if r.Offset >= emitFrom && start < emitFrom {
				// The first record to emit: a batch that applied records
				// below emitFrom ends there; the next begins at emitFrom.
				if applied > 0 {
					next, rest = emitFrom, recs[i:]
					break apply
				}
				start, next = emitFrom, emitFrom
			}
			if start < 0 {
				start = r.Offset
			}
			if r.Offset >= emitFrom && !writing {
				writing = true
				if err := w.out.Begin(start); err != nil {
					return nil, err
				}
			}
			if err := w.apply(t, &clock, r, emit, &rebuilt); err != nil {
				return nil, err
			}
			next = r.Offset + 1
			applied++
			inputs++
			if writing && batcher {
				// The sink sees every change at once, so that Full and
				// Replaying (which count its rows) are current.
				if err := w.out.Write(ctx); err != nil {
					return nil, err
				}
				if w.out.Full() && !w.out.Replaying() {
					rest = recs[i+1:]
					break apply
				}
			}
		}
		recs = nil
		if w.steps(next) {
			// Steps of the work in progress: as long as the inputs just
			// applied took, or idleQuantum when there were none.
			writing = true // (never Positioned: see unchunked)
			quantum := idleQuantum
			if inputs > 0 {
				w.pacer.Earn(time.Since(round))
				quantum = 0
			}
			if err := w.step(t, next, quantum, emit); err != nil {
				return nil, err
			}
			if batcher {
				if err := w.out.Write(ctx); err != nil {
					return nil, err
				}
				if w.out.Full() {
					break apply
				}
			}
		}
		if !batcher || w.stopping() && !w.out.Replaying() {
			break
		}
		if w.steps(next) {
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
	w.j.log.Debug("batch end", "partition", w.p, "start", start, "next", next, "applied", applied, "writing", writing, "rest", len(rest), "pos", w.pos.Load())
	if next < 0 || next <= w.pos.Load() && t.Empty() {
		return rest, nil // nothing new
	}
	if err := w.commit(ctx, t, clock, next); err != nil {
		return nil, err
	}
	if rebuilt > 0 {
		w.j.m.StateRebuilt.Add(float64(rebuilt))
	}
	return rest, nil
}

// emitter returns a batch's emit function: into the sink buffer, counting.
func (w *worker) emitter(ctx context.Context) keyed.Emit {
	bufEmit := w.out.Emitter(ctx)
	w.upserts, w.retracts = 0, 0
	return func(c *row.Change) error {
		w.fan++
		if c.Op == row.Upsert {
			w.upserts++
		} else {
			w.retracts++
		}
		return bufEmit(c)
	}
}

// commit ends a batch (driver.Commit): position next and clock into t,
// the sink flushed (End for a Positioned sink that was written), the
// router's records committed to Kafka, and only then t committed.
func (w *worker) commit(ctx context.Context, t *joinstate.Txn, clock version.Clock, next int64) error {
	flushStart := time.Now()
	w.status.set(phaseSink)
	err := driver.Commit(ctx, t, driver.Batch{
		Write: func(c driver.Committer) error {
			if err := c.SetPosition(w.j.topic, w.p, next); err != nil {
				return err
			}
			return driver.MetaClock.Put(c, clock)
		},
		Out: w.out, To: next,
		AfterEnd: func(ctx context.Context) error {
			if !w.router.Busy() {
				// The sink has the batch, its work in progress included
				// (none left): a restarted worker emits from here
				// (records below a floor are applied silently, their
				// work drained at once: see apply).
				w.flushed.Store(next)
			}
			if n := w.upserts + w.retracts; n > 0 {
				w.j.m.SinkFlushSeconds.Observe(time.Since(flushStart).Seconds())
				w.j.m.SinkBatchChanges.Observe(float64(n))
				w.j.m.Changes.WithLabelValues(row.Upsert.String()).Add(float64(w.upserts))
				w.j.m.Changes.WithLabelValues(row.Retract.String()).Add(float64(w.retracts))
			}
			w.status.set(phaseForward)
			if _, err := w.fwd.commit(ctx); err != nil {
				w.j.m.Errors.WithLabelValues("join", "forward").Inc()
				return err
			}
			w.status.set(phaseCommit)
			return nil
		},
	})
	if driver.IsSinkError(err) {
		w.j.m.Errors.WithLabelValues("join", "sink").Inc()
	}
	if err != nil {
		return err
	}
	w.clock = clock
	w.pos.Store(next)
	w.j.progressed(w.p)
	if !w.router.Busy() {
		w.quiet.Store(next)
	}
	st := w.router.Stats
	w.j.sm.Forwarded.Add(float64(st.Forwards + st.Proposals - w.rstats.Forwards - w.rstats.Proposals))
	w.j.sm.Duplicates.Add(float64(st.Duplicate - w.rstats.Duplicate))
	w.rstats = st
	w.publishHot()
	return nil
}

// steps reports whether a batch at position next steps the work in
// progress: with a chunked router, at positions the worker writes, not
// while rebuilding. (Work at positions below emitFrom, and an unchunked
// router's, is drained with the records that made it.)
func (w *worker) steps(next int64) bool {
	return w.rb == nil && !w.unchunked && next >= 0 && !w.out.Silent(next) && w.router.Runnable()
}

// stepping reports whether the worker has work in progress to run a batch
// for without new input.
func (w *worker) stepping() bool { return w.steps(w.pos.Load()) }

// finishWork, when the worker is asked to stop, finishes the work in
// progress that can finish without other partitions (not a cooling waiting
// for confirmations) and commits, within the drain timeout, so that the
// position committed to Kafka is the worker's own (a stop in the middle of
// a fan-out would leave it at the last position without work in progress,
// and the partition's next owner would emit again what came after it).
// Errors (the drain deadline) are logged: the state stays as committed
// before.
func (w *worker) finishWork() {
	pos := w.pos.Load()
	if w.rb != nil || pos < 0 || !w.router.Runnable() || w.ctx.Err() != nil {
		return
	}
	ctx := w.ctx
	w.busySince.Store(time.Now().UnixNano())
	defer w.busySince.Store(0)
	w.status.set(phaseStopping)
	t := w.store.Begin()
	defer t.Abort()
	defer w.fwd.abort()
	defer w.out.Discard()
	emit := w.emitter(ctx)
	writing := !w.out.Silent(pos)
	if !writing {
		emit = driver.Discard
	}
	if writing && w.out.Positioned() {
		// Never left by this worker (an unchunked router drains every
		// input's work): an earlier run's, finished by the next batch.
		return
	}
	err := driver.Drain(w.router, t, w.routerOut(emit, pos))
	if err == nil {
		err = w.commit(ctx, t, w.clock, pos)
	}
	if err != nil {
		w.j.log.Warn("finishing the work in progress before stopping", "partition", w.p, "err", err)
	}
}

// apply applies one record of the partition (a keyed record, or one of the
// router's) to t, emitting its changes unless the record lies below
// emitFrom. Below emitFrom, and with an unchunked router, the work in
// progress the record can advance is drained with it (before: an earlier
// run's; after: what the record unblocked), so that such a batch leaves
// only work waiting for other partitions.
func (w *worker) apply(t *joinstate.Txn, clock *version.Clock, r *kgo.Record, emit keyed.Emit, rebuilt *int) error {
	if r.Attrs.IsControl() {
		return nil // a transaction marker: only the position moves past it
	}
	w.fan = 0
	e := emit
	silent := w.out.Silent(r.Offset)
	if silent {
		e = driver.Discard
		*rebuilt++
	}
	out := w.routerOut(e, r.Offset)
	drain := silent || w.unchunked
	if drain {
		if err := driver.Drain(w.router, t, out); err != nil {
			return err
		}
	}
	if err := w.route(t, clock, r, out); err != nil {
		return err
	}
	if drain {
		if err := driver.Drain(w.router, t, out); err != nil {
			return err
		}
	}
	if !silent {
		w.j.m.FanOut.Observe(float64(w.fan))
	}
	return nil
}

// routerOut is the router's Out for work at position pos, emitting into
// emit: Quiet below forwardFrom (an earlier owner sent its records).
func (w *worker) routerOut(emit keyed.Emit, pos int64) keyedlog.Out {
	return keyedlog.Out{Emit: emit, Send: w.fwd, Quiet: pos < w.forwardFrom}
}

// busyFor reports how long the worker has been in its batch in progress (0
// when idle).
func (w *worker) busyFor(now time.Time) time.Duration {
	if b := w.busySince.Load(); b != 0 {
		return now.Sub(time.Unix(0, b))
	}
	return 0
}

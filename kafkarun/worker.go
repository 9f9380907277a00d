package kafkarun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/sink"
	"github.com/cdcjoin/cdcjoin/version"
)

// worker joins one keyed partition. It owns its store and its sink (opened
// on its own goroutine, so that a slow sink does not hold up a rebalance).
//
// Batches (batch.go): a batch applies keyed records to one state transaction, writes
// the changes to the sink, flushes it, and only then commits the state with
// the new position and version clock; on error nothing of the batch is
// committed. With a sink.Batcher (the ClickHouse sink) a batch gathers
// deliveries until the sink is Full or its MaxDelay passed, so INSERTs come
// near batch.rows; otherwise a batch is one delivery and the deliveries
// already queued behind it, up to state.batch_events records (queued; a
// Positioned sink's and a time join's batches are one delivery each). A batch never mixes
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
// The operator (operator.go): records go through the partition's Operator
// (Options.Operator; by default the regular join's skew.Router, which the
// rest of this comment describes). A fan-out too large for skew.chunk_rows
// becomes work in progress, stepped between later records, in one of two
// ways:
//
//   - Upsert mode (a sink that is not Positioned): paced by time, inside
//     batches (about as much time as the records took; idleQuantum at a
//     time when no input waits), so a driven batch fills with steps while
//     it waits for input, and a worker with work in progress and no input
//     runs batches of steps alone (the position does not move).
//   - Changelog mode (a sink.Positioned, Operator.ByInput > 0): by input.
//     After every record read (applied, or applied without writing above
//     forwardFrom) the work advances by skew.chunk_rows rows, so the chunks
//     are a function of the log and of the committed state (the router's
//     turns are kept in it): a batch re-created after a crash cuts the same
//     chunks, and writes the same changes in the same order, as the delivery
//     markers require. A worker with runnable work and no input writes a
//     step marker (keyedlog.KindStep, stepRows rows) to its own partition
//     in a Kafka transaction of its own, one at a time: reading it back
//     is the input that steps the work on, at a position of the log, so a
//     fan-out finishes without new input and a replay finds the same
//     markers. Positions with work in progress are not quiet (not
//     committed to Kafka); a stop does not finish the work (finishWork: it
//     would step by time), and a bulk rebuild stops at forwardFrom (the
//     records between forwardFrom and the sink's delivered position are
//     re-read row by row, to leave the same work in progress there).
//
// The router's records go in one Kafka transaction per batch, committed
// after the sink's flush (End) and before the state commit. Records below
// forwardFrom (Out.Quiet) are applied with their work drained (nothing of
// it is written: the sink has it; the committed offset is a position
// without work in progress, so the state there is the same either way);
// in upsert mode so are those below emitFrom. The router sends nothing
// for records below forwardFrom (the group's committed offset: an earlier
// owner applied them, sent their records and committed), but does for
// records between forwardFrom and a Positioned sink's delivered position
// (a crash between End and the forwarding transaction's commit; replicas
// drop the duplicates). An operator without ByInput does all the work of
// an input at once with a Positioned sink (Unchunk, or drained). Salting
// spreads hot keys over partitions in both modes.
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

	op        Operator   // the partition's operator (operator.go; by default the regular join's skew.Router)
	fwd       *forwarder // what the operator sends (Out.Send)
	pacer     driver.Pacer
	unchunked bool // the operator does an input's work at once (a Positioned sink without Operator.ByInput)
	byInput   bool // the work in progress is stepped by input (a Positioned sink with Operator.ByInput)
	stepOut   bool // a step marker was written and not read back yet (byInput)
	stepSeq   uint64
	stepNonce string // unique per worker: step marker keys
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

	dir      string       // the partition's state directory
	hasState bool         // the state had a position when the worker started (or was loaded from a snapshot)
	fromSnap bool         // the state was loaded from a time join's snapshot (tsnap.go)
	began    time.Time    // when the worker was made (its state opened): a catch-up's start
	rb       *rebuild     // a bulk rebuild in progress (rebuild.go), or nil
	snap     *snapshotter // a time join's snapshot goroutine (tsnap.go), or nil

	// Readiness: caught is set once the partition's state
	// reached the committed position; cuTarget is that position (-1 until
	// the sink is open); cu is the catch-up in progress.
	caught   atomic.Bool
	cuTarget atomic.Int64
	cu       joinCatchUp
	probed   bool // testHooks.caughtUp was called
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
	defer func() { w.snap.stop() }()
	defer w.cancel()
	defer w.stopRebuild()
	if err := w.start(); err != nil {
		if w.stopping() && w.ctx.Err() != nil {
			return
		}
		w.fail("sink", err)
		return
	}
	if err := w.startRebuild(w.dir, w.hasState); err != nil {
		w.fail("worker", err)
		return
	}
	w.beginCatchUp()
	var recs []*kgo.Record
	for {
		if len(recs) == 0 && w.wantsStep() {
			// Work to step by input and none waiting: a step marker.
			select {
			case recs = <-w.in:
				w.countCatchUp(recs)
			default:
				if err := w.sendStep(); err != nil {
					w.fail("worker", err)
					return
				}
			}
		}
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
						if w.moreBelow(w.rebuildNext(), w.rebuildTo()) {
							continue // its records are still to come
						}
						if err := w.finishRebuild(); err != nil {
							w.fail("worker", err)
							return
						}
					}
					w.checkCatchUp(true)
					continue
				}
			}
		}
		if err := w.checkTrimmed(recs); err != nil {
			w.fail("worker", err)
			return
		}
		var err error
		if w.rb != nil && len(recs) > 0 {
			w.status.set(phaseRebuild)
			if recs, err = w.rebuildRecords(recs); err != nil {
				w.fail("worker", err)
				return
			}
			// Caught up when the rebuild reached the committed position,
			// before the records after it are applied.
			w.checkCatchUp(false)
			if len(recs) == 0 {
				continue
			}
		}
		recs, err = w.runBatch(recs)
		switch {
		case err == nil:
		case w.stopping() && (w.ctx.Err() != nil || errors.Is(err, errAbandoned)):
			w.j.log.Warn("partition stopped with its batch in progress uncommitted (the next owner redoes it)",
				"partition", w.p, "position", w.pos.Load(), "drain_timeout", w.j.cfg.Kafka.DrainTimeout, "err", err)
			return
		default:
			w.fail("worker", err)
			return
		}
		w.checkCatchUp(false)
		if w.stopping() {
			w.finishWork()
			return
		}
	}
}

// fail stops Run with the worker's error (of kind, a metric label), or
// for a restartable Kafka failure has the dispatcher restart the
// partition's worker (joinStage.workerFailed).
func (w *worker) fail(kind string, err error) {
	w.j.m.Errors.WithLabelValues("join", kind).Inc()
	w.j.workerFailed(w, err)
}

// runBatch runs one batch (see batch) and drops what it did not commit.
func (w *worker) runBatch(recs []*kgo.Record) ([]*kgo.Record, error) {
	w.busySince.Store(time.Now().UnixNano())
	defer w.busySince.Store(0)
	b := w.newBatch()
	defer b.close()
	return b.run(recs)
}

// committed moves the worker past a batch committed at position next with
// clock.
func (w *worker) committed(clock version.Clock, next int64) {
	w.clock = clock
	w.pos.Store(next)
	w.j.progressed(w.p)
	if !w.op.Busy() {
		w.quiet.Store(next)
	}
	if w.op.Committed != nil {
		w.op.Committed()
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
	switch {
	case w.j.paceByTime && w.op.ByInput > 0:
		// Broken on purpose (tests): time-paced steps under the markers.
	case w.op.ByInput > 0:
		w.byInput = true
	default:
		w.unchunked = true
		if w.op.Unchunk != nil {
			w.op.Unchunk()
		}
	}
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

// steps reports whether a batch at position next steps the work in
// progress by time: with a chunked router in upsert mode, at positions the
// worker writes, not while rebuilding. (Work at positions below emitFrom,
// and an unchunked router's, is drained with the records that made it; a
// router stepped by input steps with every record.)
func (w *worker) steps(next int64) bool {
	return w.rb == nil && !w.unchunked && !w.byInput && next >= 0 && !w.out.Silent(next) && w.op.Runnable()
}

// stepRows is the budget a step marker buys, in skew.chunk_rows: a
// marker costs a Kafka transaction and a round trip through the log, so
// it buys more than a record; other keys' records read after it wait for
// at most that many rows.
const stepRows = 8

// wantsStep reports whether the worker, stepping by input, should write a
// step marker: runnable work at a position it writes, none in flight.
func (w *worker) wantsStep() bool {
	pos := w.pos.Load()
	return w.byInput && !w.stepOut && w.rb == nil && pos >= 0 && !w.out.Silent(pos) && w.op.Runnable() && !w.stopping()
}

// sendStep writes a step marker to the worker's own partition and commits
// it (a transaction of the forwarder's own, between batches).
func (w *worker) sendStep() error {
	if w.stepNonce == "" {
		var nonce [8]byte
		if _, err := rand.Read(nonce[:]); err != nil {
			return fmt.Errorf("cdcjoin: step marker nonce: %w", err)
		}
		w.stepNonce = w.j.cfg.Kafka.InstanceID + "/" + hex.EncodeToString(nonce[:]) + "/"
	}
	w.stepSeq++
	key := keyedlog.AppendStepKey(nil, w.stepNonce+strconv.FormatUint(w.stepSeq, 10))
	if err := w.fwd.Send(w.p, key, keyedlog.StepValue(stepRows*w.op.ByInput), nil); err != nil {
		return err
	}
	w.status.set(phaseForward)
	if _, err := w.fwd.commit(w.ctx); err != nil {
		return err
	}
	w.stepOut = true
	w.j.sm.StepMarkers.Inc()
	return nil
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
	if w.rb != nil || pos < 0 || !w.op.Runnable() || w.ctx.Err() != nil || w.byInput {
		// (Stepped by input: finishing now would step by time; the next
		// owner re-reads from the last quiet position.)
		return
	}
	if !w.out.Silent(pos) && w.out.Positioned() {
		// Never left by this worker (an unchunked router drains every
		// input's work): an earlier run's, finished by the next batch.
		return
	}
	w.busySince.Store(time.Now().UnixNano())
	defer w.busySince.Store(0)
	w.status.set(phaseStopping)
	b := w.newBatch()
	defer b.close()
	err := b.drain()
	if err == nil {
		err = b.commit(pos)
	}
	if err != nil {
		w.j.log.Warn("finishing the work in progress before stopping", "partition", w.p, "err", err)
	}
}

// opOut is the operator's Out for work at position pos, emitting into
// emit: Quiet below forwardFrom (an earlier owner sent its records).
func (w *worker) opOut(emit keyed.Emit, pos int64) keyedlog.Out {
	return keyedlog.Out{Emit: emit, Send: w.fwd, Next: w.fwd.Next(), Quiet: pos < w.forwardFrom, Reject: w.reject}
}

// busyFor reports how long the worker has been in its batch in progress (0
// when idle).
func (w *worker) busyFor(now time.Time) time.Duration {
	if b := w.busySince.Load(); b != 0 {
		return now.Sub(time.Unix(0, b))
	}
	return 0
}

// catchUpIdle ends a join partition's row-by-row catch-up that has received
// no input for this long and has none left to read below its target
// (moreBelow; bulk rebuilds end at rebuildIdle, or rebuildStartIdle).
const catchUpIdle = 2 * time.Second

// endQueryTimeout bounds moreBelow's question to the brokers.
const endQueryTimeout = 10 * time.Second

// moreBelow reports whether the partition's log has records this worker
// can read at or after next and below to: whether the brokers' last stable
// offset (what read_committed fetches reach; every record below a
// committed offset was read by its committer, so none below one is in an
// open transaction) lies beyond next and next is not below the log's
// start. When the brokers cannot say (an error, a timeout), it reports
// true: the wait goes on. Worker goroutine; it blocks for up to
// endQueryTimeout.
func (w *worker) moreBelow(next, to int64) bool {
	if next >= to {
		return false
	}
	ctx, cancel := context.WithTimeout(w.ctx, endQueryTimeout)
	defer cancel()
	starts, err := w.j.adm.ListStartOffsets(ctx, w.j.topic)
	var ends kadm.ListedOffsets
	if err == nil {
		ends, err = w.j.adm.ListCommittedOffsets(ctx, w.j.topic)
	}
	start, sok := starts.Lookup(w.j.topic, w.p)
	end, eok := ends.Lookup(w.j.topic, w.p)
	switch {
	case err == nil && (!sok || !eok):
		err = errors.New("partition not listed")
	case err == nil && start.Err != nil:
		err = start.Err
	case err == nil && end.Err != nil:
		err = end.Err
	}
	if err != nil {
		w.j.log.Debug("idle below the committed position: the log's end unknown; waiting on", "partition", w.p, "position", next, "target", to, "err", err)
		return true
	}
	more := end.Offset > max(next, start.Offset)
	if more {
		w.j.log.Debug("idle below the committed position with records to read; waiting on", "partition", w.p, "position", next, "target", to, "log_start", start.Offset, "stable_end", end.Offset)
	}
	return more
}

// joinCatchUp is a worker's catch-up in progress (worker goroutine only).
type joinCatchUp struct {
	mode    string // rebuild | catch-up
	target  int64
	began   time.Time
	records int
}

// beginCatchUp decides, once the worker's sink is open (its emit-from
// position final), whether the partition must catch up before it is ready.
func (w *worker) beginCatchUp() {
	target, pos := w.out.EmitFrom(), w.pos.Load()
	w.cuTarget.Store(target)
	if target <= 0 || pos >= target {
		if w.fromSnap { // caught up by the snapshot alone
			d := time.Since(w.began)
			w.j.m.CatchUpSeconds.WithLabelValues(w.j.label(), "snapshot").Observe(d.Seconds())
			w.j.log.Info("partition caught up", "partition", w.p, "mode", "snapshot", "records", 0, "seconds", d.Seconds(), "position", pos, "committed", target)
		}
		w.caught.Store(true)
		return
	}
	w.cu = joinCatchUp{mode: "catch-up", target: target, began: w.began}
	switch {
	case w.fromSnap:
		w.cu.mode = "snapshot"
	case !w.hasState:
		w.cu.mode = "rebuild"
	}
}

// countCatchUp counts the input records below the catch-up target.
func (w *worker) countCatchUp(recs []*kgo.Record) {
	if w.caught.Load() {
		return
	}
	for _, r := range recs {
		if r.Offset < w.cu.target && !r.Attrs.IsControl() {
			w.cu.records++
		}
	}
}

// checkCatchUp ends the catch-up once the durable position reached its
// target, or when idle (no input for catchUpIdle) with nothing left to
// read below the target (moreBelow: the keyed topic recreated shorter, or
// its records there deleted). An idle wait with records still to read
// below the target (a slow first fetch under load, a rebalance) goes on:
// the partition is not ready before its state is current.
func (w *worker) checkCatchUp(idle bool) {
	if h := w.j.hooks.caughtUp; h != nil && !w.probed && w.cu.target > 0 && w.pos.Load() >= w.cu.target {
		w.probed = true // (tests) the state as of reaching the committed position
		h(w.j.def.n, w.p, w.store)
	}
	if w.caught.Load() || w.pos.Load() < w.cu.target && (!idle || w.moreBelow(w.pos.Load(), w.cu.target)) {
		return
	}
	d := time.Since(w.cu.began)
	w.j.m.CatchUpSeconds.WithLabelValues(w.j.label(), w.cu.mode).Observe(d.Seconds())
	w.j.m.CatchUpRecords.WithLabelValues(w.j.label(), w.cu.mode).Add(float64(w.cu.records))
	w.j.log.Info("partition caught up", "partition", w.p, "mode", w.cu.mode, "records", w.cu.records,
		"seconds", d.Seconds(), "position", w.pos.Load(), "committed", w.cu.target, "ended_idle", idle)
	if h := w.j.hooks.caught; h != nil {
		h(w.j.def.n, w.p, w.pos.Load(), w.cu.target)
	}
	w.caught.Store(true)
}

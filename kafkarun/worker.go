package kafkarun

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
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
type worker struct {
	j        *joinStage
	p        int32
	store    *joinstate.Store
	open     func(context.Context) (sink.Sink, error)
	sink     sink.Sink // set by run; read by remove after done
	buf      *sink.Buffer
	batcher  sink.Batcher    // the sink's, if it batches
	exact    sink.Positioned // the sink's, if it stores positions
	join     *keyed.Join
	emitFrom int64 // records below this offset were emitted already (by an earlier owner, or before a crash)
	clock    version.Clock

	pos  atomic.Int64 // durable next offset (state committed, sink flushed); -1: none yet
	in   chan []*kgo.Record
	stop chan struct{} // closed by requestStop
	once sync.Once     // closes stop

	ctx    context.Context // the sink's; cancelled drainTimeout after stop, and at exit
	cancel context.CancelFunc
	done   chan struct{}

	busySince atomic.Int64 // UnixNano when the batch in progress began; 0 when idle
	stats     reporter     // the sink's counters, for the scraper

	fan      int
	upserts  int
	retracts int
	input    keyed.Input

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
		w.j.fail(fmt.Errorf("cdcjoin: join partition %d: %w", w.p, err))
		return
	}
	if err := w.startRebuild(w.dir, w.hasState); err != nil {
		w.j.m.Errors.WithLabelValues("join", "worker").Inc()
		w.j.fail(fmt.Errorf("cdcjoin: join partition %d: %w", w.p, err))
		return
	}
	w.beginCatchUp()
	var recs []*kgo.Record
	for {
		if len(recs) == 0 {
			select {
			case <-w.stop:
				return
			case recs = <-w.in:
				w.countCatchUp(recs)
			case <-w.idle():
				if w.rb != nil {
					if err := w.finishRebuild(); err != nil {
						w.j.m.Errors.WithLabelValues("join", "worker").Inc()
						w.j.fail(fmt.Errorf("cdcjoin: join partition %d: %w", w.p, err))
						return
					}
				}
				w.checkCatchUp(true)
				continue
			}
		}
		var err error
		if w.rb != nil {
			if recs, err = w.rebuildRecords(recs); err != nil {
				w.j.m.Errors.WithLabelValues("join", "worker").Inc()
				w.j.fail(fmt.Errorf("cdcjoin: join partition %d: %w", w.p, err))
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
			w.j.fail(fmt.Errorf("cdcjoin: join partition %d: %w", w.p, err))
			return
		}
		w.checkCatchUp(false)
		if w.stopping() {
			return
		}
	}
}

// start opens the sink and, for a Positioned one, starts emitting where
// the delivered input ends.
func (w *worker) start() error {
	s, err := w.open(w.ctx)
	if err != nil {
		return fmt.Errorf("sink: %w", err)
	}
	w.sink = s
	w.stats.set(s)
	w.buf = sink.NewBuffer(s, writeChunk)
	w.batcher, _ = s.(sink.Batcher)
	w.exact, _ = s.(sink.Positioned)
	if w.exact == nil {
		return nil
	}
	d, err := w.exact.Delivered(w.ctx)
	if err != nil {
		return fmt.Errorf("sink: %w", err)
	}
	if d.Pos > max(w.pos.Load(), 0) {
		// The sink got a batch whose state commit was lost (a crash
		// between the two), or the state is rebuilt here.
		w.j.log.Info("the sink holds this partition's output beyond the local state; applying the records below its position without emitting them again",
			"partition", w.p, "delivered", d.Pos, "complete", d.Complete, "chunks", d.Chunks, "local", w.pos.Load(), "committed", w.emitFrom)
	}
	w.emitFrom = max(w.emitFrom, d.Pos)
	return nil
}

const writeChunk = 1024

// batch runs one batch starting with recs and returns the records received
// but not applied (when the batch ended in the middle of a delivery).
func (w *worker) batch(recs []*kgo.Record) ([]*kgo.Record, error) {
	ctx := w.ctx
	began := time.Now()
	w.busySince.Store(began.UnixNano())
	defer w.busySince.Store(0)
	start := w.pos.Load() // the batch's first position; -1: the first record's
	next := start
	t := w.store.Begin()
	defer t.Abort()
	clock := w.clock // committed with the batch, or dropped with it
	defer w.buf.Discard()
	bufEmit := w.buf.Emitter(ctx)
	emit := func(c *row.Change) error {
		w.fan++
		if c.Op == row.Upsert {
			w.upserts++
		} else {
			w.retracts++
		}
		return bufEmit(c)
	}
	w.upserts, w.retracts = 0, 0
	applied, rebuilt := 0, 0
	writing := false // records at or above emitFrom were applied: the sink has (or may have) this batch's changes
	var maxDelay <-chan time.Time
	if w.batcher != nil {
		tm := time.NewTimer(w.batcher.MaxDelay())
		defer tm.Stop()
		maxDelay = tm.C
	}
	var rest []*kgo.Record
apply:
	for {
		for i, r := range recs {
			if next >= 0 && r.Offset < next {
				continue // already applied (redelivered after a rewind)
			}
			if r.Offset >= w.emitFrom && start < w.emitFrom {
				// The first record to emit: a batch that applied records
				// below emitFrom ends there; the next begins at emitFrom.
				if applied > 0 {
					next, rest = w.emitFrom, recs[i:]
					break apply
				}
				start, next = w.emitFrom, w.emitFrom
			}
			if start < 0 {
				start = r.Offset
			}
			if r.Offset >= w.emitFrom && !writing {
				writing = true
				if w.exact != nil {
					if err := w.exact.Begin(start); err != nil {
						return nil, fmt.Errorf("sink: %w", err)
					}
				}
			}
			if err := w.apply(t, &clock, r, emit, &rebuilt); err != nil {
				return nil, err
			}
			next = r.Offset + 1
			applied++
			if writing && w.batcher != nil {
				// The sink sees every change at once, so that Full and
				// Replaying (which count its rows) are current.
				if err := w.buf.Write(ctx); err != nil {
					return nil, fmt.Errorf("sink: %w", err)
				}
				if w.batcher.Full() && !w.replaying() {
					rest = recs[i+1:]
					break apply
				}
			}
		}
		recs = nil
		if w.batcher == nil || w.stopping() && !w.replaying() {
			break
		}
		select {
		case recs = <-w.in:
		case <-maxDelay:
			if !w.replaying() {
				break apply
			}
			maxDelay = nil // a replayed batch goes on to what landed of it
		case <-w.stop:
			if w.replaying() {
				return nil, errAbandoned
			}
			break apply
		}
	}
	w.j.log.Debug("batch end", "partition", w.p, "start", start, "next", next, "applied", applied, "writing", writing, "rest", len(rest), "pos", w.pos.Load())
	if next < 0 || next <= w.pos.Load() {
		return rest, nil // nothing new
	}
	if err := t.SetPosition(w.j.topic, w.p, next); err != nil {
		return nil, err
	}
	cb, _ := clock.MarshalBinary()
	if err := t.SetMeta(metaClock, cb); err != nil {
		return nil, err
	}
	flushStart := time.Now()
	var err error
	if writing && w.exact != nil {
		if err = w.buf.Write(ctx); err == nil {
			err = w.exact.End(ctx, next)
		}
	} else {
		_, err = w.buf.Flush(ctx)
	}
	if err != nil {
		w.j.m.Errors.WithLabelValues("join", "sink").Inc()
		return nil, fmt.Errorf("sink: %w", err)
	}
	if n := w.upserts + w.retracts; n > 0 {
		w.j.m.SinkFlushSeconds.Observe(time.Since(flushStart).Seconds())
		w.j.m.SinkBatchChanges.Observe(float64(n))
		w.j.m.Changes.WithLabelValues(row.Upsert.String()).Add(float64(w.upserts))
		w.j.m.Changes.WithLabelValues(row.Retract.String()).Add(float64(w.retracts))
	}
	if err := t.Commit(); err != nil {
		return nil, err
	}
	w.clock = clock
	w.pos.Store(next)
	if rebuilt > 0 {
		w.j.m.StateRebuilt.Add(float64(rebuilt))
	}
	return rest, nil
}

// replaying reports whether the batch in progress re-creates one that was
// cut short and must go on past what landed of it.
func (w *worker) replaying() bool { return w.exact != nil && w.exact.Replaying() }

// apply applies one keyed record to t, emitting its changes unless the
// record lies below emitFrom.
func (w *worker) apply(t *joinstate.Txn, clock *version.Clock, r *kgo.Record, emit func(*row.Change) error, rebuilt *int) error {
	if r.Attrs.IsControl() {
		return nil // a transaction marker: only the position moves past it
	}
	if err := w.j.spec.DecodeRecord(r.Key, r.Value, &w.input); err != nil {
		return fmt.Errorf("keyed record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	if w.input.Kind == keyed.EpochMarker {
		clock.Raise(r.Offset, w.input.Epoch)
		return nil
	}
	w.fan = 0
	e := emit
	if r.Offset < w.emitFrom {
		e = discard
		*rebuilt++
	}
	if err := w.join.Apply(t, &w.input, clock.At(r.Offset), e); err != nil {
		return err
	}
	if r.Offset >= w.emitFrom {
		w.j.m.FanOut.Observe(float64(w.fan))
	}
	return nil
}

func discard(*row.Change) error { return nil }

// busyFor reports how long the worker has been in its batch in progress (0
// when idle).
func (w *worker) busyFor(now time.Time) time.Duration {
	if b := w.busySince.Load(); b != 0 {
		return now.Sub(time.Unix(0, b))
	}
	return 0
}

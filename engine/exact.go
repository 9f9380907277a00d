package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// Exactly-once output to a sink.Positioned (the changelog ClickHouse sink
// with delivery markers).
//
// A changelog row inserted twice counts twice, and the engine flushes a
// batch's changes before it commits the batch: a crash in between (or a
// kill -9 that loses the newest unsynced commits) would make a resumed run
// insert them again. With Options.Sink a sink.Positioned, the engine's
// positions are its batches: the state counts the batches it committed
// (metaBatches), and every batch that emits is bracketed with
// Begin(b)/End(b+1), b being the batch's number. On the first Apply or
// Commit the engine asks the sink what it holds (Delivered): batches below
// that position are applied without emitting (their changes are in the
// table already), the batch at it is re-created (the sink drops the
// INSERTs of it that landed before). This needs the resumed run to cut the
// same batches from the same input, which it does with the same input file,
// the same state.batch_events and the same configuration: a run that would
// end a re-created batch at another place (shorter input) fails with an
// error instead of double-counting.
//
// The sink names the state's output by a stream id created with the state
// and made durable before anything is emitted (metaStream): a new state
// starts a new stream, whose positions start over.

const (
	metaBatches = "batches" // uint64: batches committed (the Positioned sink's position)
	metaStream  = "stream"  // the state's stream name for delivery markers
)

// exactOut is the engine's side of a Positioned sink.
type exactOut struct {
	p        sink.Positioned
	started  bool  // Delivered was read
	emitFrom int64 // batches below this were delivered: applied without emitting
	began    bool  // Begin was called for the batch in progress
}

// Stream returns the name under which the state's output is delivered to
// a Positioned sink ("" when the sink is not one). It is stable for the
// life of the state.
func (e *Engine) Stream() string { return e.stream }

// Batches returns the number of batches committed to the state (the
// position of a Positioned sink).
func (e *Engine) Batches() int64 { return e.batches }

// loadExact reads the batch count and stream of the state; with a
// Positioned sink, a state without a stream gets one, durably.
func (e *Engine) loadExact() error {
	b, err := e.store.Meta(metaBatches)
	if err != nil {
		return err
	}
	if len(b) == 8 {
		e.batches = int64(binary.BigEndian.Uint64(b))
	}
	s, err := e.store.Meta(metaStream)
	if err != nil {
		return err
	}
	e.stream = string(s)
	p, ok := e.opts.Sink.(sink.Positioned)
	if !ok {
		return nil
	}
	e.ex = &exactOut{p: p}
	if e.stream != "" {
		return nil
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return fmt.Errorf("cdcjoin: state: stream id: %w", err)
	}
	stream := "replay-" + hex.EncodeToString(id[:])
	t := e.store.Begin()
	if err := t.SetMeta(metaStream, []byte(stream)); err != nil {
		t.Abort()
		return err
	}
	if err := t.Commit(); err != nil {
		return err
	}
	// Durable before the first INSERT names it, whatever state.sync says.
	if err := e.store.SyncWAL(); err != nil {
		return err
	}
	e.stream = stream
	return nil
}

// Start asks a Positioned sink what it holds of the state's output (see
// above); Apply and Commit do it too when it was not done. Drivers call it
// to report, before processing, the batches a crash left delivered but
// uncommitted (Stats.BatchesDelivered). Without a Positioned sink it does
// nothing.
func (e *Engine) Start(ctx context.Context) error {
	if e.ex == nil || e.ex.started {
		return nil
	}
	return e.startExact(ctx)
}

// startExact reads what the Positioned sink holds of this state's output.
func (e *Engine) startExact(ctx context.Context) error {
	d, err := e.ex.p.Delivered(ctx)
	if err != nil {
		return fmt.Errorf("cdcjoin: sink: %w", err)
	}
	// A batch whose last rows were cut into an INSERT of their own at its
	// very end looks cut short (Complete false) although it was whole;
	// when the state has committed past it, that is all it is.
	e.ex.started, e.ex.emitFrom = true, d.Pos
	if d.Pos > e.batches {
		e.stats.BatchesDelivered = uint64(d.Pos - e.batches)
	}
	return nil
}

// emitter returns the function the join emits the batch in progress
// through: the buffer, behind Begin for a Positioned sink, or nothing
// for a batch the sink holds already.
func (e *Engine) emitter(ctx context.Context) func(*row.Change) error {
	x := e.ex
	if x == nil || x.began {
		return e.buf.Emitter(ctx)
	}
	if e.batches < x.emitFrom {
		return discard
	}
	emit := e.buf.Emitter(ctx)
	return func(c *row.Change) error {
		if !x.began {
			if err := x.p.Begin(e.batches); err != nil {
				return fmt.Errorf("cdcjoin: sink: %w", err)
			}
			x.began = true
		}
		return emit(c)
	}
}

func discard(*row.Change) error { return nil }

// flush delivers the batch in progress: Flush, or for a Positioned sink
// End at the batch's end position.
func (e *Engine) flush(ctx context.Context) error {
	x := e.ex
	if x == nil || !x.began {
		if _, err := e.buf.Flush(ctx); err != nil {
			return fmt.Errorf("cdcjoin: flush changes: %w", err)
		}
		return nil
	}
	if err := e.buf.Write(ctx); err != nil {
		return fmt.Errorf("cdcjoin: flush changes: %w", err)
	}
	if x.p.Replaying() {
		return errReplayShort
	}
	if err := x.p.End(ctx, e.batches+1); err != nil {
		return fmt.Errorf("cdcjoin: flush changes: %w", err)
	}
	x.began = false
	return nil
}

var errReplayShort = errors.New("cdcjoin: the batch being re-created after a crash ends before the part of it that reached ClickHouse: resume with the same input and configuration (state.batch_events) as the run that wrote it")

// batchMeta is the committed batch count after the batch in progress.
func (e *Engine) batchMeta() []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(e.batches+1))
}

package driver

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/cdcjoin/cdcjoin/internal/cerr"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// Output is a driven partition's sink side: the buffer its operator's
// changes go into (copied, and written to the sink in chunks, so that a
// fan-out of millions streams), and the driver's side of a sink.Batcher
// and of a sink.Positioned. Positions are the driver's own (a keyed
// partition's offsets in `run`, the engine's batch count in `replay`).
//
// The driver's side of a sink.Positioned, in full:
//   - Delivered, once, before anything is written: the partition's input
//     below that position reached the sink before (a crash between the
//     sink's End and the state's commit, or an earlier owner): the driver
//     applies it without emitting (Silent: its Emit is Discard), so that
//     it is not inserted twice.
//   - Every batch that writes is bracketed: Begin(from) before its first
//     change (EmitterFrom does it at the first change), End(to) instead of
//     Flush (Deliver); a batch being re-created after a crash must not end
//     while the sink says it has not reached what landed of it
//     (Replaying).
//   - A batch re-created after a crash must emit the same changes in the
//     same order: the driver's operator does an input's work at once, or
//     in steps counted in inputs (Positioned: no chunking by time).
//
// Not safe for concurrent use.
type Output struct {
	buf      *sink.Buffer
	batcher  sink.Batcher
	pos      sink.Positioned
	asked    bool
	emitFrom int64
	began    bool
}

// NewOutput returns the output to s (nil: changes are counted and dropped)
// in chunks of chunk changes (0: sink.DefaultChunk).
func NewOutput(s sink.Sink, chunk int) *Output {
	o := &Output{buf: sink.NewBuffer(s, chunk)}
	o.batcher, _ = s.(sink.Batcher)
	o.pos, _ = s.(sink.Positioned)
	return o
}

// Positioned reports whether the sink stores delivered positions with the
// data (see the type doc): the driver must then make its batches a
// function of its input.
func (o *Output) Positioned() bool { return o.pos != nil }

// Batcher reports whether the sink writes best in large batches: the
// driver keeps a batch open until Full or MaxDelay.
func (o *Output) Batcher() bool { return o.batcher != nil }

// Delivered asks a Positioned sink what it holds of the partition's
// output, once (later calls answer the first answer), and raises the
// emit-from position to it. Without a Positioned sink it reports nothing
// delivered.
func (o *Output) Delivered(ctx context.Context) (sink.Delivery, error) {
	if o.pos == nil {
		return sink.Delivery{}, nil
	}
	if o.asked {
		return sink.Delivery{Pos: o.emitFrom, Complete: true}, nil
	}
	d, err := o.pos.Delivered(ctx)
	if err != nil {
		return d, &SinkError{err}
	}
	o.asked = true
	o.RaiseEmitFrom(d.Pos)
	return d, nil
}

// Asked reports whether Delivered has been asked (or there is nothing to
// ask).
func (o *Output) Asked() bool { return o.pos == nil || o.asked }

// RaiseEmitFrom raises the position below which the partition's output is
// in the sink already (an earlier owner's committed offset, or what a
// Positioned sink holds).
func (o *Output) RaiseEmitFrom(pos int64) { o.emitFrom = max(o.emitFrom, pos) }

// EmitFrom returns the position below which input is applied without
// emitting.
func (o *Output) EmitFrom() int64 { return o.emitFrom }

// Silent reports whether input at pos is applied without emitting: the
// sink has its changes.
func (o *Output) Silent(pos int64) bool { return pos < o.emitFrom }

// Emitter returns the Emit of the batch in progress: each change is
// copied into the buffer. For a Positioned sink the driver calls Begin
// before the batch's first change (or uses EmitterFrom).
func (o *Output) Emitter(ctx context.Context) keyed.Emit { return o.buf.Emitter(ctx) }

// EmitterFrom is Emitter for a batch that begins at position from: for a
// Positioned sink its first change begins the batch (Begin).
func (o *Output) EmitterFrom(ctx context.Context, from int64) keyed.Emit {
	if o.pos == nil {
		return o.buf.Emitter(ctx)
	}
	return func(c *row.Change) error {
		if !o.began {
			if err := o.Begin(from); err != nil {
				return err
			}
		}
		return o.buf.Add(ctx, c)
	}
}

// Begin begins the batch at position from for a Positioned sink (once per
// batch); without one it does nothing.
func (o *Output) Begin(from int64) error {
	if o.pos == nil || o.began {
		return nil
	}
	if err := o.pos.Begin(from); err != nil {
		return &SinkError{err}
	}
	o.began = true
	return nil
}

// Write hands the buffered changes to the sink, so that Full and Replaying
// count them.
func (o *Output) Write(ctx context.Context) error {
	if err := o.buf.Write(ctx); err != nil {
		return &SinkError{err}
	}
	return nil
}

// Full reports that a Batcher's batch is full.
func (o *Output) Full() bool { return o.batcher != nil && o.batcher.Full() }

// MaxDelay is how long a Batcher's batch may stay open (0 without one).
func (o *Output) MaxDelay() time.Duration {
	if o.batcher == nil {
		return 0
	}
	return o.batcher.MaxDelay()
}

// Replaying reports that the batch in progress re-creates one that was cut
// short and has not reached what landed of it: it must not end yet.
func (o *Output) Replaying() bool { return o.pos != nil && o.pos.Replaying() }

// Began reports whether the batch in progress began at a Positioned sink.
func (o *Output) Began() bool { return o.began }

// Deliver makes the batch's changes durable (Commit's step 2): Flush, or
// for a Positioned sink the batch began, End at position to — refused
// with ErrReplayShort while the batch has not reached what landed of it.
func (o *Output) Deliver(ctx context.Context, to int64) error {
	if !o.began {
		if _, err := o.buf.Flush(ctx); err != nil {
			return &SinkError{err}
		}
		return nil
	}
	if err := o.Write(ctx); err != nil {
		return err
	}
	if o.pos.Replaying() {
		return ErrReplayShort
	}
	if err := o.pos.End(ctx, to); err != nil {
		return &SinkError{err}
	}
	o.began = false
	return nil
}

// Discard drops what was not written to the sink (a failed or abandoned
// batch; what was written is the sink's to drop on Close).
func (o *Output) Discard() { o.buf.Discard() }

// SinkError is an error of the sink: "sink: …" (Output's, and so
// Commit's step 2).
type SinkError struct{ Err error }

func (e *SinkError) Error() string { return "sink: " + strings.TrimPrefix(e.Err.Error(), cerr.Prefix) }
func (e *SinkError) Unwrap() error { return e.Err }

// IsSinkError reports whether err is (or wraps) a SinkError.
func IsSinkError(err error) bool {
	var se *SinkError
	return errors.As(err, &se)
}

// ErrReplayShort is Deliver's error for a batch re-created after a crash
// that ends before the part of it that reached the sink.
var ErrReplayShort = errors.New("cdcjoin: the batch being re-created after a crash ends before the part of it that reached ClickHouse: resume with the same input and configuration (state.batch_events) as the run that wrote it")

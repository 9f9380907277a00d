package sink

import (
	"context"
	"time"
)

// Batcher is implemented by sinks that write best in large batches (a
// ClickHouse INSERT per batch: many small ones make many small parts). A
// driver that can hold its flush, and so its state commit, open keeps
// writing until Full reports true or MaxDelay has passed since the first
// change written after the last flush, then flushes. Full and MaxDelay are
// safe to call between Writes.
type Batcher interface {
	// Full reports that the changes written since the last flush make a
	// batch of the configured size.
	Full() bool
	// MaxDelay bounds how long a change may wait for its batch to fill.
	MaxDelay() time.Duration
}

// Positioned is implemented by sinks that deliver each change exactly once
// although the driver replays input after a crash: they store, atomically
// with the data, which input positions the data came from, and drop what
// landed before when the same input is replayed. A position is a driver's
// count of its input (a keyed partition's offset, a replay's input count);
// positions only grow.
//
// The driver brackets every batch: Begin(from) before the batch's first
// Write, where from is the position of its first input, then End(ctx, to)
// instead of Flush, where to is the position after its last input, and
// commits its own state (with position to) only after End returned nil.
// Input below Delivered's position must not be written again: a driver
// applies it without writing.
type Positioned interface {
	Sink
	// Delivered reports what the destination holds of this sink's input.
	Delivered(ctx context.Context) (Delivery, error)
	// Begin starts a batch at position from.
	Begin(from int64) error
	// Replaying reports that the batch in progress re-creates a batch that
	// was cut short and has not yet passed what landed of it: the driver
	// must not end the batch (End) while it reports true.
	Replaying() bool
	// End writes the rest of the batch, marks it complete up to position
	// to, and blocks until the destination accepted all of it (Flush).
	End(ctx context.Context, to int64) error
}

// Delivery is what a Positioned sink's destination holds of its input.
type Delivery struct {
	// Complete: every batch below Pos was delivered whole (Pos 0: nothing
	// was delivered). Otherwise the batch that began at Pos was cut short
	// after Chunks of its writes landed; everything below Pos was
	// delivered.
	Pos      int64
	Complete bool
	Chunks   int
}

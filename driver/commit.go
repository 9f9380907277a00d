package driver

import (
	"context"
)

// Committer is a batch's state writes: a joinstate.Txn, or a
// joinstate.Load (a bulk load, ingested in one step).
type Committer interface {
	MetaWriter
	SetPosition(topic string, partition int32, next int64) error
	Commit() error
}

// Batch is what Commit makes durable besides the state writes.
type Batch struct {
	// Write puts the batch's input positions and metadata (the clock
	// first of all) into the state writes: step 1.
	Write func(c Committer) error
	// Out delivers the batch's changes (step 2) up to position To (a
	// Positioned sink's End); nil for a batch without output (a rebuild).
	Out *Output
	To  int64
	// AfterEnd, if set, runs once the sink holds the batch and before the
	// state commits (step 3): the records the batch wrote to the keyed
	// log (the forwarding transaction), which other partitions read.
	AfterEnd func(ctx context.Context) error
}

// Commit ends a batch: the one place that states the order in which a
// driven partition makes a batch durable, which is what makes every effect
// happen exactly once (or, where it can happen twice, identically):
//
//  1. the batch's positions and metadata go into its state writes c, not
//     yet committed;
//  2. the sink accepts the batch's changes durably (Output.Deliver: Flush,
//     or End for a Positioned sink that stores the positions with them);
//  3. AfterEnd commits what the batch sent to other partitions;
//  4. c commits: state, positions and metadata in one atomic write.
//
// A crash before 4 replays the batch from the last commit with the same
// versions: the sink absorbs a repeated delivery (upserts by version, a
// Positioned sink by its markers), other partitions drop repeated
// forwards. A failure leaves c uncommitted (the caller aborts it).
func Commit(ctx context.Context, c Committer, b Batch) error {
	if err := b.Write(c); err != nil {
		return err
	}
	if b.Out != nil {
		if err := b.Out.Deliver(ctx, b.To); err != nil {
			return err
		}
	}
	if b.AfterEnd != nil {
		if err := b.AfterEnd(ctx); err != nil {
			return err
		}
	}
	return c.Commit()
}

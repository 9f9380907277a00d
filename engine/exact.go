package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/internal/cerr"
)

// Exactly-once output to a sink.Positioned (the changelog ClickHouse sink
// with delivery markers).
//
// A changelog row inserted twice counts twice, and the engine flushes a
// batch's changes before it commits the batch: a crash in between (or a
// kill -9 that loses the newest unsynced commits) would make a resumed run
// insert them again. With Options.Sink a sink.Positioned, the engine's
// positions are its batches: the state counts the batches it committed
// (driver.MetaBatches), and every batch that emits is bracketed with
// Begin(b)/End(b+1), b being the batch's number (driver.Output). On the
// first Apply or Commit the engine asks the sink what it holds
// (Delivered): batches below that position are applied without emitting
// (their changes are in the table already), the batch at it is re-created
// (the sink drops the INSERTs of it that landed before). This needs the
// resumed run to cut the same batches from the same input, which it does
// with the same input file, the same state.batch_events and the same
// configuration: a run that would end a re-created batch at another place
// (shorter input) fails with an error instead of double-counting
// (driver.ErrReplayShort).
//
// The sink names the state's output by a stream id created with the state
// and made durable before anything is emitted (driver.MetaStream): a new
// state starts a new stream, whose positions start over.

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
	var err error
	if e.batches, _, err = driver.MetaBatches.Get(e.store); err != nil {
		return err
	}
	if e.stream, _, err = driver.MetaStream.Get(e.store); err != nil {
		return err
	}
	if !e.out.Positioned() || e.stream != "" {
		return nil
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return cerr.Wrap(err, "state: stream id")
	}
	stream := "replay-" + hex.EncodeToString(id[:])
	t := e.store.Begin()
	if err := driver.MetaStream.Put(t, stream); err != nil {
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
	if e.out.Asked() {
		return nil
	}
	// A batch whose last rows were cut into an INSERT of their own at its
	// very end looks cut short (Complete false) although it was whole;
	// when the state has committed past it, that is all it is.
	d, err := e.out.Delivered(ctx)
	if err != nil {
		return cerr.Wrap(err, "replay")
	}
	if d.Pos > e.batches {
		e.stats.BatchesDelivered = uint64(d.Pos - e.batches)
	}
	return nil
}

package driver

import (
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
)

// Operator is one stage of a join plan as a driver runs it over one
// partition (see the package doc for the whole contract). The regular
// join implements it twice: skew.Fair (the engine: one state, fair
// fan-out) and skew.Router (run: a keyed partition with hot-key salting).
type Operator interface {
	// Load reads what the operator keeps in memory from the committed
	// state: after it is made, and after every aborted batch (its memory
	// follows the state, never the other way round).
	Load(t keyed.State) error
	// Step applies one message of the partition's log, in log order, with
	// m.Pos and m.Version set by the driver; never an epoch marker (the
	// driver's clock takes those). It reads and writes only t, emits only
	// through out.Emit and writes to the log only through out.Send; work
	// it cannot finish within its own step budget it leaves in t for
	// Advance (Busy).
	Step(t keyed.State, m *keyedlog.Msg, out keyedlog.Out) error
	// Busy reports work in progress: left by Step (a fan-out done in
	// chunks, a move, a cooling waiting for confirmations, the inputs
	// waiting behind them), kept in the state so that it survives a
	// restart. A partition with work in progress is at no quiet position
	// (a position a later owner may start emitting at: see
	// kafkarun's joinStage.commit).
	Busy() bool
	// Runnable reports whether Advance can make progress now: Busy, but
	// for work that waits for messages still to come.
	Runnable() bool
	// Advance does up to about budget units (rows or records) of the
	// runnable work, budget < 0 all of it, and returns the units it used.
	// When it runs, and how much, is the driver's policy (Pacer, Drain).
	Advance(t keyed.State, budget int, out keyedlog.Out) (int, error)
}

// Drain does all the runnable work of op.
func Drain(op Operator, t keyed.State, out keyedlog.Out) error {
	if !op.Runnable() {
		return nil
	}
	_, err := op.Advance(t, -1, out)
	return err
}

// Discard is an Emit that drops every change: what a driver emits into
// below its emit-from position (Output.Silent), where the sink holds the
// changes already.
func Discard(*row.Change) error { return nil }

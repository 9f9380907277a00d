package skew

import (
	"time"

	"github.com/cdcjoin/cdcjoin/keyed"
)

// Fair applies keyed inputs to a join fairly: a parent's fan-out emits at
// most Chunk rows at once, the rest is done Chunk rows per Step between
// other inputs, and the key's later inputs wait behind it (per-key order,
// kept in the state). Truncates wait for every fan-out to finish. This is
// the engine's (single state, single goroutine) fair fan-out; the Kafka
// runtime drives a Scheduler through a Router instead.
//
// Versions: an input keeps the version it was given when it arrived, also
// when it waits; per join key, inputs apply in arrival order, so per output
// row key versions still increase (an output row belongs to one join key).
// Not safe for concurrent use.
type Fair struct {
	Join  *keyed.Join
	Chunk int // rows per step; <= 0: no chunking (every input at once)
	// Pacer shares the time between inputs and fan-outs (Pace).
	Pacer Pacer
	sched *Scheduler
	op    Op
}

// NewFair returns a fair applier over join with the given chunk size.
func NewFair(join *keyed.Join, chunk int) *Fair {
	f := &Fair{Join: join, Chunk: chunk, Pacer: Pacer{Now: time.Now}}
	f.sched = NewScheduler(&JoinExecutor{Join: join})
	return f
}

// Load reads the fan-outs in progress committed in t (after a restart).
func (f *Fair) Load(t keyed.State) error { return f.sched.Load(t) }

// Chunked returns the number of fan-outs that did not fit one chunk, and
// Waited the number of inputs that waited behind one (since NewFair).
func (f *Fair) Chunked() uint64 { return f.sched.Started }

// Waited: see Chunked.
func (f *Fair) Waited() uint64 { return f.sched.Queued }

// Busy reports whether fan-outs are in progress.
func (f *Fair) Busy() bool { return f.sched.Busy() > 0 }

// Apply applies in with version now or after its key's fan-out in progress.
func (f *Fair) Apply(t keyed.State, in *keyed.Input, version uint64, emit keyed.Emit) error {
	if f.Chunk <= 0 && f.sched.Busy() == 0 {
		return f.Join.Apply(t, in, version, emit)
	}
	if in.Kind == keyed.Truncate {
		if err := f.sched.Drain(t, emit); err != nil {
			return err
		}
		return f.Join.Apply(t, in, version, emit)
	}
	f.op = Op{Kind: OpApply, In: *in, Version: version}
	_, err := f.sched.Submit(t, in.JoinKey, &f.op, f.budget(), emit)
	return err
}

func (f *Fair) budget() int {
	if f.Chunk <= 0 {
		return -1
	}
	return f.Chunk
}

// Step advances the fan-outs in progress by up to Chunk rows.
func (f *Fair) Step(t keyed.State, emit keyed.Emit) error {
	if f.sched.Busy() == 0 {
		return nil
	}
	_, err := f.sched.Step(t, f.budget(), emit)
	return err
}

// Pace steps the fan-outs in progress for about as long as spent (the time
// the caller just spent applying inputs); see Pacer.
func (f *Fair) Pace(t keyed.State, spent time.Duration, emit keyed.Emit) error {
	if f.sched.Busy() == 0 {
		return nil
	}
	f.Pacer.Earn(spent)
	return f.Pacer.Spend(0, func() bool { return f.sched.Busy() > 0 }, func() error { return f.Step(t, emit) })
}

// StepRows advances the fan-outs in progress by about rows rows (all of
// them without chunking).
func (f *Fair) StepRows(t keyed.State, rows int, emit keyed.Emit) error {
	if f.sched.Busy() == 0 {
		return nil
	}
	if f.Chunk <= 0 {
		rows = -1
	}
	_, err := f.sched.Step(t, rows, emit)
	return err
}

// Drain finishes every fan-out in progress (and the inputs waiting for
// them).
func (f *Fair) Drain(t keyed.State, emit keyed.Emit) error {
	if f.sched.Busy() == 0 {
		return nil
	}
	return f.sched.Drain(t, emit)
}

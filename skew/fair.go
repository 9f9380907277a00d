package skew

import (
	"fmt"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
)

// Fair is the regular join as an operator of a driver without salting (the
// engine: one state, one goroutine), with fair fan-out: a parent's fan-out
// emits at most Chunk rows in Step, the rest is done in Advance between
// other inputs, and the key's later inputs wait behind it (per-key order,
// kept in the state). Truncates wait for every fan-out to finish. It takes
// only Input messages (the engine keys its input itself).
//
// Versions: an input keeps the version it was given when it arrived, also
// when it waits; per join key, inputs apply in arrival order, so per output
// row key versions still increase (an output row belongs to one join key).
// Not safe for concurrent use.
type Fair struct {
	Join  *keyed.Join
	Chunk int // rows a fan-out emits in Step; <= 0: no chunking (every input at once)
	sched *Scheduler
	op    Op
}

// NewFair returns a fair join over join with the given chunk size.
func NewFair(join *keyed.Join, chunk int) *Fair {
	return &Fair{Join: join, Chunk: chunk, sched: NewScheduler(&JoinExecutor{Join: join})}
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

// Runnable reports whether Advance can make progress: a fair join's work
// never waits for anything but its turn, so it is Busy.
func (f *Fair) Runnable() bool { return f.Busy() }

// Step applies the input m.In with m.Version, now or after its key's
// fan-out in progress.
func (f *Fair) Step(t keyed.State, m *keyedlog.Msg, out keyedlog.Out) error {
	if m.Kind != keyedlog.KindInput {
		return fmt.Errorf("cdcjoin: skew: fair join: unexpected %s message", m.Kind)
	}
	in := &m.In
	if f.Chunk <= 0 && f.sched.Busy() == 0 {
		return f.Join.Apply(t, in, m.Version, out.Emit)
	}
	if in.Kind == keyed.Truncate {
		if err := f.sched.Drain(t, out); err != nil {
			return err
		}
		return f.Join.Apply(t, in, m.Version, out.Emit)
	}
	f.op = Op{Kind: OpApply, In: *in, Version: m.Version}
	_, err := f.sched.Submit(t, in.JoinKey, &f.op, f.budget(), out)
	return err
}

func (f *Fair) budget() int {
	if f.Chunk <= 0 {
		return -1
	}
	return f.Chunk
}

// Advance advances the fan-outs in progress, round robin, by up to budget
// rows (budget < 0, or a Fair without chunking: all of them) and returns
// the rows emitted.
func (f *Fair) Advance(t keyed.State, budget int, out keyedlog.Out) (int, error) {
	if f.sched.Busy() == 0 {
		return 0, nil
	}
	if f.Chunk <= 0 {
		budget = -1
	}
	return f.sched.Step(t, budget, out)
}

package stage

import (
	"fmt"

	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/plan"
	"github.com/cdcjoin/cdcjoin/row"
)

// Pipeline runs a whole plan on one State, in one order: an event of a FROM
// item is keyed, fed to its stage, and every change a stage emits is fed
// to the next one at once (depth first), down to the output. Every stage
// input takes the next version (Apply's next), so versions strictly
// increase in processing order across the stages, and re-applying the same
// events to the same state reproduces the same changes with the same
// versions. This is `replay`'s driver core; `run` runs each stage on its
// own keyed topic instead. Not safe for concurrent use.
type Pipeline struct {
	p      *plan.Plan
	keyers []*Keyer
	joins  []*Join
	feedL  []*Feeder
	feedR  []*Feeder
	mat    *Materializer
	out    Output

	filtered []Delta // scratch per stage for Filter
	// chunk (tests), if > 0, applies every stage input through
	// Join.ApplyChunked with this budget, continued until done: the same
	// changes in the same order as Apply.
	chunk int
	kv    State
	next  func() uint64
	emit  func(*row.Change) error
}

// NewPipeline returns the pipeline of p.
func NewPipeline(p *plan.Plan) *Pipeline {
	pl := &Pipeline{p: p, out: Output{p: p}, filtered: make([]Delta, len(p.Stages)+1)}
	for t := range p.Tables {
		pl.keyers = append(pl.keyers, NewKeyer(p, t))
	}
	for i := range p.Stages {
		st := &p.Stages[i]
		pl.joins = append(pl.joins, NewJoin(st))
		pl.feedL = append(pl.feedL, NewFeeder(st, L))
		pl.feedR = append(pl.feedR, NewFeeder(st, R))
	}
	if p.Materialize {
		pl.mat = NewMaterializer(p)
	}
	return pl
}

// Plan returns the plan.
func (pl *Pipeline) Plan() *plan.Plan { return pl.p }

// RecordPartitions makes every index entry record the source partition of
// the event that wrote it (Keyer.Partitions), from SetPartition's: what a
// state handed over to `run` needs. A driver sets it for a new state, and
// for a state it resumes only if that state was built so.
func (pl *Pipeline) RecordPartitions() {
	for _, k := range pl.keyers {
		k.Partitions = true
	}
}

// SetPartition sets the source partition of the events applied next
// (recorded with RecordPartitions).
func (pl *Pipeline) SetPartition(p int32) {
	for _, k := range pl.keyers {
		k.Partition = p
	}
}

// Stats returns stage n's operator counters (1-based).
func (pl *Pipeline) Stats(n int) Stats { return pl.joins[n-1].Stats }

// Apply applies a decoded event of FROM item t (projected to the item's
// columns). next returns the version of the next stage input; emit gets
// the changes of the output (its slices are only valid during the call).
// Errors are *KeyError (a bad record), evaluation errors of the query's
// expressions (bad records too: see ExprError), the State's and emit's.
func (pl *Pipeline) Apply(kv State, t int, ev *debezium.Event, next func() uint64, emit func(*row.Change) error) error {
	pl.kv, pl.next, pl.emit = kv, next, emit
	stage, side := t, R
	if t == 0 {
		stage, side = 1, L
	}
	return pl.keyers[t].Key(kv, ev, func(d *Delta) error {
		return pl.feed(stage, side, d)
	}, func() error {
		return pl.joins[stage-1].Clear(kv, side, next(), pl.emitter(stage))
	})
}

// feed feeds d to side of stage n (1-based).
func (pl *Pipeline) feed(n int, side Side, d *Delta) error {
	f := pl.feedR[n-1]
	if side == L {
		f = pl.feedL[n-1]
	}
	j := pl.joins[n-1]
	emit := pl.emitter(n)
	return f.Feed(d, func(in *Input) error {
		if pl.chunk <= 0 {
			return j.Apply(pl.kv, side, in, pl.next(), emit)
		}
		v := pl.next()
		var c FanOut
		for {
			more, err := j.ApplyChunked(pl.kv, side, in, v, &c, pl.chunk, emit)
			if err != nil || !more {
				return err
			}
		}
	})
}

// emitter is what stage n's output goes to: its residual filter, then
// the next stage's left side, or the output.
func (pl *Pipeline) emitter(n int) Emit {
	st := &pl.p.Stages[n-1]
	var to Emit
	switch {
	case n < len(pl.p.Stages):
		to = func(d *Delta) error { return pl.feed(n+1, L, d) }
	case pl.mat != nil:
		to = func(d *Delta) error { return pl.mat.Apply(pl.kv, d, pl.next(), pl.output) }
	default:
		to = pl.output
	}
	if st.Residual == nil {
		return to
	}
	return func(d *Delta) error { return Filter(st.Residual, d, &pl.filtered[n], to) }
}

func (pl *Pipeline) output(d *Delta) error {
	c, err := pl.out.Change(d)
	if err != nil {
		return err
	}
	return pl.emit(c)
}

// ExprError is an error evaluating the query's expressions on a row (a
// type mismatch, an overflow, a division by zero): a bad record.
type ExprError struct{ Err error }

func (e *ExprError) Error() string { return "cdcjoin: query: " + e.Err.Error() }
func (e *ExprError) Unwrap() error { return e.Err }

// Output turns output rows of a plan's last stage (or materializer) into
// the select list's changes, keyed for the sinks: ParentKey is the first
// FROM item's key, ChildKey the other items' keys (NULL for padded ones).
type Output struct {
	p          *plan.Plan
	change     row.Change
	vals, prev []row.Value
	keys       []row.Value
}

// NewOutput returns p's output.
func NewOutput(p *plan.Plan) *Output { return &Output{p: p} }

// Change converts an output Delta; the Change's slices are reused.
func (o *Output) Change(d *Delta) (*row.Change, error) {
	var err error
	if o.vals, err = o.Select(o.vals, d.Row); err != nil {
		return nil, err
	}
	c := &o.change
	*c = row.Change{Op: d.Op, Version: d.Version, PrevVersion: d.PrevVersion, Values: o.vals}
	if d.Prev != nil {
		if o.prev, err = o.Select(o.prev, d.Prev); err != nil {
			return nil, err
		}
		c.Prev = o.prev
	}
	o.keys = o.Keys(o.keys, d.Row)
	w := o.p.KeyWidth[0]
	c.ParentKey, c.ChildKey = o.keys[:w:w], o.keys[w:]
	return c, nil
}

// Select evaluates the select list on an output row.
func (o *Output) Select(dst, r []row.Value) ([]row.Value, error) {
	dst = dst[:0]
	for _, s := range o.p.Select {
		v, err := s.Expr.Eval(r)
		if err != nil {
			return dst, &ExprError{fmt.Errorf("%s: %w", s.Name, err)}
		}
		dst = append(dst, v)
	}
	return dst, nil
}

// Keys returns the row key's values of an output row.
func (o *Output) Keys(dst, r []row.Value) []row.Value {
	dst = dst[:0]
	for _, i := range o.p.RowKey {
		dst = append(dst, r[i])
	}
	return dst
}

package stage

import (
	"github.com/cdcjoin/cdcjoin/expr"
	"github.com/cdcjoin/cdcjoin/plan"
	"github.com/cdcjoin/cdcjoin/row"
)

// Feeder turns the changes of a side's input stream (a table's Keyer, or
// the previous stage) into the stage's Inputs: it applies the side's
// filter, finds each row's position (join key, or Unmatchable) and
// whether it may match, and turns a change of position into a delete at
// the old one and an upsert at the new one. Not safe for concurrent use.
type Feeder struct {
	side      *plan.Side
	s         Side
	preserved bool
	in        Input
	newKey    []byte
	oldKey    []byte
}

// NewFeeder returns the feeder of side s of stage st.
func NewFeeder(st *plan.Stage, s Side) *Feeder {
	f := &Feeder{s: s}
	if s == L {
		f.side, f.preserved = &st.L, st.Kind == plan.Left || st.Kind == plan.Full
	} else {
		f.side, f.preserved = &st.R, st.Kind == plan.Right || st.Kind == plan.Full
	}
	return f
}

// position evaluates r: whether the side keeps it, where it lives (key,
// appended to dst) and whether it may match.
func (f *Feeder) position(dst []byte, r []row.Value) (key []byte, keep, matchable bool, err error) {
	if f.side.Filter != nil {
		ok, err := isTrue(f.side.Filter, r)
		if err != nil || !ok {
			return dst, false, false, err
		}
	}
	dst = dst[:0]
	null := false
	for _, i := range f.side.Key {
		v := r[i]
		if v.Kind == row.KindNull || v.Kind == row.KindUnavailable {
			null = true
			break
		}
		dst = row.AppendKey(dst, r[i:i+1])
	}
	if null {
		return append(dst[:0], Unmatchable), f.preserved, false, nil
	}
	matchable = true
	if f.side.Match != nil {
		if matchable, err = isTrue(f.side.Match, r); err != nil {
			return dst, false, false, err
		}
	}
	return dst, f.preserved || matchable, matchable, nil
}

// Feed turns d into inputs for apply (the Input is reused after apply
// returns). d.Prev, when set, must be the row the side was last fed for
// d.ID (what the Keyer, Join and Filter emit): an upsert whose previous
// row the side did not keep at the same position is marked Input.Absent.
func (f *Feeder) Feed(d *Delta, apply func(*Input) error) error {
	var err error
	var newKeep, newM, oldKeep bool
	switch d.Op {
	case row.Upsert:
		if f.newKey, newKeep, newM, err = f.position(f.newKey, d.Row); err != nil {
			return err
		}
		if d.Prev != nil {
			if f.oldKey, oldKeep, _, err = f.position(f.oldKey, d.Prev); err != nil {
				return err
			}
		}
	case row.Retract:
		if f.oldKey, oldKeep, _, err = f.position(f.oldKey, d.Row); err != nil {
			return err
		}
	}
	if oldKeep && (!newKeep || string(f.oldKey) != string(f.newKey)) {
		f.in = Input{Delete: true, Key: f.oldKey, ID: d.ID}
		if err := apply(&f.in); err != nil {
			return err
		}
	}
	if newKeep {
		// The side holds d.ID at the old position, if it kept it (d.Prev
		// is what it stored): elsewhere or nowhere, it is absent here.
		absent := !oldKeep || string(f.oldKey) != string(f.newKey)
		f.in = Input{Key: f.newKey, ID: d.ID, Row: d.Row, Matchable: newM, Absent: absent}
		return apply(&f.in)
	}
	return nil
}

// Filter applies a condition to a change stream (nil: passes everything),
// as a stateless transform: a row that stops passing is retracted, one that
// starts passing is inserted (see the package doc of plan; PrevVersion
// stays the version the values were last emitted with, and values that
// did not pass were never emitted).
func Filter(cond expr.Expr, d *Delta, scratch *Delta, emit Emit) error {
	if cond == nil {
		return emit(d)
	}
	pass := func(r []row.Value) (bool, error) { return isTrue(cond, r) }
	switch d.Op {
	case row.Upsert:
		n, err := pass(d.Row)
		if err != nil {
			return err
		}
		p := false
		if d.Prev != nil {
			if p, err = pass(d.Prev); err != nil {
				return err
			}
		}
		switch {
		case n && p:
			return emit(d)
		case n:
			*scratch = Delta{Op: row.Upsert, ID: d.ID, Row: d.Row, Version: d.Version}
			return emit(scratch)
		case p:
			*scratch = Delta{Op: row.Retract, ID: d.ID, Row: d.Prev, Version: d.Version, PrevVersion: d.PrevVersion}
			return emit(scratch)
		}
		return nil
	default:
		ok, err := pass(d.Row)
		if err != nil || !ok {
			return err
		}
		return emit(d)
	}
}

// isTrue evaluates a condition, an evaluation error as an *ExprError.
func isTrue(e expr.Expr, r []row.Value) (bool, error) {
	ok, err := expr.IsTrue(e, r)
	if err != nil {
		return false, &ExprError{err}
	}
	return ok, nil
}

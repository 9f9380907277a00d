// Package timeop runs a time join (package timejoin) as a stage operator
// of the drivers' contract (driver.Operator): its state in the Aux
// keyspace of a keyed.State (keys 'X' + timejoin's), its inputs the time
// join's messages of the keyed log (keyedlog.KindTime, KindWatermark),
// its late records reported through keyedlog.Out.Reject.
//
// Everything it does happens within Step (timers fire inside Apply), so it
// is never Busy: a replayed batch emits the same rows in the same order.
// Watermark messages carry the keying stage's knowledge of a source
// partition (its largest event time, its idleness by wall time), written
// into the log at a position, so a replay or a rebuild of the partition
// sees them at the same place (the operator reads no clock).
package timeop

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/timejoin"
)

// Operator is a time join as a driver.Operator. Not safe for concurrent
// use.
type Operator struct {
	j        *timejoin.Join
	declared []timejoin.Source
}

// New returns the operator of spec. Idleness is the driver's (watermark
// messages), never event time.
func New(spec *timejoin.Spec, memoryBytes int) *Operator {
	return &Operator{j: timejoin.New(spec, timejoin.Options{IdleByDriver: true, MemoryBytes: memoryBytes})}
}

// Join returns the operator's join (watermarks, stats: read-only use).
func (o *Operator) Join() *timejoin.Join { return o.j }

// Declare makes srcs known before they have records, now and after every
// Load (timejoin.Join.Declare): in `run` every partition of both source
// topics from the start, so that the watermark waits for a partition
// until it has records or is idle.
func (o *Operator) Declare(srcs ...timejoin.Source) {
	o.declared = append(o.declared, srcs...)
	for _, s := range srcs {
		o.j.Declare(s)
	}
}

// Load implements driver.Operator.
func (o *Operator) Load(t keyed.State) error {
	if err := o.j.Load(aux{t}); err != nil {
		return err
	}
	for _, s := range o.declared {
		o.j.Declare(s)
	}
	return nil
}

// ErrNoReject is Step's error for a late record when the driver gave it no
// Out.Reject.
var ErrNoReject = errors.New("cdcjoin: time join: a late record and the driver has no bad-record step (keyedlog.Out.Reject)")

// Step implements driver.Operator: it applies a time record or a
// watermark, and saves the watermarks with the state.
func (o *Operator) Step(t keyed.State, m *keyedlog.Msg, out keyedlog.Out) error {
	st := aux{t}
	switch m.Kind {
	case keyedlog.KindTime:
		res, err := o.j.Apply(st, &m.Time, timejoin.Emit(out.Emit))
		if err != nil {
			return err
		}
		if res.Verdict == timejoin.Late && !out.Quiet {
			if out.Reject == nil {
				return ErrNoReject
			}
			if err := out.Reject(m, "late", m.Time.Time, res.Watermark); err != nil {
				return err
			}
		}
	case keyedlog.KindWatermark:
		w := &m.Watermark
		var err error
		if w.Idle {
			err = o.j.SetIdle(st, w.Source, true, timejoin.Emit(out.Emit))
		} else {
			err = o.j.Advance(st, w.Source, w.Max, timejoin.Emit(out.Emit))
		}
		if err != nil {
			return err
		}
	default:
		return fmt.Errorf("cdcjoin: time join: a %s message in a time join's log", m.Kind)
	}
	return o.j.Save(st)
}

// Busy implements driver.Operator: never (see the package doc).
func (o *Operator) Busy() bool { return false }

// Runnable implements driver.Operator.
func (o *Operator) Runnable() bool { return false }

// Advance implements driver.Operator: there is nothing between messages.
func (o *Operator) Advance(keyed.State, int, keyedlog.Out) (int, error) { return 0, nil }

// aux is a timejoin.State in the Aux keyspace of a keyed.State.
type aux struct{ t keyed.State }

const prefix = 'X'

func (a aux) key(k []byte) []byte { return append([]byte{prefix}, k...) }

func (a aux) Get(key []byte) ([]byte, bool, error) { return a.t.Aux(a.key(key)) }
func (a aux) Put(key, value []byte) error          { return a.t.PutAux(a.key(key), value) }
func (a aux) Delete(key []byte) error              { return a.t.DeleteAux(a.key(key)) }

var errStop = errors.New("stop")

func (a aux) Scan(lo, hi []byte, fn func(key, value []byte) error) error {
	var end []byte
	if hi != nil {
		end = a.key(hi)
	}
	err := a.t.AuxScan([]byte{prefix}, a.key(lo), func(k, v []byte) error {
		if end != nil && bytes.Compare(k, end) >= 0 {
			return errStop
		}
		return fn(k[1:], v)
	})
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

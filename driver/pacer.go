package driver

import (
	"time"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
)

// Pacer shares a driver goroutine's time between the messages it steps and
// its operator's work in progress: each unit of time spent on messages
// (Earn) buys as much time for Advance (Spend, Work), so while both have
// work each gets about half, and a fan-out of millions of rows delays other
// keys' inputs by at most a factor of about two (plus one step). Time is
// the driver's (Now), never read inside an operator. The zero Pacer needs
// Now set. Not safe for concurrent use.
//
// Time-shared steps are not a function of the input: a driver whose sink
// must see a replayed batch's changes in the same order (a sink.Positioned)
// steps by input instead (a budget per message read; Advance) or drains
// (Drain after every message).
type Pacer struct {
	// Now is the clock (time.Now in production).
	Now func() time.Time
	// MaxCredit bounds the saved-up time (default 50ms), so that a long
	// run of inputs without fan-outs does not buy a long stall later.
	MaxCredit time.Duration
	credit    time.Duration
}

// Earn adds time spent on inputs.
func (p *Pacer) Earn(d time.Duration) {
	max := p.MaxCredit
	if max <= 0 {
		max = 50 * time.Millisecond
	}
	p.credit = min(p.credit+d, max)
}

// Spend runs step while there is credit and busy() holds, charging each
// step's time; a step may overdraw (the debt is paid by later inputs).
// With quantum > 0 it runs for at least quantum (idle time: no input is
// waiting). It returns step's first error.
func (p *Pacer) Spend(quantum time.Duration, busy func() bool, step func() error) error {
	start := p.Now()
	floor := start.Add(quantum)
	for busy() {
		now := p.Now()
		if p.credit <= 0 && !now.Before(floor) {
			break
		}
		if err := step(); err != nil {
			return err
		}
		d := p.Now().Sub(now)
		if now.Before(floor) {
			continue // idle quantum: free
		}
		p.credit -= d
	}
	if !busy() && p.credit > 0 {
		p.credit = 0 // no saving up while there is nothing to pay for
	}
	return nil
}

// Work advances op's runnable work in steps of budget units for as long as
// the pacer allows (at least quantum: see Spend).
func (p *Pacer) Work(op Operator, t keyed.State, budget int, quantum time.Duration, out keyedlog.Out) error {
	return p.Spend(quantum, op.Runnable, func() error {
		_, err := op.Advance(t, budget, out)
		return err
	})
}

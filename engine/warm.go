package engine

import (
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
)

// Warmer reads, ahead of Apply and on another goroutine, the state entries
// a batch of decoded records will need — a record's parent; a child's
// index entry, its record and its old and new parents — sorted by key, in
// two rounds (what a child's index entry names is read in the second), and
// hands them to the applying goroutine (Engine.Install), which puts the
// ones that are current into the row cache (joinstate.Warmer). It only
// works while that pays (joinstate.Store.WarmingPays: the state does not
// fit in the row cache; the engine checks at each commit); otherwise Warm
// does nothing. Not safe for concurrent use; one per decoding goroutine,
// closed before the Engine.
type Warmer struct {
	e      *Engine
	w      *joinstate.Warmer
	key    []byte
	fk, jk []byte
	vals   []row.Value
	idx    []int // per record of the batch: its child index entry's request, or -1
}

// NewWarmer returns a Warmer for e's state.
func (e *Engine) NewWarmer() *Warmer { return &Warmer{e: e, w: e.store.NewWarmer()} }

// Warm reads into p what recs will read (p is emptied first). It is safe
// to call concurrently with the Engine's Apply and Commit; give p to
// Install before applying recs.
func (w *Warmer) Warm(recs []Decoded, p *joinstate.Prefetch) {
	w.w.Begin(p)
	defer w.w.End()
	if w.e.spec == nil || !w.e.warm.Load() {
		return
	}
	spec := w.e.spec
	w.idx = w.idx[:0]
	for i := range recs {
		d := &recs[i]
		w.idx = append(w.idx, -1)
		if d.Err != nil || !d.ok {
			continue
		}
		ev := &d.ev
		var ok bool
		if w.key, ok = spec.EventKey(w.key[:0], d.side, ev); !ok {
			continue
		}
		if d.side == row.Parent {
			w.w.Parent(w.key)
			continue
		}
		w.idx[i] = w.w.ChildIndex(w.key)
		if ev.After.Present && ev.Op != debezium.OpDelete {
			if w.fk, ok = spec.ForeignKey(w.fk[:0], ev.After.Values); ok {
				w.w.Parent(w.fk)
			}
		}
	}
	w.w.Read()
	for i := range recs {
		if w.idx[i] < 0 {
			continue
		}
		entry, ok := p.Value(w.idx[i])
		if !ok {
			continue
		}
		_, jk, vals, err := keyed.DecodeIndexEntry(entry, w.vals)
		w.vals = vals
		if err != nil {
			continue
		}
		d := &recs[i]
		if w.key, ok = spec.EventKey(w.key[:0], d.side, &d.ev); !ok {
			continue
		}
		w.jk = append(w.jk[:0], jk...)
		w.w.Child(w.jk, w.key)
		w.w.Parent(w.jk)
	}
	w.w.Read()
}

// Close releases the Warmer.
func (w *Warmer) Close() { w.w.Close() }

// Install puts what a Warmer read into p in the row cache, where current
// (joinstate.Txn.Install). Call it on the applying goroutine, before
// applying the records p was read for.
func (e *Engine) Install(p *joinstate.Prefetch) {
	if e.txn != nil && e.warm.Load() {
		e.txn.Install(p)
	}
}

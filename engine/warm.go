package engine

import (
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
)

// Warmer reads, ahead of Apply and on another goroutine, the state entries
// a decoded record will need (its parent, or its child index entry, child
// record and parents), so that Apply finds their blocks cached. It only
// works while that pays (joinstate.Store.WarmingPays: the state does not fit
// in the row cache and is several times the block cache; the engine checks
// at each commit); otherwise Warm returns at once. Results are never used
// for the join, only to warm caches (joinstate.Warmer). Not safe for
// concurrent use; one per decoding goroutine, closed before the Engine.
type Warmer struct {
	e        *Engine
	w        *joinstate.Warmer
	key, fk  []byte
	jk       []byte
	vals     []row.Value
	disabled bool
}

// NewWarmer returns a Warmer for e's state.
func (e *Engine) NewWarmer() *Warmer { return &Warmer{e: e, w: e.store.NewWarmer()} }

// Warm warms what d will read. It is safe to call concurrently with the
// Engine's Apply and Commit.
func (w *Warmer) Warm(d *Decoded) {
	if w.e.spec == nil || !w.e.warm.Load() || d.Err != nil || !d.ok {
		return
	}
	spec := w.e.spec
	ev := &d.ev
	var ok bool
	if w.key, ok = spec.EventKey(w.key[:0], d.side, ev); !ok {
		return
	}
	if d.side == row.Parent {
		w.w.Parent(w.key)
		if ev.Op != debezium.OpCreate && ev.Op != debezium.OpRead {
			w.w.Children(w.key)
		}
		return
	}
	if entry, ok := w.w.ChildIndex(w.key); ok {
		_, jk, vals, err := keyed.DecodeIndexEntry(entry, w.vals)
		w.vals = vals
		if err == nil {
			w.jk = append(w.jk[:0], jk...)
			w.w.Child(w.jk, w.key)
			w.w.Parent(w.jk)
		}
	}
	if ev.After.Present {
		if w.fk, ok = spec.ForeignKey(w.fk[:0], ev.After.Values); ok && string(w.fk) != string(w.jk) {
			w.w.Parent(w.fk)
		}
	}
}

// Close releases the Warmer.
func (w *Warmer) Close() { w.w.Close() }

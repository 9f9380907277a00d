package joinstate

import "github.com/cockroachdb/pebble/v2"

// Warmer reads state entries ahead of the Txn that will need them, on
// another goroutine, so that their blocks are in pebble's block cache (and
// the OS page cache) when the Txn reads them: with a state much larger
// than the caches, a point read is mostly waiting for and copying a block,
// and a warmer takes that off the applying goroutine. It reads committed
// data only, bypasses the row cache, and its results are hints (they may be
// stale by the time the Txn reads): callers use them only to choose what to
// warm next. Warming never changes the state.
//
// A Warmer is used by one goroutine; any number of Warmers may run
// concurrently with the Store's Txn. Errors are ignored (a failed warm read
// only means a colder read later).
type Warmer struct {
	s   *Store
	key []byte
	val []byte
	it  *pebble.Iterator
}

// NewWarmer returns a Warmer for s. Close it before closing s.
func (s *Store) NewWarmer() *Warmer { return &Warmer{s: s} }

// WarmingPays reports whether reading ahead pays: the row cache does not
// hold the whole state, and the state on disk is more than
// warmCacheFactor times pebble's block cache, so that most point reads
// miss it and must find and copy a block (with a state mostly in the block
// cache, reading ahead only doubles the work). Call it on the Txn's
// goroutine, with no Txn open or between its calls.
func (s *Store) WarmingPays() bool {
	return !s.RowCacheHoldsAll() && s.DiskBytes() > warmCacheFactor*uint64(s.cacheBytes)
}

const warmCacheFactor = 4

// RowCacheHoldsAll reports whether the row cache holds the whole state
// (parents, children and the child index): then reads never reach pebble
// and warming cannot pay. Call it on the Txn's goroutine, with no Txn open
// or between its calls.
func (s *Store) RowCacheHoldsAll() bool {
	c := s.cache
	if c == nil {
		return false
	}
	s.mu.Lock()
	g := s.gens
	s.mu.Unlock()
	for _, p := range []byte{prefixParent, prefixChild, prefixIndex} {
		if !c.completeFor(p, g[genSlot(p)]) {
			return false
		}
	}
	return true
}

func (w *Warmer) get(prefix byte, a, b []byte) ([]byte, bool) {
	w.s.mu.Lock()
	w.key = w.s.gens.header(w.key[:0], prefix)
	w.s.mu.Unlock()
	w.key = append(append(w.key, a...), b...)
	v, closer, err := w.s.db.Get(w.key)
	if err != nil {
		return nil, false
	}
	w.val = append(w.val[:0], v...)
	closer.Close()
	return w.val, true
}

// Parent warms the parent record of joinKey.
func (w *Warmer) Parent(joinKey []byte) { w.get(prefixParent, joinKey, nil) }

// Child warms the child record (joinKey, childKey).
func (w *Warmer) Child(joinKey, childKey []byte) { w.get(prefixChild, joinKey, childKey) }

// ChildIndex warms childKey's index entry and returns it as committed (a
// hint; valid until the next call on w).
func (w *Warmer) ChildIndex(childKey []byte) ([]byte, bool) { return w.get(prefixIndex, childKey, nil) }

// Children warms the first block of joinKey's children.
func (w *Warmer) Children(joinKey []byte) {
	w.s.mu.Lock()
	w.key = w.s.gens.header(w.key[:0], prefixChild)
	w.s.mu.Unlock()
	w.key = append(w.key, joinKey...)
	opts := prefixBounds(w.key)
	if w.it == nil {
		it, err := w.s.db.NewIter(opts)
		if err != nil {
			return
		}
		w.it = it
	} else {
		w.it.SetOptions(opts)
	}
	w.it.First()
}

// Close releases the Warmer's iterator.
func (w *Warmer) Close() {
	if w.it != nil {
		w.it.Close()
		w.it = nil
	}
}

package joinstate

import (
	"bytes"
	"slices"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// Warmer reads, on another goroutine than the Txn's, the state entries a
// batch of records will need, so that the Txn finds them in the row cache:
// with a state many times the caches a point read is mostly finding,
// reading and decompressing a block, and a Warmer takes that off the
// applying goroutine instead of doing it twice. A batch's reads are
// sorted by key (neighbouring keys share blocks, and a sorted run of seeks
// moves forward through each table's index) and go to the tables only
// (the memtables are skipped, see durable.go).
//
// Results are read from the tables as of the last flush the store saw
// finish, so they are the current value only of keys not written since
// that flush: Txn.Install puts in the row cache exactly those (and only
// while the store is still in the same flush epoch), skipping every key
// the store's recent-writes filter may hold and every key the cache holds
// already. A Warmer never changes the state, and a batch read in an older
// epoch is dropped whole. Values read of other keys are still returned
// (as hints: a child's index entry tells which parent to read next).
//
// A Warmer is used by one goroutine; any number of Warmers may run
// concurrently with the Store's Txn. Errors are ignored (a failed read
// only means a read by the Txn later).
type Warmer struct {
	s    *Store
	p    *Prefetch
	it   *pebble.Iterator
	key  []byte
	ord  []int
	done []int // the batch's entries read so far, sorted by key, one per distinct key
	tmp  []int
	// seeks counts the lookups Read made (tests); noShare looks up again
	// the keys an earlier round of the batch read (negative control).
	seeks   int
	noShare bool
}

// Prefetch is one batch of entries read ahead (Warmer.Begin … Read), to be
// installed with Txn.Install. Reuse it for later batches.
type Prefetch struct {
	epoch uint64
	valid bool // read from the tables in epoch: installable
	keys  []byte
	vals  []byte
	ents  []prefetched
	read  int // ents[:read] have been read
}

type prefetched struct {
	k0, k1, v0, v1 int
	present        bool
}

// Len returns the number of entries requested.
func (p *Prefetch) Len() int { return len(p.ents) }

func (p *Prefetch) key(i int) []byte { e := &p.ents[i]; return p.keys[e.k0:e.k1] }

// Value returns entry i's value as read (a hint for what to read next; nil
// and false when absent or not read yet). Valid until the Prefetch is
// reused.
func (p *Prefetch) Value(i int) ([]byte, bool) {
	if i >= p.read || !p.ents[i].present {
		return nil, false
	}
	e := &p.ents[i]
	return p.vals[e.v0:e.v1], true
}

// NewWarmer returns a Warmer for s. Close it before closing s.
func (s *Store) NewWarmer() *Warmer { return &Warmer{s: s} }

// WarmingPays reports whether reading ahead pays: the row cache does not
// hold the whole state, so that reads reach pebble. Call it on the Txn's
// goroutine, with no Txn open or between its calls.
func (s *Store) WarmingPays() bool { return !s.RowCacheHoldsAll() && s.cache != nil }

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

// Begin starts a batch of reads into p (emptied first).
func (w *Warmer) Begin(p *Prefetch) {
	w.closeIter()
	*p = Prefetch{keys: p.keys[:0], vals: p.vals[:0], ents: p.ents[:0]}
	w.p, w.done = p, w.done[:0]
	r := w.s.recent
	p.epoch = r.epoch.Load()
	if !r.readyAt.Load() {
		return // the tables may not hold everything yet: nothing installable
	}
	// The view is taken after the epoch was read: it holds the flush that
	// began the epoch.
	it, err := w.s.db.NewIter(&pebble.IterOptions{OnlyReadGuaranteedDurable: true})
	if err != nil {
		return
	}
	w.it, p.valid = it, true
}

func (w *Warmer) add(prefix byte, a, b []byte) int {
	w.s.mu.Lock()
	w.key = w.s.gens.header(w.key[:0], prefix)
	w.s.mu.Unlock()
	p := w.p
	k0 := len(p.keys)
	p.keys = append(append(append(p.keys, w.key...), a...), b...)
	p.ents = append(p.ents, prefetched{k0: k0, k1: len(p.keys)})
	return len(p.ents) - 1
}

// Parent asks for the parent record of joinKey; it returns the entry's
// index in the Prefetch.
func (w *Warmer) Parent(joinKey []byte) int { return w.add(prefixParent, joinKey, nil) }

// Child asks for the child record (joinKey, childKey).
func (w *Warmer) Child(joinKey, childKey []byte) int { return w.add(prefixChild, joinKey, childKey) }

// ChildIndex asks for childKey's index entry.
func (w *Warmer) ChildIndex(childKey []byte) int { return w.add(prefixIndex, childKey, nil) }

// Read reads the entries asked for since the last Read, in key order. A
// key asked for more than once in a batch (Begin … End), in this round or
// an earlier one (a record's parent named by its new row and again by its
// child index entry), is looked up once: its later entries share the
// first one's result, read from the same view.
func (w *Warmer) Read() {
	p := w.p
	if w.it == nil {
		p.read = len(p.ents)
		return
	}
	w.ord = w.ord[:0]
	for i := p.read; i < len(p.ents); i++ {
		w.ord = append(w.ord, i)
	}
	slices.SortFunc(w.ord, func(a, b int) int { return bytes.Compare(p.key(a), p.key(b)) })
	same := func(i, j int) {
		p.ents[i].present, p.ents[i].v0, p.ents[i].v1 = p.ents[j].present, p.ents[j].v0, p.ents[j].v1
	}
	// ord and done are both sorted: walk them together, and merge the
	// round's first entry of each new key into done.
	w.tmp = w.tmp[:0]
	d := 0
	for n, i := range w.ord {
		k := p.key(i)
		if n > 0 && bytes.Equal(k, p.key(w.ord[n-1])) {
			same(i, w.ord[n-1])
			continue
		}
		for d < len(w.done) && bytes.Compare(p.key(w.done[d]), k) < 0 {
			w.tmp = append(w.tmp, w.done[d])
			d++
		}
		if d < len(w.done) && bytes.Equal(p.key(w.done[d]), k) && !w.noShare {
			same(i, w.done[d])
			continue
		}
		w.tmp = append(w.tmp, i)
		w.seeks++
		if !w.it.SeekPrefixGE(k) || !bytes.Equal(w.it.Key(), k) {
			if w.it.Error() != nil {
				p.valid = false
			}
			continue
		}
		v, err := w.it.ValueAndErr()
		if err != nil {
			p.valid = false
			continue
		}
		e := &p.ents[i]
		e.v0 = len(p.vals)
		p.vals = append(p.vals, v...)
		e.v1, e.present = len(p.vals), true
	}
	w.tmp = append(w.tmp, w.done[d:]...)
	w.done, w.tmp = w.tmp, w.done
	p.read = len(p.ents)
}

// End ends the batch (releases the tables the reads held).
func (w *Warmer) End() { w.closeIter() }

func (w *Warmer) closeIter() {
	if w.it != nil {
		w.it.Close()
		w.it = nil
	}
}

// Close releases the Warmer.
func (w *Warmer) Close() { w.closeIter() }

// Install puts the entries of p that are current in the row cache (see
// Warmer): p must have been read in the store's current flush epoch, and
// an entry is skipped when the store may have written its key since the
// epoch's flush or the cache holds the key. It reports how many it put.
func (t *Txn) Install(p *Prefetch) int {
	c, r := t.s.cache, t.s.recent
	if c == nil || !p.valid || p.epoch != r.epoch.Load() || !r.ready {
		return 0
	}
	n := 0
	for i := 0; i < p.read; i++ {
		k := p.key(i)
		if r.mayHold(k) {
			continue
		}
		if _, _, st := c.get(k); st == cacheHit {
			continue
		}
		e := &p.ents[i]
		c.fill(k, e.present, p.vals[e.v0:e.v1], t.spill)
		n++
	}
	c.prefetched.Add(uint64(n))
	return n
}

// atomic flags of recentWrites that Warmers read (durable.go).
type recentShared struct {
	epoch   atomic.Uint64 // flushes the writer saw finish
	readyAt atomic.Bool   // ready, for Warmers
}

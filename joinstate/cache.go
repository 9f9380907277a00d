package joinstate

import (
	"encoding/binary"
	"hash/maphash"
	"sync/atomic"
)

// rowCache keeps recently read or written state entries in memory (key →
// value, or known absence), in front of pebble's point lookups. On
// small-cache, high-latency machines a pebble Get walks a skiplist and block
// indexes at several cache misses per level; a hash lookup costs one or two.
//
// It holds committed truth plus the writes of the open Txn, which writes
// through it and keeps an undo log: Abort rolls the writes back, Commit drops
// the log. Writes of the point-read keyspaces are write-back (dirty): the
// Txn writes them to its pebble batch only when it commits (consolidated:
// a key written many times in one Txn is written once), or before a scan
// of their keyspace; a dirty entry that a hash collision displaces is
// written to the batch at once (see Txn.set). Nothing is evicted while a Txn is open (its writes must stay
// visible), only at Commit. A range clear moves the keyspace to a new
// generation (see Store), so the cleared entries are never looked up again;
// eviction drops them first. It is used by one Txn at a time (the Store's
// single-writer rule) and needs no lock.
//
// Completeness: while a keyspace's current generation has never lost an
// entry to eviction since it was empty (a fresh store, or a generation just
// started by a clear), every key of it that exists is in the cache, so a miss
// is a known absence and needs no pebble lookup. A state that fits in the
// cache then runs at hash-map speed; one that does not falls back to pebble
// on the first eviction.
//
// Layout: entries are appended to byte slabs (uvarint key length, key, a
// flags byte (flagPresent, flagDirty), uvarint value length, value) and found through a map from
// the key's 64-bit hash to the entry's position. Neither holds pointers, so
// the garbage collector does not scan the cache however large it is. Two keys
// with the same hash share a slot: the newer displaces the older (which
// counts as evicted), and a lookup that finds the other key is a miss that
// proves nothing.
type rowCache struct {
	idx   map[uint64]uint64 // key hash → entry ref (slab << 32 | offset)
	slabs [][]byte          // append-only; replaced wholesale by compact
	live  int               // bytes of the entries idx references
	used  int               // bytes appended to slabs
	max   int
	seed  maphash.Seed
	// mask is and-ed into every hash: all ones, except in tests that force
	// collisions.
	mask uint64
	// complete[slot] is the generation of that keyspace held completely,
	// or -1.
	complete [4]int64
	// auxComplete: the Aux keyspace (no generations: never cleared) has
	// not lost an entry since it was empty, so a miss there is a known
	// absence too (Router.count's child-count read of a key never counted
	// then costs no pebble lookup).
	auxComplete bool
	// onLost, if set, is called when a generational keyspace held
	// completely stops being so (the store's recentWrites.distrust).
	onLost func()
	// keepAux is set only by the negative control of
	// TestRowCacheAuxMetamorphic: losing an Aux entry leaves auxComplete.
	keepAux bool
	// hits and misses count point reads (read by Store.Stats on any
	// goroutine).
	hits, misses, prefetched atomic.Uint64
	// kept counts the evict passes that only compacted (every live entry
	// fitted in cacheKeepPct), dropped those that evicted live entries of
	// current generations. Single writer, like the rest.
	kept, dropped int
}

// undoEntry restores slot h to ref old (or removes it when !had).
type undoEntry struct {
	h   uint64
	old uint64
	had bool
}

// lookup results of rowCache.get.
const (
	cacheMiss      = iota // not cached (a known absence if the keyspace is complete)
	cacheHit              // val/present are the entry
	cacheCollision        // another key holds the slot: not cached, proves nothing
)

// Entry flags (the byte after the key).
const (
	flagPresent = 1 << 0 // the key exists (else: a known absence)
	flagDirty   = 1 << 1 // written by the open Txn, not yet in its batch
)

const (
	slabBytes       = 1 << 20
	idxEntryBytes   = 24 // map slot (hash + ref) with load-factor slack
	maxCompleteGens = 4
)

func newRowCache(max int) *rowCache {
	if max <= 0 {
		return nil
	}
	return &rowCache{idx: map[uint64]uint64{}, max: max, seed: maphash.MakeSeed(), mask: ^uint64(0),
		complete: [maxCompleteGens]int64{-1, -1, -1, -1}}
}

// entry decodes the entry at ref: its key, presence and value (aliasing the
// slab, which is never written again).
func (c *rowCache) entry(ref uint64) (key []byte, present bool, val []byte) {
	return entryAt(c.slabs[ref>>32][uint32(ref):])
}

func entrySize(key, val []byte) int {
	return uvarintLen(len(key)) + len(key) + 1 + uvarintLen(len(val)) + len(val)
}

func uvarintLen(n int) int {
	l := 1
	for n >= 0x80 {
		n >>= 7
		l++
	}
	return l
}

func (c *rowCache) hash(key []byte) uint64 { return maphash.Bytes(c.seed, key) & c.mask }

// get looks key up.
func (c *rowCache) get(key []byte) (val []byte, present bool, status int) {
	ref, ok := c.idx[c.hash(key)]
	if !ok {
		return nil, false, cacheMiss
	}
	k, present, val := c.entry(ref)
	if string(k) != string(key) {
		return nil, false, cacheCollision
	}
	return val, present, cacheHit
}

// appendEntry stores an entry in the slabs and returns its ref.
func (c *rowCache) appendEntry(key []byte, flags byte, val []byte) uint64 {
	size := entrySize(key, val)
	last := len(c.slabs) - 1
	if last < 0 || len(c.slabs[last])+size > cap(c.slabs[last]) {
		c.slabs = append(c.slabs, make([]byte, 0, max(slabBytes, size)))
		last++
	}
	b := c.slabs[last]
	off := len(b)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(len(val)))
	b = append(b, val...)
	c.slabs[last] = b
	c.used += size
	return uint64(last)<<32 | uint64(off)
}

// put points key's slot at a new entry and returns the slot's previous ref.
// When that entry was another key's (a hash collision displaces it), that
// key is no longer cached; if its entry was dirty, spill gets it first (the
// Txn writes it to its batch).
func (c *rowCache) put(key []byte, flags byte, val []byte, spill func(key []byte, present bool, val []byte)) (h, old uint64, had bool) {
	h = c.hash(key)
	old, had = c.idx[h]
	if had {
		k, f, v := c.entryFlags(old)
		c.live -= entrySize(k, v) + idxEntryBytes
		if string(k) != string(key) {
			if f&flagDirty != 0 && spill != nil {
				spill(k, f&flagPresent != 0, v)
			}
			c.evicted(k) // a hash collision displaces the other key
		}
	}
	c.idx[h] = c.appendEntry(key, flags, val)
	c.live += entrySize(key, val) + idxEntryBytes
	return h, old, had
}

// fill records a committed value read from pebble (no undo needed).
func (c *rowCache) fill(key []byte, present bool, val []byte, spill func(key []byte, present bool, val []byte)) {
	c.put(key, presence(present), val, spill)
}

func presence(present bool) byte {
	if present {
		return flagPresent
	}
	return 0
}

// write installs an uncommitted write and appends its undo record to undo;
// dirty marks it for the Txn to write to its batch later (flushDirty).
func (c *rowCache) write(key []byte, present, dirty bool, val []byte, undo []undoEntry, spill func(key []byte, present bool, val []byte)) []undoEntry {
	f := presence(present)
	if dirty {
		f |= flagDirty
	}
	h, old, had := c.put(key, f, val, spill)
	return append(undo, undoEntry{h: h, old: old, had: had})
}

// flushDirty passes every dirty entry the writes in undo left in the cache
// (newest write of each key once) to fn and marks it clean; with prefix
// non-zero only the entries of that keyspace.
func (c *rowCache) flushDirty(undo []undoEntry, prefix byte, fn func(key []byte, present bool, val []byte) error) error {
	for i := len(undo) - 1; i >= 0; i-- {
		ref, ok := c.idx[undo[i].h]
		if !ok {
			continue
		}
		b := c.slabs[ref>>32][uint32(ref):]
		kl, n := binary.Uvarint(b)
		fl := &b[n+int(kl)]
		if *fl&flagDirty == 0 || (prefix != 0 && b[n] != prefix) {
			continue
		}
		*fl &^= flagDirty // the flags byte is no key's or value's: never aliased
		k, f, v := entryAtFlags(b)
		if err := fn(k, f&flagPresent != 0, v); err != nil {
			return err
		}
	}
	return nil
}

// rollback undoes writes, newest first.
func (c *rowCache) rollback(undo []undoEntry) {
	for i := len(undo) - 1; i >= 0; i-- {
		u := undo[i]
		if cur, ok := c.idx[u.h]; ok {
			k, _, v := c.entry(cur)
			c.live -= entrySize(k, v) + idxEntryBytes
		}
		if u.had {
			c.idx[u.h] = u.old
			k, _, v := c.entry(u.old)
			c.live += entrySize(k, v) + idxEntryBytes
		} else {
			delete(c.idx, u.h)
		}
	}
}

// reset empties the cache: nothing is held, no keyspace is complete. Only
// call it with no Txn open.
func (c *rowCache) reset() {
	for _, g := range c.complete {
		if g >= 0 && c.onLost != nil {
			c.onLost()
			break
		}
	}
	clear(c.idx)
	c.slabs, c.used, c.live = nil, 0, 0
	c.complete = [maxCompleteGens]int64{-1, -1, -1, -1}
	c.auxComplete = false
}

// completeFor reports whether generation gen of the keyspace of prefix is
// held completely.
func (c *rowCache) completeFor(prefix byte, gen uint64) bool {
	return c.complete[genSlot(prefix)] == int64(gen)
}

// setComplete records that generation gen of prefix's keyspace is (empty
// in pebble and so) held completely.
//
// A different generation held completely before stops being so (a clear
// in a Txn that may yet abort): onLost is told.
func (c *rowCache) setComplete(prefix byte, gen uint64) {
	slot := genSlot(prefix)
	if old := c.complete[slot]; old >= 0 && old != int64(gen) && c.onLost != nil {
		c.onLost()
	}
	c.complete[slot] = int64(gen)
}

// holdsAll reports whether key's keyspace is held completely (a miss is a
// known absence): a generational keyspace at its generation in gens, or
// the Aux keyspace.
func (c *rowCache) holdsAll(key []byte, gens *generations) bool {
	switch {
	case key[0] == prefixAux:
		return c.auxComplete
	case isStateKey(key[0]):
		return c.completeFor(key[0], gens[genSlot(key[0])])
	}
	return false
}

// keyGen returns the keyspace generation named by a state key.
func keyGen(key []byte) (uint64, bool) {
	if len(key) < 2 || !(isStateKey(key[0]) || key[0] == prefixChildMark) {
		return 0, false
	}
	gen, n := binary.Uvarint(key[1:])
	return gen, n > 0
}

// evicted notes that key left the cache: its generation (or the Aux
// keyspace) is no longer complete.
func (c *rowCache) evicted(key []byte) {
	if len(key) > 0 && key[0] == prefixAux && !c.keepAux {
		c.auxComplete = false
	}
	if gen, ok := keyGen(key); ok && c.complete[genSlot(key[0])] == int64(gen) {
		c.complete[genSlot(key[0])] = -1
		if c.onLost != nil {
			c.onLost()
		}
	}
}

// purge drops the entries of old generations and, when their bytes made up
// most of the slabs, copies the survivors into fresh slabs. Only call it
// with no Txn open.
func (c *rowCache) purge(gens *generations) {
	c.dropOld(gens)
	if c.used > 2*c.live+slabBytes {
		c.compact()
	}
}

// dropOld drops the entries of old generations.
func (c *rowCache) dropOld(gens *generations) {
	for h, ref := range c.idx {
		k, _, v := c.entry(ref)
		if gen, isState := keyGen(k); isState && gen != gens[genSlot(k[0])] {
			delete(c.idx, h)
			c.live -= entrySize(k, v) + idxEntryBytes
		}
	}
}

// compact copies the live entries into fresh slabs and a fresh index (a Go
// map never shrinks: one sized for entries long gone costs cache misses).
func (c *rowCache) compact() {
	old := c.slabs
	idx := make(map[uint64]uint64, len(c.idx))
	c.slabs, c.used = nil, 0
	for h, ref := range c.idx {
		k, f, v := entryAtFlags(old[ref>>32][uint32(ref):])
		idx[h] = c.appendEntry(k, f, v)
	}
	c.idx = idx
}

// Shares of the row cache's budget (percent) for evict and for loads.
const (
	// cacheKeepPct: while the live entries take at most this share, a
	// cache over budget only drops the bytes of overwritten entries
	// (compactInPlace) and loses no entry, so a state that fits stays held
	// completely (misses are known absences, no read reaches pebble: a
	// fifth less CPU for a replay whose state fits). A compaction then
	// comes at least every (100-cacheKeepPct)% of the budget appended.
	cacheKeepPct = 90
	// cacheEvictPct: above cacheKeepPct, evict drops entries until the
	// live ones take this share.
	cacheEvictPct = 70
)

// evict brings the cache under budget when the slabs outgrow it: entries of
// old generations go first; then, if the live entries still take more than
// cacheKeepPct of the budget, random ones (map order) until they take
// cacheEvictPct; the survivors are copied into fresh slabs. Only call it
// with no Txn open.
func (c *rowCache) evict(gens *generations) {
	if c.used+len(c.idx)*idxEntryBytes <= c.max {
		return
	}
	c.dropOld(gens) // old generations first
	if c.live <= c.max/100*cacheKeepPct {
		c.compactInPlace() // everything live fits: keep it all
		c.kept++
		return
	}
	c.dropped++
	target := c.max / 100 * cacheEvictPct
	for h, ref := range c.idx {
		if c.live <= target {
			break
		}
		k, _, v := c.entry(ref)
		c.evicted(k)
		delete(c.idx, h)
		c.live -= entrySize(k, v) + idxEntryBytes
	}
	c.compact()
}

// compactInPlace copies the live entries into fresh slabs, keeping the
// index (no entry left it, so it is no larger than the live entries need).
func (c *rowCache) compactInPlace() {
	old := c.slabs
	c.slabs, c.used = nil, 0
	for h, ref := range c.idx {
		k, f, v := entryAtFlags(old[ref>>32][uint32(ref):])
		c.idx[h] = c.appendEntry(k, f, v) // updating a key being ranged over is allowed
	}
}

func entryAt(b []byte) (key []byte, present bool, val []byte) {
	key, f, val := entryAtFlags(b)
	return key, f&flagPresent != 0, val
}

func entryAtFlags(b []byte) (key []byte, flags byte, val []byte) {
	kl, n := binary.Uvarint(b)
	key = b[n : n+int(kl)]
	b = b[n+int(kl):]
	vl, m := binary.Uvarint(b[1:])
	end := 1 + m + int(vl)
	return key, b[0], b[1+m : end : end]
}

// entryFlags decodes the entry at ref with its flags.
func (c *rowCache) entryFlags(ref uint64) (key []byte, flags byte, val []byte) {
	return entryAtFlags(c.slabs[ref>>32][uint32(ref):])
}

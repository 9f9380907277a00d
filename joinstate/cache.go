package joinstate

import "encoding/binary"

// rowCache keeps recently read or written state entries in memory (key →
// value, or known absence), in front of pebble's point lookups. On
// small-cache, high-latency machines a pebble Get walks a skiplist and block
// indexes at several cache misses per level; a hash lookup costs one or two.
//
// It holds committed truth plus the writes of the open Txn, which writes
// through it and keeps an undo log: Abort rolls the writes back, Commit drops
// the log. Nothing is evicted while a Txn is open (its writes must stay
// visible), only at Commit. A range clear moves the keyspace to a new
// generation (see Store), so the cleared entries are never looked up again
// and age out. It is used by one Txn at a time (the Store's single-writer
// rule) and needs no lock.
//
// Completeness: while a keyspace's current generation has never lost an
// entry to eviction since it was empty (a fresh store, or a generation just
// started by a clear), every key of it that exists is in the cache, so a miss
// is a known absence and needs no pebble lookup. A state that fits in the
// cache then runs at hash-map speed; one that does not falls back to pebble
// on the first eviction.
type rowCache struct {
	m     map[string]cacheEntry
	bytes int
	max   int
	// complete[slot] is the generation of that keyspace held completely,
	// or -1.
	complete [4]int64
}

type cacheEntry struct {
	val     []byte // nil when absent
	present bool
}

// undoEntry restores key to old (or removes it when !had).
type undoEntry struct {
	key string
	old cacheEntry
	had bool
}

const cacheEntryOverhead = 64 // map slot, string header, slice header

func newRowCache(max int) *rowCache {
	if max <= 0 {
		return nil
	}
	return &rowCache{m: map[string]cacheEntry{}, max: max, complete: [4]int64{-1, -1, -1, -1}}
}

// completeFor reports whether generation gen of the keyspace of prefix is
// held completely.
func (c *rowCache) completeFor(prefix byte, gen uint64) bool {
	return c.complete[genSlot(prefix)] == int64(gen)
}

// setComplete records that generation gen of prefix's keyspace is (empty
// in pebble and so) held completely.
func (c *rowCache) setComplete(prefix byte, gen uint64) { c.complete[genSlot(prefix)] = int64(gen) }

// evicted notes that key left the cache: its generation is no longer
// complete.
func (c *rowCache) evicted(key string) {
	switch key[0] {
	case prefixParent, prefixChild, prefixIndex, prefixPIndex:
	default:
		return
	}
	gen, n := binary.Uvarint([]byte(key[1:min(len(key), 11)]))
	if n > 0 && c.complete[genSlot(key[0])] == int64(gen) {
		c.complete[genSlot(key[0])] = -1
	}
}

func (c *rowCache) get(key []byte) (cacheEntry, bool) {
	e, ok := c.m[string(key)]
	return e, ok
}

// fill records a committed value read from pebble (no undo needed).
func (c *rowCache) fill(key []byte, e cacheEntry) {
	c.m[string(key)] = e
	c.bytes += len(key) + len(e.val) + cacheEntryOverhead
}

// write installs an uncommitted write and appends its undo record to undo.
func (c *rowCache) write(key []byte, e cacheEntry, undo []undoEntry) []undoEntry {
	old, had := c.m[string(key)]
	k := string(key)
	if had {
		c.bytes -= len(k) + len(old.val) + cacheEntryOverhead
	}
	c.m[k] = e
	c.bytes += len(k) + len(e.val) + cacheEntryOverhead
	return append(undo, undoEntry{key: k, old: old, had: had})
}

// rollback undoes writes, newest first.
func (c *rowCache) rollback(undo []undoEntry) {
	for i := len(undo) - 1; i >= 0; i-- {
		u := undo[i]
		if cur, ok := c.m[u.key]; ok {
			c.bytes -= len(u.key) + len(cur.val) + cacheEntryOverhead
		}
		if u.had {
			c.m[u.key] = u.old
			c.bytes += len(u.key) + len(u.old.val) + cacheEntryOverhead
		} else {
			delete(c.m, u.key)
		}
	}
}

// evict brings the cache under budget, evicting in map order (i.e.
// randomly). Only call it with no Txn open.
func (c *rowCache) evict() {
	if c.bytes <= c.max {
		return
	}
	target := c.max * 9 / 10
	for k, e := range c.m {
		if c.bytes <= target {
			break
		}
		delete(c.m, k)
		c.bytes -= len(k) + len(e.val) + cacheEntryOverhead
		c.evicted(k)
	}
}

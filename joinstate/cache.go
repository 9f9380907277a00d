package joinstate

// rowCache keeps recently read or written committed state entries in memory
// (key → value, or known absence), in front of pebble's point lookups. On
// small-cache, high-latency machines a pebble Get walks a skiplist and block
// indexes at several cache misses per level; a hash lookup costs one or two.
//
// It holds only committed truth: a Txn records its reads and writes in its
// own overlay (pending) and merges them here on Commit; Abort drops them.
// A range clear drops the cleared prefix from the cache at once (a later
// miss falls through to pebble, which is authoritative). It is used by one
// Txn at a time (the Store's single-writer rule) and needs no lock.
type rowCache struct {
	m     map[string]cacheEntry
	bytes int
	max   int
}

type cacheEntry struct {
	val     []byte // nil when absent
	present bool
}

const cacheEntryOverhead = 64 // map slot, string header, slice header

func newRowCache(max int) *rowCache {
	if max <= 0 {
		return nil
	}
	return &rowCache{m: map[string]cacheEntry{}, max: max}
}

func (c *rowCache) get(key []byte) (cacheEntry, bool) {
	e, ok := c.m[string(key)]
	return e, ok
}

// merge installs a committed Txn's entries, evicting (in map order, i.e.
// randomly) when over budget.
func (c *rowCache) merge(pending map[string]cacheEntry) {
	for k, e := range pending {
		if old, ok := c.m[k]; ok {
			c.bytes -= len(k) + len(old.val) + cacheEntryOverhead
		}
		c.m[k] = e
		c.bytes += len(k) + len(e.val) + cacheEntryOverhead
	}
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
	}
}

// dropPrefix forgets every entry whose key starts with prefix.
func (c *rowCache) dropPrefix(prefix byte) {
	for k, e := range c.m {
		if k[0] == prefix {
			delete(c.m, k)
			c.bytes -= len(k) + len(e.val) + cacheEntryOverhead
		}
	}
}

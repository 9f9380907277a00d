package joinstate

import (
	"bytes"
	"errors"
	"hash/maphash"

	"github.com/cockroachdb/pebble/v2"
)

// Reads that skip the memtables.
//
// A point read pebble answers walks the Txn's batch, every memtable's
// skiplist and then the levels' tables. With a state many times the row
// cache, most reads that reach pebble are of keys written long ago (or
// never): they are in tables, and the skiplist walks are pure cost (a
// memtable lookup is a chain of dependent loads, several µs on a machine
// with slow memory; a quarter of a CDC event's CPU at 1e6 rows). So the
// store keeps a filter of every key written since the last flush it
// asked for and saw finish (every write of a Txn goes through it when it
// is made, committed or not), and a read of a key the filter does not
// hold goes to an iterator over the tables only (pebble's
// IterOptions.OnlyReadGuaranteedDurable): no write since that flush means
// the tables hold the key's latest version. A key the filter may hold is
// read as before. Correctness never depends on how often flushes happen:
// a filter that fills up only sends more reads the long way.
//
// Flushes: the store flushes the memtable itself when it holds
// state.memtable_mb (pebble's memtables are twice that size, so pebble does
// not flush first: the tables are no more numerous than with pebble's own
// flushes), with AsyncFlush, and starts a new filter; the old filter is dropped once that
// flush has finished, as seen by the Txn that next opens its table
// iterator (its view of the tables is taken after the flush, so it holds
// the flushed keys). Until the first flush the store asked for has
// finished (a store opened with a WAL to replay has keys in memtables that
// no filter holds) every read goes the long way. While the row cache holds
// the whole state no read reaches pebble, and no flush is forced: pebble
// flushes its larger memtables itself (a small state is flushed half as
// often as before).
//
// Only reads of the generational keyspaces that the row cache does not
// answer consult the filter, so only their writes are noted (Txn.note),
// and not while the row cache holds the key's keyspace completely: a read
// of it is then a hit or a known absence. When the cache stops holding a
// keyspace completely (an eviction, a hash collision, a reset) the filter
// lacks its writes since: the store distrusts it (every read goes the long
// way) until a flush asked for after the Txn in progress commits has
// finished.
type recentWrites struct {
	recentShared // the flush epoch, for Warmers (warm.go)
	seed         maphash.Seed
	cur, prev    []uint64 // bloom filters: writes since the last flush asked for; before it, until it finished
	flushing     <-chan struct{}
	ready        bool // a flush the store asked for has finished: tables hold every key neither filter holds
	since        int  // bytes committed since the last flush asked for
	every        int
	// stale: a keyspace whose writes were not noted stopped being held
	// completely by the row cache (distrust); the next commit asks for a
	// flush, and ready waits for it.
	stale bool
	// noDistrust is set only by the negative control of
	// TestDurableReadsMetamorphic: distrust does nothing.
	noDistrust bool
}

const recentBits = 1 << 23 // per filter: 1 MiB, ~0.1% false positives at 140,000 keys

func newRecentWrites(every int) *recentWrites {
	return &recentWrites{seed: maphash.MakeSeed(), cur: make([]uint64, recentBits/64), prev: make([]uint64, recentBits/64), every: every}
}

func (r *recentWrites) bits(key []byte) (uint64, uint64) {
	h := maphash.Bytes(r.seed, key)
	return h % recentBits, (h >> 32) % recentBits
}

// add notes a write of key.
func (r *recentWrites) add(key []byte) {
	a, b := r.bits(key)
	r.cur[a/64] |= 1 << (a % 64)
	r.cur[b/64] |= 1 << (b % 64)
}

// mayHold reports whether key may have been written since the tables
// last held everything (false: read the tables only).
func (r *recentWrites) mayHold(key []byte) bool {
	if !r.ready {
		return true
	}
	a, b := r.bits(key)
	in := func(f []uint64) bool { return f[a/64]&(1<<(a%64)) != 0 && f[b/64]&(1<<(b%64)) != 0 }
	return in(r.cur) || in(r.prev)
}

// settle drops the previous filter when the flush it waits for finished.
// Called before a Txn takes its view of the tables.
func (r *recentWrites) settle() {
	if r.flushing == nil {
		return
	}
	select {
	case <-r.flushing:
	default:
		return
	}
	r.flushing = nil
	clear(r.prev)
	if r.stale {
		return // asked for before the writes the filter lacks were committed
	}
	r.ready = true
	r.readyAt.Store(true)
	r.epoch.Add(1) // prefetches read before are dropped: their view may lack the flush
}

// distrust is called (by the row cache, on the writer's goroutine) when the
// row cache stops holding a keyspace completely whose writes the filter may
// lack: reads go the long way, and prefetches read before are dropped, until
// a flush asked for at the next commit (after every such write) has
// finished.
func (r *recentWrites) distrust() {
	if r.noDistrust {
		return
	}
	r.stale = true
	r.ready = false
	r.readyAt.Store(false)
	r.epoch.Add(1)
}

// memtableEntryBytes is what a memtable spends on an entry besides its
// key and value (the skiplist node), roughly.
const memtableEntryBytes = 40

// committed counts a commit of n bytes and entries entries into the
// memtable and starts a flush when the memtable holds state.memtable_mb
// (and no flush is in flight); force starts one anyway (Open).
func (s *Store) committed(n, entries int, force bool) {
	r := s.recent
	if r.every < 0 {
		return
	}
	r.since += n + entries*memtableEntryBytes
	if r.stale {
		// The filters lack writes committed before now: a flush asked for
		// now (after any in flight: flushes finish in order) holds them.
		ch, err := s.asyncFlush()
		if err != nil {
			return // still stale: reads keep going the long way
		}
		r.flushing, r.since, r.stale = ch, 0, false
		clear(r.prev)
		clear(r.cur) // (the filters hold writes before the flush only: not needed once it finished)
		return
	}
	if r.flushing != nil || (!force && (r.since < r.every || s.RowCacheHoldsAll())) {
		return
	}
	ch, err := s.asyncFlush()
	if err != nil {
		return // no flush: reads keep going the long way for the keys written since
	}
	r.flushing, r.since = ch, 0
	r.prev, r.cur = r.cur, r.prev // prev was cleared when the last flush finished
}

// untrust is called after writes that bypass the filter: an ingest (whose
// tables pebble may keep among the memtables until they are flushed) or a
// clear. Reads go the long way, and prefetches read before are dropped,
// until a flush asked for now has finished.
func (s *Store) untrust() {
	r := s.recent
	r.ready = false
	r.readyAt.Store(false)
	r.epoch.Add(1)
	if r.every < 0 {
		return
	}
	ch, err := s.asyncFlush()
	if err != nil {
		r.flushing = nil // no flush to wait for: never ready again (reads stay correct)
		return
	}
	// Flushes finish in order: when this one has, so has any in flight.
	r.flushing, r.since = ch, 0
}

// asyncFlush starts a flush of the memtable (guarded: see fault.go).
func (s *Store) asyncFlush() (<-chan struct{}, error) {
	var ch <-chan struct{}
	err := s.guard(func() error {
		var err error
		ch, err = s.db.AsyncFlush()
		return err
	})
	return ch, err
}

// errNoDurable: the tables may not hold every key yet; read the long way.
var errNoDurable = errors.New("cdcjoin: state: no durable view yet")

// durableGet reads key from the tables only (see recentWrites); the value
// is copied into t.val.
func (t *Txn) durableGet(key []byte) ([]byte, bool, error) {
	if t.dur == nil {
		t.s.recent.settle()
		if !t.s.recent.ready {
			return nil, false, errNoDurable
		}
		it, err := t.s.db.NewIter(&pebble.IterOptions{OnlyReadGuaranteedDurable: true})
		if err != nil {
			return nil, false, err
		}
		t.dur = it
	}
	if !t.dur.SeekPrefixGE(key) || !bytes.Equal(t.dur.Key(), key) {
		return nil, false, t.dur.Error()
	}
	v, err := t.dur.ValueAndErr()
	if err != nil {
		return nil, false, err
	}
	t.val = append(t.val[:0], v...)
	return t.val, true, nil
}

// closeDurable releases the Txn's table iterator.
func (t *Txn) closeDurable() {
	if t.dur != nil {
		t.dur.Close()
		t.dur = nil
	}
}

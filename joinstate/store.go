// Package joinstate keeps a keyed one-to-many join's state in pebble.
//
// Layout (one pebble DB per Store; all keys begin with a one-byte prefix):
//
//	'P' gen joinKey            → parent record: version, padded-row version, projected parent row
//	'C' gen joinKey childKey   → child record: version, projected child row (map state, prefix-scannable)
//	'I' gen childKey           → joinKey + row (child index: where a child lives, its last row)
//	'J' gen parentKey          → row (parent index of a keying stage: the parent's last row)
//	'O' topic 0x00 partition   → next offset to consume (input positions)
//	'M' name                   → metadata (version counter, config fingerprint, generations, …)
//	'A' key                    → the join's bookkeeping (keyed.State's Aux: child counts, hot keys, fan-outs in progress)
//	'X' key                    → an operator's own ordered keyspace (Space: a time join's rows, timers, watermarks)
//
// Join keys and child keys are tuples in the order-preserving, prefix-free
// encoding of AppendKey, so the children of one join key are one contiguous
// range that is iterated without loading it into memory.
//
// gen (a uvarint) is the keyspace's generation. Clearing a keyspace (a
// truncate) moves it to the next generation and range-deletes the old one,
// so later reads and scans never walk over the deleted entries that stay in
// memtables and sstables until compaction drops them.
//
// All mutations go through a Txn, a pebble indexed batch that also carries the
// input positions; Commit writes state and positions atomically, so they can
// never diverge.
package joinstate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/row"
)

const (
	prefixParent   = 'P'
	prefixChild    = 'C'
	prefixIndex    = 'I'
	prefixPIndex   = 'J'
	prefixPosition = 'O'
	prefixMeta     = 'M'
	prefixAux      = 'A'
	prefixSpace    = 'X'
	// prefixChildMark keys row-cache-only entries (never in pebble): "this
	// join key may have children", written with every child put.
	prefixChildMark = 'c'
)

// Options configure a Store. The zero value of every field but Dir is a
// documented default, applied by EnsureDefaults; Open calls EnsureDefaults
// and Validate, so callers only set what they change.
type Options struct {
	// Dir is the pebble directory; created if absent. Required.
	Dir string
	// FS is the filesystem (tests: vfs.NewMem, crash and error injection).
	// Default: the OS filesystem.
	FS vfs.FS
	// CacheBytes is pebble's block cache size. Default 64 MiB.
	CacheBytes int64
	// MemTableBytes is how much the memtable holds before it is flushed.
	// Default 8 MiB. The store flushes it itself (durable.go): pebble's
	// memtables are twice as large, so that pebble never flushes first
	// while the store tracks what the tables hold.
	MemTableBytes uint64
	// RowCacheBytes bounds the in-memory cache of state entries in front
	// of pebble's point lookups. Default 64 MiB. Ignored when
	// DisableRowCache is set.
	RowCacheBytes int
	// DisableRowCache turns the row cache off (every read goes to pebble).
	DisableRowCache bool
	// Sync makes every Commit fsync the WAL. Default false: a crash (a
	// process crash too: pebble writes its WAL from a buffer) or an OS crash
	// may lose the newest commits, state and positions together.
	Sync bool
	// Logger receives pebble's informational messages. Default: discard.
	Logger pebble.Logger

	// tune, if set, adjusts pebble's options before Open (tests and
	// benchmarks of pebble settings).
	tune func(*pebble.Options)
	// flushEvery overrides how many committed bytes start a flush for
	// reads that skip the memtables (durable.go; tests); < 0: no such
	// reads.
	flushEvery int
}

// EnsureDefaults fills in the defaults of unset fields and returns o.
func (o *Options) EnsureDefaults() *Options {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = 64 << 20
	}
	if o.MemTableBytes == 0 {
		o.MemTableBytes = 8 << 20
	}
	if o.RowCacheBytes == 0 {
		o.RowCacheBytes = 64 << 20
	}
	if o.Logger == nil {
		o.Logger = quietLogger{}
	}
	return o
}

// Validate reports every problem of o at once (after EnsureDefaults).
func (o *Options) Validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("no directory given"))
	}
	if o.CacheBytes < 0 {
		errs = append(errs, fmt.Errorf("block cache size %d is negative", o.CacheBytes))
	}
	if o.MemTableBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("memtable size %d is below 1 MiB", o.MemTableBytes))
	}
	if o.RowCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("row cache size %d is negative (set DisableRowCache to turn it off)", o.RowCacheBytes))
	}
	if len(errs) > 0 {
		return fmt.Errorf("cdcjoin: state options: %w", errors.Join(errs...))
	}
	return nil
}

// Store is the pebble-backed state of one join (or of one partition of it).
// A Store is safe for concurrent use by one writer (Txn) and any number of
// readers of committed data; Txns must not be used concurrently.
type Store struct {
	db *pebble.DB
	po *pebble.Options // as opened (bulk loads write tables like it)
	// cacheBytes is the block cache's size.
	cacheBytes int64
	sync       bool
	cache      *rowCache // nil when disabled
	h          *health   // the store's Fault, if any (see fault.go)

	rec      *commitRecord // the commit file (see commitrec.go)
	commits  uint64        // commits made (metaCommits); the writer's
	fs       vfs.FS        // for checkSpace and bulk loads
	headroom uint64        // free bytes needed to commit (see checkSpace)

	mu   sync.Mutex  // guards gens
	gens generations // committed generations

	closeMu sync.RWMutex // Stats vs Close
	closed  bool

	recent *recentWrites // keys written since the last flush (durable.go); the writer's
}

// Stats are a store's size and efficiency figures (see Store.Stats).
type Stats struct {
	// DiskBytes estimates the whole state's bytes on disk.
	DiskBytes uint64
	// ParentBytes, ChildBytes, ChildIndexBytes and ParentIndexBytes split
	// it by keyspace (estimates; memtables not included).
	ParentBytes, ChildBytes, ChildIndexBytes, ParentIndexBytes uint64
	// WriteAmp is pebble's write amplification: bytes written by flushes
	// and compactions per byte flushed.
	WriteAmp float64
	// BlockCacheBytes is the block cache's capacity (Options.CacheBytes);
	// BlockCacheHits and BlockCacheMisses count its lookups.
	BlockCacheBytes                  int64
	BlockCacheHits, BlockCacheMisses int64
	// RowCacheHits counts point reads answered by the row cache (values and
	// known absences); RowCacheMisses the ones that went to pebble.
	// RowCachePrefetched counts entries read from pebble ahead and put in
	// the row cache (Txn.Install): reads that went to pebble on another
	// goroutine, whose later hits count as hits.
	RowCacheHits, RowCacheMisses, RowCachePrefetched uint64
}

// Stats returns the store's figures. Safe for concurrent use with the Txn
// in progress and with Close (a closed store returns ok false).
func (s *Store) Stats() (st Stats, ok bool) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed || s.h.err() != nil {
		return st, false
	}
	// Pebble's metrics take its mutex, which a failed disk can leave held.
	err := s.guard(func() error { st = s.stats(); return nil })
	return st, err == nil
}

func (s *Store) stats() (st Stats) {
	st.DiskBytes = s.DiskBytes()
	st.ParentBytes = s.prefixBytes(prefixParent)
	st.ChildBytes = s.prefixBytes(prefixChild)
	st.ChildIndexBytes = s.prefixBytes(prefixIndex)
	st.ParentIndexBytes = s.prefixBytes(prefixPIndex)
	m := s.db.Metrics()
	t := m.Total()
	st.WriteAmp = t.WriteAmp()
	st.BlockCacheBytes, st.BlockCacheHits, st.BlockCacheMisses = s.cacheBytes, m.BlockCache.Hits, m.BlockCache.Misses
	if s.cache != nil {
		st.RowCacheHits, st.RowCacheMisses, st.RowCachePrefetched = s.cache.hits.Load(), s.cache.misses.Load(), s.cache.prefetched.Load()
	}
	return st
}

// generations holds the current generation of each clearable keyspace.
type generations [4]uint64

const metaGenerations = "generations"

// isStateKey reports whether prefix names a generational keyspace.
func isStateKey(prefix byte) bool {
	switch prefix {
	case prefixParent, prefixChild, prefixIndex, prefixPIndex:
		return true
	}
	return false
}

func genSlot(prefix byte) int {
	switch prefix {
	case prefixParent:
		return 0
	case prefixChild, prefixChildMark:
		return 1
	case prefixIndex:
		return 2
	}
	return 3 // prefixPIndex
}

// header appends prefix and its keyspace's generation to dst.
func (g *generations) header(dst []byte, prefix byte) []byte {
	return binary.AppendUvarint(append(dst, prefix), g[genSlot(prefix)])
}

func (g *generations) encode() []byte {
	var b []byte
	for _, v := range g {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

func (g *generations) decode(b []byte) error {
	for i := range g {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return fmt.Errorf("%w: generations", ErrCorrupt)
		}
		g[i], b = v, b[n:]
	}
	return nil
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...interface{})  {}
func (quietLogger) Errorf(string, ...interface{}) {}
func (quietLogger) Fatalf(format string, args ...interface{}) {
	panic(fmt.Sprintf(format, args...)) // pebble's contract: Fatalf must not return
}

// Open opens (creating if needed) the store in opts.Dir. It applies the
// defaults and validates opts first. On the OS file system the directory
// is created 0700 and pebble's files 0600. Disk failures and corruption,
// when opening or later, are reported as a *Fault (see fault.go); so is a
// state that opened older than its last commit without an OS restart (see
// commitrec.go).
func Open(opts Options) (*Store, error) {
	osFS := opts.FS == nil
	if err := opts.EnsureDefaults().Validate(); err != nil {
		return nil, err
	}
	fs := opts.FS
	if osFS {
		if err := makePrivateDir(opts.Dir); err != nil {
			return nil, err
		}
		fs = privateFS{fs}
	}
	h := newHealth(opts.Dir)
	el := h.listener()
	cache := pebble.NewCache(opts.CacheBytes)
	defer cache.Unref()
	po := &pebble.Options{Cache: cache, FS: fs, Logger: faultLogger{h: h, inner: opts.Logger}, EventListener: &el,
		MemTableSize: 2 * opts.MemTableBytes}
	// Most lookups are point gets of keys that often do not exist (a new
	// child, a parent not seen yet): bloom filters let them skip tables.
	// Index blocks of 256 KiB (pebble's default is the 4 KiB data block
	// size): a table's index is a few blocks that stay in the block cache
	// instead of many that data blocks evict (point reads of a state 40
	// times the block cache: 7% less CPU, same bytes on disk;
	// BenchmarkPointReads).
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		po.Levels[i].IndexBlockSize = 256 << 10
	}
	if opts.tune != nil {
		opts.tune(po)
	}
	po.EnsureDefaults()
	s := &Store{po: po, cacheBytes: opts.CacheBytes, sync: opts.Sync, h: h, fs: fs, headroom: headroom(opts.MemTableBytes)}
	err := s.guard(func() error {
		var err error
		s.db, err = pebble.Open(opts.Dir, po)
		return err
	})
	if err != nil {
		var f *Fault
		if errors.As(err, &f) {
			return nil, err
		}
		return nil, fmt.Errorf("cdcjoin: open state %s: %w", opts.Dir, err)
	}
	if !opts.DisableRowCache {
		s.cache = newRowCache(opts.RowCacheBytes)
	}
	g, err := s.Meta(metaGenerations)
	if err == nil && g != nil {
		err = s.gens.decode(g)
	}
	if err == nil && s.cache != nil {
		err = s.markEmptyComplete()
	}
	var commits []byte
	if err == nil {
		commits, err = s.Meta(metaCommits)
	}
	if err == nil && len(commits) == 8 {
		s.commits = binary.BigEndian.Uint64(commits)
	}
	if err == nil {
		every := int(opts.MemTableBytes)
		if opts.flushEvery != 0 {
			every = opts.flushEvery
		}
		s.recent = newRecentWrites(every)
		s.committed(0, 0, true) // tables hold every key once what the WAL replayed is flushed
		if s.cache != nil {
			s.cache.onLost = s.recent.distrust
		}
	}
	if err == nil {
		// A rollback leaves pebble healthy (Close below releases it): it
		// is not recorded as the store's fault.
		s.rec, err = openCommitRecord(fs, opts.Dir, s.commits)
		var f *Fault
		if err != nil && !errors.As(err, &f) {
			err = s.h.check(fmt.Errorf("cdcjoin: state %s: commit file: %w", opts.Dir, err))
		}
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// markEmptyComplete tells the row cache which keyspaces are empty (and so
// held completely by it from the start): the generational ones and Aux.
func (s *Store) markEmptyComplete() error {
	for _, prefix := range []byte{prefixParent, prefixChild, prefixIndex, prefixPIndex, prefixAux} {
		hdr := []byte{prefixAux}
		if prefix != prefixAux {
			hdr = s.gens.header(nil, prefix)
		}
		it, err := s.db.NewIter(prefixBounds(hdr))
		if err != nil {
			return s.h.check(fmt.Errorf("cdcjoin: state: %w", err))
		}
		empty := !it.First()
		err = it.Error()
		it.Close()
		if err != nil {
			return s.h.check(fmt.Errorf("cdcjoin: state: %w", err))
		}
		switch {
		case !empty:
		case prefix == prefixAux:
			s.cache.auxComplete = true
		default:
			s.cache.setComplete(prefix, s.gens[genSlot(prefix)])
		}
	}
	return nil
}

// Close closes the store. Uncommitted Txns are discarded. A store with a
// Fault is not closed (pebble's goroutines may hold its locks for good):
// Close returns the Fault at once, and the process should exit.
func (s *Store) Close() error {
	s.closeMu.Lock()
	s.closed = true
	s.closeMu.Unlock()
	if err := s.h.err(); err != nil {
		return err
	}
	if s.db == nil {
		return nil
	}
	if err := s.guard(s.db.Close); err != nil {
		var f *Fault
		if errors.As(err, &f) {
			return err
		}
		return fmt.Errorf("cdcjoin: close state: %w", err)
	}
	if s.rec != nil {
		// Closing synced the WAL: every commit is durable.
		err := s.rec.write(s.commits)
		if cerr := s.rec.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("cdcjoin: close state: %s: %w", commitFile, err)
		}
	}
	return nil
}

// DB exposes the underlying pebble DB for metrics and tools.
func (s *Store) DB() *pebble.DB { return s.db }

// Begin starts a transaction. The caller must Commit or Abort it. At most
// one Txn may be open at a time, except Txns used only for scans (Groups,
// Children), which see committed data and may overlap it on the
// same goroutine. (Point reads go through the row cache, which holds the
// open Txn's writes.)
func (s *Store) Begin() *Txn {
	t := &Txn{s: s, b: s.db.NewIndexedBatch()}
	t.spill = t.spillTo
	s.recent.settle() // (the Txn's table iterator is made later: it sees the flush)
	s.mu.Lock()
	t.gens = s.gens
	s.mu.Unlock()
	return t
}

// Position returns the committed next offset to consume for topic/partition.
func (s *Store) Position(topic string, partition int32) (int64, bool, error) {
	if err := s.h.err(); err != nil {
		return 0, false, err
	}
	v, closer, err := s.db.Get(positionKey(nil, topic, partition))
	p, ok, err := decodePosition(v, closer, err)
	return p, ok, s.h.check(err)
}

// Meta returns a committed metadata value (nil if absent).
func (s *Store) Meta(name string) ([]byte, error) {
	if err := s.h.err(); err != nil {
		return nil, err
	}
	v, err := getCopy(s.db.Get(metaKey(name)))
	return v, s.h.check(err)
}

// Positions calls fn for every committed input position.
func (s *Store) Positions(fn func(topic string, partition int32, next int64) error) error {
	it, err := s.db.NewIter(prefixBounds([]byte{prefixPosition}))
	if err != nil {
		return s.h.check(fmt.Errorf("cdcjoin: state: %w", err))
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()[1:]
		if len(k) < 5 || len(it.Value()) != 8 {
			return fmt.Errorf("%w: position key", ErrCorrupt)
		}
		topic := string(k[:len(k)-5])
		part := int32(binary.BigEndian.Uint32(k[len(k)-4:]))
		if err := fn(topic, part, int64(binary.BigEndian.Uint64(it.Value()))); err != nil {
			return err
		}
	}
	return s.h.check(it.Error())
}

// DiskBytes estimates the state's size on disk.
func (s *Store) DiskBytes() uint64 { return s.estimate([]byte{0}, []byte{0xff}) }

// prefixBytes estimates the bytes on disk of the keys starting with prefix.
func (s *Store) prefixBytes(prefix byte) uint64 {
	return s.estimate([]byte{prefix}, []byte{prefix + 1})
}

func (s *Store) estimate(lo, hi []byte) uint64 {
	n, err := s.db.EstimateDiskUsage(lo, hi)
	if err != nil {
		return 0
	}
	return n
}

// Flush flushes memtables to disk (used by benchmarks that measure bytes on
// disk per row).
func (s *Store) Flush() error { return s.guard(s.db.Flush) }

func decodePosition(v []byte, closer io.Closer, err error) (int64, bool, error) {
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("cdcjoin: state: read position: %w", err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, false, fmt.Errorf("%w: position value", ErrCorrupt)
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

func getCopy(v []byte, closer io.Closer, err error) ([]byte, error) {
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: state: %w", err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

func positionKey(dst []byte, topic string, partition int32) []byte {
	dst = append(dst, prefixPosition)
	dst = append(dst, topic...)
	dst = append(dst, 0)
	return binary.BigEndian.AppendUint32(dst, uint32(partition))
}

func metaKey(name string) []byte { return append([]byte{prefixMeta}, name...) }

func prefixBounds(prefix []byte) *pebble.IterOptions {
	return &pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)}
}

// prefixEnd returns the smallest key greater than every key with prefix.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Txn is a batch of state changes and input positions, committed atomically.
// Reads see the Txn's own writes. Not safe for concurrent use.
type Txn struct {
	s      *Store
	b      *pebble.Batch
	gens   generations      // this Txn's view; committed with it
	genSet bool             // gens changed (a clear)
	it     *pebble.Iterator // reused by Children and HasChildren (nil until needed)
	itBusy bool
	// spaceIt is reused by Space.Scan (a nested scan opens its own).
	spaceIt   *pebble.Iterator
	spaceBusy bool
	undo      []undoEntry // rolls back this Txn's writes to the row cache
	key       []byte      // scratch
	val       []byte      // scratch
	mark      []byte      // scratch (child marks)

	// Write-back (see writeBack): dirty counts the writes held only by
	// the row cache, dirtyBytes their keys' and values' bytes; spill
	// writes a displaced one to b (spillTo), spillErr is its first error.
	dirty, dirtyBytes int
	spill             func(key []byte, present bool, val []byte)
	spillErr          error

	dur *pebble.Iterator // over the tables only (durable.go); nil until needed
}

// writeBack reports whether writes of the keyspace of prefix stay in the
// row cache until the Txn commits (or until a scan of the keyspace needs
// them in the batch): the keyspaces read by point lookups only, between
// scans — parents, the child index, the parent index, positions and
// metadata. A key written many times in one Txn then reaches pebble once,
// and the batch indexes only what scans read. Children and Aux are written
// through: their scans (fan-outs, HasChildren, the skew scheduler's
// queues) read the batch.
func writeBack(prefix byte) bool {
	switch prefix {
	case prefixParent, prefixIndex, prefixPIndex, prefixPosition, prefixMeta:
		return true
	}
	return false
}

// spillTo writes a dirty entry displaced from the row cache into t's batch
// (reads of the key then find it there).
func (t *Txn) spillTo(key []byte, present bool, val []byte) {
	var err error
	if present {
		err = t.b.Set(key, val, nil)
	} else {
		err = t.b.Delete(key, nil)
	}
	if err != nil && t.spillErr == nil {
		t.spillErr = fmt.Errorf("cdcjoin: state: write: %w", err)
	}
}

// flushDirty writes the dirty entries of prefix's keyspace into the batch,
// so that a scan of the keyspace (or a clear) sees them.
func (t *Txn) flushDirty(prefix byte) error {
	if t.s.cache == nil || t.dirty == 0 {
		return nil
	}
	return t.s.cache.flushDirty(t.undo, prefix, func(key []byte, present bool, val []byte) error {
		t.spillTo(key, present, val)
		return t.spillErr
	})
}

// Len is the encoded size of the pending batch in bytes (for write-back
// writes, an upper bound: their key and value bytes).
func (t *Txn) Len() int { return t.b.Len() + t.dirtyBytes }

// Empty reports whether the Txn has no pending writes.
func (t *Txn) Empty() bool { return t.b.Empty() && t.dirty == 0 }

// Commit writes all changes and positions atomically and ends the Txn.
func (t *Txn) Commit() error {
	opts := pebble.NoSync
	if t.s.sync {
		opts = pebble.Sync
	}
	t.closeIter()
	t.closeDurable()
	var err error
	if t.genSet {
		err = t.b.Set(metaKey(metaGenerations), t.gens.encode(), nil)
	}
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], t.s.commits+1)
	if err == nil {
		err = t.b.Set(metaKey(metaCommits), n[:], nil)
	}
	if err == nil {
		err = t.s.checkSpace()
	}
	if err == nil {
		err = t.spillErr
	}
	b := t.b
	if err == nil && t.dirty > 0 {
		// The write-back entries, each key's last write once, after what
		// the batch holds (a clear's range deletion included: the entries
		// of a cleared generation were flushed before it).
		b = t.s.db.NewBatch()
		if !t.b.Empty() {
			err = b.Apply(t.b, nil)
		}
		if err == nil {
			err = t.s.cache.flushDirty(t.undo, 0, func(key []byte, present bool, val []byte) error {
				if present {
					return b.Set(key, val, nil)
				}
				return b.Delete(key, nil)
			})
		}
		if err != nil {
			err = fmt.Errorf("cdcjoin: state: write: %w", err)
		}
	}
	if err == nil {
		err = t.s.guard(func() error { return b.Commit(opts) })
	}
	committed, entries := b.Len(), int(b.Count())
	if t.s.h.err() == nil { // else pebble may still hold the batch
		t.b.Close()
		if b != t.b {
			b.Close()
		}
	}
	t.b = nil
	t.dirty, t.dirtyBytes = 0, 0
	if err != nil {
		if t.s.cache != nil {
			t.s.cache.rollback(t.undo)
			t.undo = nil
		}
		var f *Fault
		if errors.As(err, &f) {
			return err
		}
		return fmt.Errorf("cdcjoin: state: commit: %w", err)
	}
	t.s.commits++
	t.s.committed(committed, entries, false)
	if err := t.s.recordDurable(); err != nil {
		return err
	}
	if t.genSet {
		t.s.mu.Lock()
		t.s.gens = t.gens
		t.s.mu.Unlock()
	}
	if t.s.cache != nil {
		t.undo = t.undo[:0]
		t.s.mu.Lock()
		gens := t.s.gens
		t.s.mu.Unlock()
		if t.genSet {
			// A clear left the old generation's entries unreachable: drop
			// them now, so that the cache's index stays as small as the
			// live state (a big index costs a cache miss per lookup).
			t.s.cache.purge(&gens)
		}
		t.s.cache.evict(&gens)
	}
	return nil
}

// Abort discards the Txn.
func (t *Txn) Abort() {
	t.closeIter()
	t.closeDurable()
	if t.b != nil {
		t.b.Close()
		t.b = nil
	}
	if t.s.cache != nil {
		t.s.cache.rollback(t.undo)
		t.undo = nil
	}
}

// stateKey builds the key prefix+generation+a+b in t.key and returns it.
func (t *Txn) stateKey(prefix byte, a, b []byte) []byte {
	t.key = append(append(t.gens.header(t.key[:0], prefix), a...), b...)
	return t.key
}

func (t *Txn) get(key []byte) ([]byte, bool, error) {
	c := t.s.cache
	if c != nil {
		val, present, status := c.get(key)
		if status == cacheHit {
			c.hits.Add(1)
			return val, present, nil
		}
		// Every write of this Txn is in the cache, so a miss is a key this
		// Txn has not written, and in a complete keyspace one that does not
		// exist.
		if status == cacheMiss && c.holdsAll(key, &t.gens) {
			c.hits.Add(1)
			return nil, false, nil
		}
		c.misses.Add(1)
	}
	if isStateKey(key[0]) && !t.s.recent.mayHold(key) {
		v, ok, err := t.durableGet(key)
		if err != errNoDurable {
			if err != nil {
				return nil, false, t.s.h.check(fmt.Errorf("cdcjoin: state: read: %w", err))
			}
			if c != nil {
				c.fill(key, ok, v, t.spill)
			}
			return v, ok, nil
		}
	}
	v, closer, err := t.b.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		if c != nil {
			c.fill(key, false, nil, t.spill)
		}
		return nil, false, nil
	}
	if err != nil {
		return nil, false, t.s.h.check(fmt.Errorf("cdcjoin: state: read: %w", err))
	}
	t.val = append(t.val[:0], v...)
	closer.Close()
	if c != nil {
		c.fill(key, true, t.val, t.spill)
	}
	return t.val, true, nil
}

// note notes a write of key in the recent-writes filter (durable.go) where
// a read may consult it: a key of a generational keyspace that the row
// cache does not hold completely (if it stops doing so, the filter is
// distrusted until a flush).
func (t *Txn) note(key []byte) {
	if !isStateKey(key[0]) {
		return
	}
	if c := t.s.cache; c != nil && c.completeFor(key[0], t.gens[genSlot(key[0])]) {
		return
	}
	t.s.recent.add(key)
}

func (t *Txn) set(key, val []byte) error {
	t.note(key)
	c := t.s.cache
	if c != nil && writeBack(key[0]) {
		t.undo = c.write(key, true, true, val, t.undo, t.spill)
		t.dirty++
		t.dirtyBytes += len(key) + len(val)
		return nil
	}
	if err := t.b.Set(key, val, nil); err != nil {
		return fmt.Errorf("cdcjoin: state: write: %w", err)
	}
	if c != nil {
		t.undo = c.write(key, true, false, val, t.undo, t.spill)
	}
	return nil
}

func (t *Txn) del(key []byte) error {
	t.note(key)
	c := t.s.cache
	if c != nil && writeBack(key[0]) {
		t.undo = c.write(key, false, true, nil, t.undo, t.spill)
		t.dirty++
		t.dirtyBytes += len(key)
		return nil
	}
	if err := t.b.Delete(key, nil); err != nil {
		return fmt.Errorf("cdcjoin: state: delete: %w", err)
	}
	if c != nil {
		t.undo = c.write(key, false, false, nil, t.undo, t.spill)
	}
	return nil
}

// Parent returns the parent value of joinKey. The slice is valid until the
// next call on the Txn.
func (t *Txn) Parent(joinKey []byte) ([]byte, bool, error) {
	return t.get(t.stateKey(prefixParent, joinKey, nil))
}

// PutParent stores the parent value of joinKey (the Txn copies it).
func (t *Txn) PutParent(joinKey, value []byte) error {
	return t.set(t.stateKey(prefixParent, joinKey, nil), value)
}

// DeleteParent removes the parent value of joinKey.
func (t *Txn) DeleteParent(joinKey []byte) error {
	return t.del(t.stateKey(prefixParent, joinKey, nil))
}

// Child returns the value of child (joinKey, childKey). The slice is valid
// until the next call on the Txn.
func (t *Txn) Child(joinKey, childKey []byte) ([]byte, bool, error) {
	return t.get(t.stateKey(prefixChild, joinKey, childKey))
}

// PutChild stores the value of child (joinKey, childKey) (the Txn copies
// it).
func (t *Txn) PutChild(joinKey, childKey, value []byte) error {
	if err := t.set(t.stateKey(prefixChild, joinKey, childKey), value); err != nil {
		return err
	}
	if c := t.s.cache; c != nil {
		if _, _, st := c.get(t.markKey(joinKey)); st != cacheHit {
			t.undo = c.write(t.mark, true, false, nil, t.undo, t.spill)
		}
	}
	return nil
}

// markKey builds joinKey's child mark key (see prefixChildMark) in t.mark.
func (t *Txn) markKey(joinKey []byte) []byte {
	t.mark = append(t.gens.header(t.mark[:0], prefixChildMark), joinKey...)
	return t.mark
}

// noChildren reports whether joinKey is known to have no children without
// a scan: the child keyspace is complete in the row cache (its marks too:
// they are evicted as child entries) and no child was ever put under
// joinKey in this generation.
func (t *Txn) noChildren(joinKey []byte) bool {
	c := t.s.cache
	if c == nil || !c.completeFor(prefixChild, t.gens[genSlot(prefixChild)]) {
		return false
	}
	_, _, st := c.get(t.markKey(joinKey))
	return st == cacheMiss
}

// DeleteChild removes the child record (joinKey, childKey).
func (t *Txn) DeleteChild(joinKey, childKey []byte) error {
	return t.del(t.stateKey(prefixChild, joinKey, childKey))
}

// Children streams the children of joinKey in child-key order. The slices
// passed to fn are valid only during the call: fn must copy what it keeps. Writes
// made by fn to this Txn are not seen by the iteration in progress.
func (t *Txn) Children(joinKey []byte, fn func(childKey, value []byte) error) error {
	return t.ChildrenAfter(joinKey, nil, fn)
}

// ChildrenAfter streams the children of joinKey whose child key sorts
// after the key after (all of them when after is nil), in child-key order,
// like Children.
func (t *Txn) ChildrenAfter(joinKey, after []byte, fn func(childKey, value []byte) error) error {
	if t.noChildren(joinKey) {
		return nil
	}
	prefix := append(t.gens.header(nil, prefixChild), joinKey...)
	it, done, err := t.iter(prefix)
	if err != nil {
		return err
	}
	var valid bool
	if after == nil {
		valid = it.First()
	} else {
		start := append(append([]byte(nil), prefix...), after...)
		valid = it.SeekGE(start)
		if valid && bytes.Equal(it.Key(), start) {
			valid = it.Next()
		}
	}
	for ; valid; valid = it.Next() {
		if err = fn(it.Key()[len(prefix):], it.Value()); err != nil {
			break
		}
	}
	return done(err)
}

// ScanChildren streams every child entry whose join key and child key,
// concatenated, start with prefix, in key order, fn receiving them
// concatenated: for callers that lay out their own keys in the child
// keyspace (package stage's multi-stage plans) and scan across join keys
// (a truncate, a plan's final rows). Like ChildrenAfter otherwise.
func (t *Txn) ScanChildren(prefix []byte, fn func(key, value []byte) error) error {
	head := t.gens.header(nil, prefixChild)
	it, done, err := t.iter(append(append([]byte(nil), head...), prefix...))
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		if err = fn(it.Key()[len(head):], it.Value()); err != nil {
			break
		}
	}
	return done(err)
}

// HasChildren reports whether joinKey has a child other than except (which
// may be nil).
func (t *Txn) HasChildren(joinKey, except []byte) (bool, error) {
	if t.noChildren(joinKey) {
		return false, nil
	}
	prefix := append(t.gens.header(nil, prefixChild), joinKey...)
	it, done, err := t.iter(prefix)
	if err != nil {
		return false, err
	}
	found := false
	for valid := it.First(); valid; valid = it.Next() {
		if except == nil || string(it.Key()[len(prefix):]) != string(except) {
			found = true
			break
		}
	}
	return found, done(nil)
}

// iter returns an iterator over the keys with prefix, seeing every write of
// the Txn so far, and a done function to call with the scan's error when
// finished. The Txn's iterator is reused (re-bounded, which also refreshes
// its view of the batch) unless a scan on it is still in progress.
func (t *Txn) iter(prefix []byte) (*pebble.Iterator, func(error) error, error) {
	opts := prefixBounds(prefix)
	reuse := !t.itBusy
	it := t.it
	if reuse && it != nil {
		it.SetOptions(opts)
	} else {
		var err error
		if it, err = t.b.NewIter(opts); err != nil {
			return nil, nil, fmt.Errorf("cdcjoin: state: %w", err)
		}
		if reuse {
			t.it = it
		}
	}
	t.itBusy = true
	return it, func(err error) error {
		if ierr := it.Error(); err == nil && ierr != nil {
			err = t.s.h.check(fmt.Errorf("cdcjoin: state: %w", ierr))
		}
		if reuse {
			t.itBusy = false
		} else if cerr := it.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("cdcjoin: state: %w", cerr)
		}
		return err
	}, nil
}

func (t *Txn) closeIter() {
	if t.it != nil {
		t.it.Close()
		t.it = nil
	}
	t.itBusy = false
	if t.spaceIt != nil {
		t.spaceIt.Close()
		t.spaceIt = nil
	}
	t.spaceBusy = false
}

// ChildScan streams the children of one join key (see Groups). It may be
// called at most once.
type ChildScan = func(fn func(childKey, value []byte) error) error

// Groups streams the join held in the state, grouped by join key, in
// join-key order: fn is called once per stored parent with its join key, its
// record and a ChildScan of its children. Children whose join key has no
// parent are skipped. It walks the parents and the children side by side
// (two sequential scans, no seek per parent), so a whole-state pass (a
// truncate, materializing the join) costs one read of the state. Slices and
// records passed to fn and to ChildScan callbacks are reused: copy what you
// keep. Writes made by the callbacks are not seen by the scans in progress.
func (t *Txn) Groups(fn func(joinKey, parent []byte, children ChildScan) error) error {
	if err := t.flushDirty(prefixParent); err != nil {
		return err
	}
	ph := t.gens.header(nil, prefixParent)
	ch := t.gens.header(nil, prefixChild)
	pit, err := t.b.NewIter(prefixBounds(ph))
	if err != nil {
		return fmt.Errorf("cdcjoin: state: %w", err)
	}
	defer pit.Close()
	cit, err := t.b.NewIter(prefixBounds(ch))
	if err != nil {
		return fmt.Errorf("cdcjoin: state: %w", err)
	}
	defer cit.Close()
	cvalid := cit.First()
	for pvalid := pit.First(); pvalid; pvalid = pit.Next() {
		jk := pit.Key()[len(ph):]
		// Skip children of join keys before jk. The tuple encoding is
		// prefix-free, so a child key (jk' ck) not starting with jk orders
		// like jk' against jk.
		for cvalid {
			rest := cit.Key()[len(ch):]
			if bytes.HasPrefix(rest, jk) || bytes.Compare(rest, jk) > 0 {
				break
			}
			cvalid = cit.Next()
		}
		scanned := false
		scan := func(yield func(childKey, value []byte) error) error {
			if scanned {
				return errors.New("cdcjoin: state: a join key's children scanned twice")
			}
			scanned = true
			for ; cvalid; cvalid = cit.Next() {
				rest := cit.Key()[len(ch):]
				if !bytes.HasPrefix(rest, jk) {
					break
				}
				if err := yield(rest[len(jk):], cit.Value()); err != nil {
					return err
				}
			}
			return nil
		}
		if err := fn(jk, pit.Value(), scan); err != nil {
			return err
		}
	}
	if err := pit.Error(); err != nil {
		return t.s.h.check(fmt.Errorf("cdcjoin: state: %w", err))
	}
	if err := cit.Error(); err != nil {
		return t.s.h.check(fmt.Errorf("cdcjoin: state: %w", err))
	}
	return nil
}

// ClearParents deletes every parent record.
func (t *Txn) ClearParents() error { return t.clear(prefixParent) }

// ClearChildren deletes every child record.
func (t *Txn) ClearChildren() error { return t.clear(prefixChild) }

// ClearChildIndex deletes the whole child index.
func (t *Txn) ClearChildIndex() error { return t.clear(prefixIndex) }

// clear moves the keyspace of prefix to its next generation and deletes the
// current one. Cached entries of the old generation become unreachable (their
// keys name it) and age out of the row cache.
func (t *Txn) clear(prefix byte) error {
	t.closeIter()
	// The generation's write-back entries go to the batch first, so that
	// the range deletion after them deletes them, as it deletes the rest.
	if err := t.flushDirty(prefix); err != nil {
		return err
	}
	old := t.gens.header(nil, prefix)
	if err := t.b.DeleteRange(old, prefixEnd(old), nil); err != nil {
		return fmt.Errorf("cdcjoin: state: delete range: %w", err)
	}
	t.gens[genSlot(prefix)]++
	t.genSet = true
	if t.s.cache != nil {
		// The new generation is empty: the cache holds it completely.
		t.s.cache.setComplete(prefix, t.gens[genSlot(prefix)])
	}
	return nil
}

// ChildIndex returns the child index entry of childKey (the keyer's
// encoding). The slice is valid until the next call on the Txn.
func (t *Txn) ChildIndex(childKey []byte) ([]byte, bool, error) {
	return t.get(t.stateKey(prefixIndex, childKey, nil))
}

// SetChildIndex stores childKey's index entry.
func (t *Txn) SetChildIndex(childKey, entry []byte) error {
	return t.set(t.stateKey(prefixIndex, childKey, nil), entry)
}

// DeleteChildIndex forgets childKey.
func (t *Txn) DeleteChildIndex(childKey []byte) error {
	return t.del(t.stateKey(prefixIndex, childKey, nil))
}

// ParentIndex returns the parent index entry of parentKey (the keyer's
// encoding). The slice is valid until the next call on the Txn. Only
// keying stages that resolve parents' TOAST placeholders keep a parent
// index.
func (t *Txn) ParentIndex(parentKey []byte) ([]byte, bool, error) {
	return t.get(t.stateKey(prefixPIndex, parentKey, nil))
}

// SetParentIndex stores parentKey's entry.
func (t *Txn) SetParentIndex(parentKey, entry []byte) error {
	return t.set(t.stateKey(prefixPIndex, parentKey, nil), entry)
}

// DeleteParentIndex forgets parentKey.
func (t *Txn) DeleteParentIndex(parentKey []byte) error {
	return t.del(t.stateKey(prefixPIndex, parentKey, nil))
}

// ClearParentIndex deletes the whole parent index.
func (t *Txn) ClearParentIndex() error { return t.clear(prefixPIndex) }

// SetPosition records next as the next offset to consume for
// topic/partition; it becomes durable with the rest of the Txn.
func (t *Txn) SetPosition(topic string, partition int32, next int64) error {
	t.key = positionKey(t.key[:0], topic, partition)
	return t.set(t.key, positionValue(next))
}

func positionValue(next int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(next)) }

// Position reads a position as seen by this Txn.
func (t *Txn) Position(topic string, partition int32) (int64, bool, error) {
	v, ok, err := t.get(positionKey(nil, topic, partition))
	if !ok || err != nil {
		return 0, false, err
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("%w: position value", ErrCorrupt)
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

// SetMeta sets a metadata value.
func (t *Txn) SetMeta(name string, value []byte) error { return t.set(metaKey(name), value) }

// Meta reads a metadata value as seen by this Txn (nil if absent).
func (t *Txn) Meta(name string) ([]byte, error) {
	v, ok, err := t.get(metaKey(name))
	if !ok || err != nil {
		return nil, err
	}
	return append([]byte(nil), v...), nil
}

// ErrCorrupt is returned (wrapped) when stored bytes cannot be decoded. It is
// row.ErrCorrupt, the sentinel of the row and key encodings.
var ErrCorrupt = row.ErrCorrupt

// Parents streams every parent value in join-key order.
func (t *Txn) Parents(fn func(joinKey, value []byte) error) error {
	return t.scan(prefixParent, fn)
}

// AllChildren streams every child value in key order, with or without a
// parent; key is the join key followed by the child key (split them with
// row.DecodeKey and the join key's arity).
func (t *Txn) AllChildren(fn func(key, value []byte) error) error {
	return t.scan(prefixChild, fn)
}

// ChildIndexes streams every child index entry in child-key order.
func (t *Txn) ChildIndexes(fn func(childKey, entry []byte) error) error {
	return t.scan(prefixIndex, fn)
}

// scan streams the current generation of a keyspace, seeing the Txn's
// writes. The slices passed to fn are valid only during the call.
func (t *Txn) scan(prefix byte, fn func(key, value []byte) error) error {
	if err := t.flushDirty(prefix); err != nil {
		return err
	}
	hdr := t.gens.header(nil, prefix)
	it, err := t.b.NewIter(prefixBounds(hdr))
	if err != nil {
		return fmt.Errorf("cdcjoin: state: %w", err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		if err = fn(it.Key()[len(hdr):], it.Value()); err != nil {
			break
		}
	}
	if ierr := it.Error(); err == nil && ierr != nil {
		err = fmt.Errorf("cdcjoin: state: %w", ierr)
	}
	if cerr := it.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("cdcjoin: state: %w", cerr)
	}
	return err
}

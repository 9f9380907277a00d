package joinstate

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// loadTableBytes is the size at which a Load starts a keyspace's next table
// (pebble's target file size for the bottom level, where an ingest into an
// empty keyspace lands).
const loadTableBytes = 128 << 20

// Load writes whole keyspaces of a state as sorted tables and ingests them,
// with metadata and input positions, in one atomic step (a bulk load: a
// snapshot or a rebuild, instead of writing row by row through the
// memtable). Each keyspace's entries must be added in increasing key order;
// different keyspaces may be interleaved. The keyspaces loaded should be
// empty in the store (a new state): a Load overwrites the keys it writes and
// leaves the others.
//
// Nothing is visible until Commit, which ingests every table at once: a
// crash before it leaves the state as it was, a crash after it leaves the
// whole load. Abort (or a failed Commit) removes the table files. The
// Store's row cache is emptied by Commit (it may hold absences the load
// contradicts). Not safe for concurrent use; no Txn may be open on the
// Store during Commit.
//
// The tables are built on a goroutine of the Load's own (started by the
// first entry, stopped and waited for by Commit and Abort): entries are
// handed to it in chunks of loadChunkBytes through a queue of
// loadQueueChunks, so that building tables (encoding, compression,
// filters) overlaps the caller's work. An error of that goroutine (keys
// out of order, I/O) is returned by a later add or by Commit.
type Load struct {
	s     *Store
	fs    vfs.FS
	dir   string
	wo    sstable.WriterOptions
	gens  generations
	meta  map[string][]byte // state key → value ('M' and 'O' keys)
	key   []byte
	done  bool
	chunk []byte // entries not yet handed to the writer

	// The writer goroutine and its queue (nil until the first entry).
	work  chan []byte
	free  chan []byte
	wdone chan struct{}
	werr  atomic.Pointer[error] // the writer's first error

	// Owned by the writer goroutine until it has stopped.
	tables [4]*loadTable // by genSlot
	files  []string
	next   int
	// warm holds the loaded entries while they fit in cacheKeepPct of the
	// row cache (warmBytes: their size in the cache, index slots
	// included), to put there after the ingest (see Commit); cold: they
	// did not fit.
	warm      []byte
	warmBytes int
	cold      bool
	warmLimit int
	mark      []byte // the last child mark kept
	markNext  []byte // scratch for the next one
}

// loadTable is one keyspace's current table.
type loadTable struct {
	w    *sstable.Writer
	last []byte
	any  bool
}

// BeginLoad starts a Load whose table files are written in dir (on the
// store's filesystem; created if absent, and best kept next to the store so
// that ingesting links instead of copying).
func (s *Store) BeginLoad(dir string) (*Load, error) {
	if err := s.fs.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cdcjoin: state: load: %w", err)
	}
	l := &Load{s: s, fs: s.fs, dir: dir, meta: map[string][]byte{}, cold: s.cache == nil}
	if s.cache != nil {
		l.warmLimit = s.cache.max / 100 * cacheKeepPct
	}
	l.wo = s.po.MakeWriterOptions(len(s.po.Levels)-1, s.db.TableFormat())
	s.mu.Lock()
	l.gens = s.gens
	s.mu.Unlock()
	return l, nil
}

// AddParent adds the parent record of joinKey (increasing joinKey order).
func (l *Load) AddParent(joinKey, value []byte) error {
	return l.add(prefixParent, joinKey, nil, value)
}

// AddChild adds the child record (joinKey, childKey) (increasing order of
// joinKey, then childKey).
func (l *Load) AddChild(joinKey, childKey, value []byte) error {
	return l.add(prefixChild, joinKey, childKey, value)
}

// AddChildIndex adds childKey's child index entry (increasing childKey
// order).
func (l *Load) AddChildIndex(childKey, entry []byte) error {
	return l.add(prefixIndex, childKey, nil, entry)
}

// AddParentIndex adds parentKey's parent index entry (increasing order).
func (l *Load) AddParentIndex(parentKey, entry []byte) error {
	return l.add(prefixPIndex, parentKey, nil, entry)
}

// SetMeta sets a metadata value, committed with the load. It never fails
// (the error is Txn.SetMeta's, for one interface of both).
func (l *Load) SetMeta(name string, value []byte) error {
	l.meta[string(metaKey(name))] = slices.Clone(value)
	return nil
}

// SetPosition records next as the next offset to consume for
// topic/partition, committed with the load. It never fails (see SetMeta).
func (l *Load) SetPosition(topic string, partition int32, next int64) error {
	l.meta[string(positionKey(nil, topic, partition))] = positionValue(next)
	return nil
}

// Records streams every parent record (parent true, key the join key),
// then every child record (key: join key and child key), as this Txn sees
// them, in key order. The slices are valid during the call only.
func (t *Txn) Records(fn func(parent bool, key, value []byte) error) error {
	for _, prefix := range []byte{prefixParent, prefixChild} {
		hdr := t.gens.header(nil, prefix)
		it, err := t.b.NewIter(prefixBounds(hdr))
		if err != nil {
			return fmt.Errorf("cdcjoin: state: %w", err)
		}
		for valid := it.First(); valid; valid = it.Next() {
			if err = fn(prefix == prefixParent, it.Key()[len(hdr):], it.Value()); err != nil {
				break
			}
		}
		if ierr := it.Error(); err == nil && ierr != nil {
			err = fmt.Errorf("cdcjoin: state: %w", ierr)
		}
		it.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// SyncWAL makes every commit so far durable (an fsync of the WAL), whatever
// Options.Sync says: for the few commits that must survive an OS crash (a
// bulk load's version clock, written before the load).
func (s *Store) SyncWAL() error {
	err := s.guard(func() error { return s.db.LogData(nil, pebble.Sync) })
	if err != nil {
		var f *Fault
		if errors.As(err, &f) {
			return err
		}
		return fmt.Errorf("cdcjoin: state: sync: %w", err)
	}
	return nil
}

// ErrLoadOrder is returned (wrapped) when a keyspace's entries are not
// added in increasing key order.
var ErrLoadOrder = errors.New("cdcjoin: state: load: keys out of order")

// Chunk sizes of the writer's queue.
const (
	loadChunkBytes  = 256 << 10
	loadQueueChunks = 4
)

// add queues one entry for the writer goroutine.
func (l *Load) add(prefix byte, a, b, value []byte) error {
	if l.done {
		return errors.New("cdcjoin: state: load already committed or aborted")
	}
	if err := l.writerErr(); err != nil {
		return err
	}
	if l.work == nil {
		l.work, l.free, l.wdone = make(chan []byte, loadQueueChunks), make(chan []byte, loadQueueChunks+2), make(chan struct{})
		go l.writeLoop()
	}
	if l.chunk == nil {
		select {
		case l.chunk = <-l.free:
		default:
			l.chunk = make([]byte, 0, loadChunkBytes+4096)
		}
	}
	c := append(l.chunk, prefix)
	c = binary.AppendUvarint(c, uint64(len(a)))
	c = binary.AppendUvarint(c, uint64(len(a)+len(b)))
	c = append(append(c, a...), b...)
	c = binary.AppendUvarint(c, uint64(len(value)))
	l.chunk = append(c, value...)
	if len(l.chunk) >= loadChunkBytes {
		l.work <- l.chunk
		l.chunk = nil
	}
	return nil
}

func (l *Load) writerErr() error {
	if p := l.werr.Load(); p != nil {
		return *p
	}
	return nil
}

// writeLoop builds the tables from the queued chunks until the queue is
// closed; after an error it drains the queue without writing.
func (l *Load) writeLoop() {
	defer close(l.wdone)
	for c := range l.work {
		for b := c; len(b) > 0 && l.werr.Load() == nil; {
			prefix := b[0]
			alen, n := binary.Uvarint(b[1:])
			klen, m := binary.Uvarint(b[1+n:])
			b = b[1+n+m:]
			k := b[:klen]
			b = b[klen:]
			vlen, o := binary.Uvarint(b)
			v := b[o : o+int(vlen)]
			b = b[o+int(vlen):]
			if err := l.write(prefix, k, alen, v); err != nil {
				l.werr.Store(&err)
			}
		}
		select {
		case l.free <- c[:0]:
		default:
		}
	}
}

// stopWriter hands over the last chunk, stops the writer goroutine and
// waits for it.
func (l *Load) stopWriter() error {
	if l.work == nil {
		return nil
	}
	if len(l.chunk) > 0 {
		l.work <- l.chunk
		l.chunk = nil
	}
	close(l.work)
	<-l.wdone
	l.work = nil
	return l.writerErr()
}

// write adds entry key (whose first alen bytes after the header are the
// first key part) to its keyspace's table. Writer goroutine only.
func (l *Load) write(prefix byte, ab []byte, alen uint64, value []byte) error {
	slot := genSlot(prefix)
	t := l.tables[slot]
	if t == nil {
		t = &loadTable{}
		l.tables[slot] = t
	}
	l.key = append(l.gens.header(l.key[:0], prefix), ab...)
	if t.any && string(l.key) <= string(t.last) {
		return fmt.Errorf("%w (keyspace %q)", ErrLoadOrder, prefix)
	}
	if t.w != nil && t.w.Raw().EstimatedSize() >= loadTableBytes {
		if err := l.finishTable(t); err != nil {
			return err
		}
	}
	if t.w == nil {
		w, err := l.create()
		if err != nil {
			return err
		}
		t.w = w
	}
	t.last, t.any = append(t.last[:0], l.key...), true
	if err := t.w.Set(l.key, value); err != nil {
		return fmt.Errorf("cdcjoin: state: load: %w", err)
	}
	l.keep(l.key, value)
	if prefix == prefixChild {
		// One mark per join key: its children come one after another (key
		// order), so a mark equal to the last one is already kept.
		m := append(l.gens.header(l.markNext[:0], prefixChildMark), ab[:alen]...)
		if string(m) != string(l.mark) {
			l.mark, l.markNext = m, l.mark
			l.keep(l.mark, nil)
		} else {
			l.markNext = m
		}
	}
	return nil
}

// keep remembers an entry for the row cache while the entries fit.
func (l *Load) keep(key, value []byte) {
	if l.cold {
		return
	}
	l.warmBytes += entrySize(key, value) + idxEntryBytes
	if l.warmBytes > l.warmLimit {
		l.cold, l.warm = true, nil
		return
	}
	l.warm = binary.AppendUvarint(l.warm, uint64(len(key)))
	l.warm = append(l.warm, key...)
	l.warm = binary.AppendUvarint(l.warm, uint64(len(value)))
	l.warm = append(l.warm, value...)
}

// warmCache empties the row cache and, if the loaded entries fit, puts
// them there; keyspaces that were held completely before the load (empty)
// then still are.
func (l *Load) warmCache() {
	c := l.s.cache
	if c == nil {
		return
	}
	var complete [4]bool
	for _, p := range []byte{prefixParent, prefixChild, prefixIndex, prefixPIndex} {
		complete[genSlot(p)] = c.completeFor(p, l.gens[genSlot(p)])
	}
	c.reset()
	if l.cold {
		return
	}
	for b := l.warm; len(b) > 0; {
		kl, n := binary.Uvarint(b)
		key := b[n : n+int(kl)]
		b = b[n+int(kl):]
		vl, m := binary.Uvarint(b)
		c.fill(key, true, b[m:m+int(vl)], nil)
		b = b[m+int(vl):]
	}
	for _, p := range []byte{prefixParent, prefixChild, prefixIndex, prefixPIndex} {
		if complete[genSlot(p)] {
			c.setComplete(p, l.gens[genSlot(p)])
		}
	}
	l.warm = nil
}

func (l *Load) create() (*sstable.Writer, error) {
	name := l.fs.PathJoin(l.dir, "load-"+strconv.Itoa(l.next)+".sst")
	l.next++
	f, err := l.fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: state: load: %w", err)
	}
	l.files = append(l.files, name)
	return sstable.NewWriter(objstorageprovider.NewFileWritable(f), l.wo), nil
}

// finishTable closes t's table (its file is synced by the writable).
func (l *Load) finishTable(t *loadTable) error {
	w := t.w
	t.w = nil
	if err := w.Close(); err != nil {
		return fmt.Errorf("cdcjoin: state: load: finish table: %w", err)
	}
	return nil
}

// Commit finishes the tables and ingests them with the metadata and
// positions, atomically. The row cache then holds the loaded entries if
// they fit in cacheKeepPct of it (and a keyspace that was empty stays held
// completely), else nothing. A load of no state entries commits its
// metadata and positions in a Txn instead. After an error the state is
// unchanged and the files are removed.
func (l *Load) Commit() error {
	if l.done {
		return errors.New("cdcjoin: state: load already committed or aborted")
	}
	if err := l.stopWriter(); err != nil {
		l.done = true
		l.abortTables()
		return err
	}
	if len(l.files) == 0 {
		l.done = true
		t := l.s.Begin()
		for k, v := range l.meta {
			if err := t.set([]byte(k), v); err != nil {
				t.Abort()
				return err
			}
		}
		return t.Commit()
	}
	err := l.finish()
	if err == nil {
		err = l.s.db.Ingest(context.Background(), l.files)
		l.s.untrust() // the ingested keys are in no recent-writes filter (durable.go)
		if err == nil {
			l.warmCache()
		} else {
			err = fmt.Errorf("cdcjoin: state: load: ingest: %w", err)
		}
	}
	l.done = true
	if rerr := l.removeFiles(); err == nil {
		err = rerr
	}
	return err
}

func (l *Load) finish() error {
	for _, t := range l.tables {
		if t != nil && t.w != nil {
			if err := l.finishTable(t); err != nil {
				return err
			}
		}
	}
	if len(l.meta) == 0 {
		return nil
	}
	w, err := l.create()
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(l.meta))
	for k := range l.meta {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := w.Set([]byte(k), l.meta[k]); err != nil {
			w.Close()
			return fmt.Errorf("cdcjoin: state: load: %w", err)
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("cdcjoin: state: load: finish table: %w", err)
	}
	return nil
}

// Abort drops the load and removes its files.
func (l *Load) Abort() {
	if l.done {
		return
	}
	l.done = true
	l.stopWriter()
	l.abortTables()
}

func (l *Load) abortTables() {
	for _, t := range l.tables {
		if t != nil && t.w != nil {
			t.w.Close()
			t.w = nil
		}
	}
	l.removeFiles()
}

// removeFiles removes the table files (ingest links them into the store,
// so the store keeps its copies).
func (l *Load) removeFiles() error {
	var errs []error
	for _, f := range l.files {
		if err := l.fs.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	l.files = nil
	if len(errs) > 0 {
		return fmt.Errorf("cdcjoin: state: load: remove tables: %w", errors.Join(errs...))
	}
	return nil
}

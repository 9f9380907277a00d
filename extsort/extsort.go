// Package extsort sorts (key, value) records by key with bounded memory:
// records are buffered up to a memory budget, each full buffer is sorted and
// spilled to a run file, and the runs are merged when the records are read
// back (a k-way merge). It is the sort behind cdcjoin's bulk loads, which
// turn a snapshot or a rebuild into sorted tables instead of writing row by
// row through a memtable.
//
// Keys compare bytewise. Records with equal keys come back in an unspecified
// order: callers that need an order among them (the last of several writes
// of one row, say) append a sequence number to the key.
//
// Memory: a Sorter holds at most Options.MemoryBytes of buffered records
// (their bytes plus 24 bytes of index each), allocated outside the Go heap,
// and, while merging, one read buffer of Options.ReadBufferBytes per run. Disk: every record is written to
// one run file once and read back once (when the records fit in the budget,
// nothing is written).
package extsort

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Options configure a Sorter.
type Options struct {
	// FS and Dir are where run files go. Dir is created if absent; the
	// Sorter removes its own files (run-<n> with its Name) on Close, not Dir.
	// FS defaults to the OS filesystem; Dir is required.
	FS  vfs.FS
	Dir string
	// Name prefixes the run files, so that several Sorters can share Dir.
	// Default "sort".
	Name string
	// MemoryBytes bounds the buffered records. Default 64 MiB; at least
	// 64 KiB.
	MemoryBytes int
	// ReadBufferBytes is the read buffer per run while merging. Default
	// 256 KiB.
	ReadBufferBytes int
}

// EnsureDefaults fills in the defaults of unset fields and returns o.
func (o *Options) EnsureDefaults() *Options {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Name == "" {
		o.Name = "sort"
	}
	if o.MemoryBytes == 0 {
		o.MemoryBytes = 64 << 20
	}
	if o.ReadBufferBytes == 0 {
		o.ReadBufferBytes = 256 << 10
	}
	return o
}

// Validate reports every problem of o at once (after EnsureDefaults).
func (o *Options) Validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("no directory for run files"))
	}
	if o.MemoryBytes < 64<<10 {
		errs = append(errs, fmt.Errorf("memory budget %d is below 64 KiB", o.MemoryBytes))
	}
	if o.ReadBufferBytes < 4<<10 {
		errs = append(errs, fmt.Errorf("read buffer %d is below 4 KiB", o.ReadBufferBytes))
	}
	if len(errs) > 0 {
		return fmt.Errorf("cdcjoin: extsort: %w", errors.Join(errs...))
	}
	return nil
}

// entry locates one buffered record: the first 8 key bytes (big-endian,
// zero-padded) decide most comparisons without touching the arena.
type entry struct {
	prefix uint64
	off    uint32 // of the key in the region
	klen   uint32
	vlen   uint32
}

const entryBytes = int(unsafe.Sizeof(entry{}))

// maxRecord bounds one record in a run file (a corrupt length is caught).
const maxRecord = 1 << 30

// Sorter accumulates records and returns them sorted by key. Add copies
// its arguments. Not safe for concurrent use. Close it to remove its run
// files (also after an error), after closing its Iterator.
//
// The buffer is one region of Options.MemoryBytes allocated outside the Go
// heap on first use: record bytes fill it from the start, their index
// entries from the end; when the two meet, the buffer is sorted and
// spilled.
type Sorter struct {
	o       Options
	region  []byte // nil until the first Add, and after Close or Spill(release)
	used    int    // record bytes at the start of region
	n       int    // entries at the end of region
	runs    []string
	total   uint64
	spilled uint64 // bytes written to runs
	next    int    // run file number
	sorted  bool
	closed  bool
}

// New returns an empty Sorter. It creates opts.Dir.
func New(opts Options) (*Sorter, error) {
	if err := opts.EnsureDefaults().Validate(); err != nil {
		return nil, err
	}
	if err := opts.FS.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("cdcjoin: extsort: %w", err)
	}
	return &Sorter{o: opts}, nil
}

// Len is the number of records added.
func (s *Sorter) Len() uint64 { return s.total }

// SpilledBytes is the number of bytes written to run files so far.
func (s *Sorter) SpilledBytes() uint64 { return s.spilled }

// Runs is the number of run files written so far.
func (s *Sorter) Runs() int { return len(s.runs) }

// BufferedBytes is the memory the buffered records take (bytes and index).
func (s *Sorter) BufferedBytes() int { return s.used + s.n*entryBytes }

// entries is the index of the buffered records (in the region's tail).
func (s *Sorter) entries() []entry {
	if s.n == 0 {
		return nil
	}
	end := len(s.region) &^ 7
	return unsafe.Slice((*entry)(unsafe.Pointer(&s.region[end-s.n*entryBytes])), s.n)
}

// Add adds a record. It spills a full buffer to a run file first (so it may
// block on disk I/O). Errors are I/O errors, or a record that does not fit
// in the memory budget.
func (s *Sorter) Add(key, value []byte) error {
	if s.sorted {
		return errors.New("cdcjoin: extsort: Add after Sort")
	}
	size := len(key) + len(value)
	if size+entryBytes+8 > s.o.MemoryBytes {
		return fmt.Errorf("cdcjoin: extsort: a record of %d bytes does not fit in the sort memory (%d bytes)", size, s.o.MemoryBytes)
	}
	if s.region == nil {
		var err error
		if s.region, err = allocRegion(s.o.MemoryBytes); err != nil {
			return err
		}
	}
	if s.used+size+(s.n+1)*entryBytes > len(s.region)&^7 {
		if err := s.spill(); err != nil {
			return err
		}
	}
	off := s.used
	s.used += copy(s.region[off:], key)
	s.used += copy(s.region[s.used:], value)
	s.n++
	s.entries()[0] = entry{prefix: prefixOf(key), off: uint32(off), klen: uint32(len(key)), vlen: uint32(len(value))}
	s.total++
	return nil
}

func prefixOf(key []byte) uint64 {
	if len(key) >= 8 {
		return binary.BigEndian.Uint64(key)
	}
	var b [8]byte
	copy(b[:], key)
	return binary.BigEndian.Uint64(b[:])
}

func (s *Sorter) key(e *entry) []byte { return s.region[e.off : e.off+e.klen] }

func (s *Sorter) sortBuffer() {
	slices.SortFunc(s.entries(), func(a, b entry) int {
		if a.prefix != b.prefix {
			if a.prefix < b.prefix {
				return -1
			}
			return 1
		}
		return bytes.Compare(s.key(&a), s.key(&b))
	})
}

// Spill writes the buffered records to a run file now (a caller that needs
// the memory for something else); with release, the buffer's memory is
// returned to the OS (the next Add allocates it again).
func (s *Sorter) Spill(release bool) error {
	if s.sorted {
		return errors.New("cdcjoin: extsort: Spill after Sort")
	}
	if s.n > 0 {
		if err := s.spill(); err != nil {
			return err
		}
	}
	if release {
		freeRegion(s.region)
		s.region = nil
	}
	return nil
}

// spill sorts the buffer and writes it to a new run file.
func (s *Sorter) spill() error {
	s.sortBuffer()
	name := s.o.FS.PathJoin(s.o.Dir, s.o.Name+"-run-"+strconv.Itoa(s.next))
	s.next++
	f, err := s.o.FS.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("cdcjoin: extsort: %w", err)
	}
	s.runs = append(s.runs, name)
	w := bufio.NewWriterSize(f, 1<<20)
	var hdr [2 * binary.MaxVarintLen32]byte
	es := s.entries()
	for i := range es {
		e := &es[i]
		n := binary.PutUvarint(hdr[:], uint64(e.klen))
		n += binary.PutUvarint(hdr[n:], uint64(e.vlen))
		w.Write(hdr[:n])
		w.Write(s.region[e.off : e.off+e.klen+e.vlen])
		s.spilled += uint64(n) + uint64(e.klen+e.vlen)
	}
	err = w.Flush()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cdcjoin: extsort: write run: %w", err)
	}
	s.used, s.n = 0, 0
	return nil
}

// Sort ends adding and returns an iterator over all records in key order.
// The Sorter must not be used again except to Close it (which also closes
// the iterator's files); the iterator reads from the run files and the
// in-memory buffer.
func (s *Sorter) Sort() (*Iterator, error) {
	if s.sorted {
		return nil, errors.New("cdcjoin: extsort: Sort called twice")
	}
	s.sorted = true
	s.sortBuffer()
	it := &Iterator{s: s}
	for _, name := range s.runs {
		f, err := s.o.FS.Open(name)
		if err != nil {
			it.Close()
			return nil, fmt.Errorf("cdcjoin: extsort: %w", err)
		}
		r := &runReader{f: f, r: bufio.NewReaderSize(f, s.o.ReadBufferBytes)}
		it.files = append(it.files, f)
		it.srcs = append(it.srcs, r)
	}
	if s.n > 0 {
		it.srcs = append(it.srcs, &memReader{s: s, es: s.entries()})
	}
	for _, src := range it.srcs {
		ok, err := src.next()
		if err != nil {
			it.Close()
			return nil, err
		}
		if ok {
			it.heap = append(it.heap, heapItem{src, prefixOf(src.key())})
		}
	}
	it.init()
	return it, nil
}

// Reset drops every record added so far (their run files too); the Sorter
// can be used again.
func (s *Sorter) Reset() error {
	err := s.removeRuns()
	s.used, s.n, s.total, s.sorted = 0, 0, 0, false
	return err
}

func (s *Sorter) removeRuns() error {
	var errs []error
	for _, name := range s.runs {
		if err := s.o.FS.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	s.runs = s.runs[:0]
	if len(errs) > 0 {
		return fmt.Errorf("cdcjoin: extsort: remove runs: %w", errors.Join(errs...))
	}
	return nil
}

// Close removes the run files and releases the buffer. An Iterator of the
// Sorter must be closed first (after Close, its Next reports an error).
func (s *Sorter) Close() error {
	err := s.removeRuns()
	freeRegion(s.region)
	s.region, s.used, s.n = nil, 0, 0
	s.closed = true
	return err
}

// source is one sorted input of the merge.
type source interface {
	next() (bool, error) // advance; false at the end
	key() []byte
	value() []byte
}

// memReader reads the sorted in-memory buffer.
type memReader struct {
	s  *Sorter
	es []entry
	i  int // 1 + index of the current entry
}

func (m *memReader) next() (bool, error) {
	if m.s.closed {
		return false, errors.New("cdcjoin: extsort: Sorter closed while iterating")
	}
	m.i++
	return m.i <= len(m.es), nil
}

func (m *memReader) key() []byte { return m.s.key(&m.es[m.i-1]) }

func (m *memReader) value() []byte {
	e := &m.es[m.i-1]
	return m.s.region[e.off+e.klen : e.off+e.klen+e.vlen]
}

// runReader reads a run file.
type runReader struct {
	f   vfs.File
	r   *bufio.Reader
	buf []byte
	kl  int
}

func (r *runReader) next() (bool, error) {
	kl, err := binary.ReadUvarint(r.r)
	if err == io.EOF {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cdcjoin: extsort: read run: %w", err)
	}
	vl, err := binary.ReadUvarint(r.r)
	if err != nil || kl+vl >= maxRecord {
		return false, fmt.Errorf("cdcjoin: extsort: corrupt run (lengths %d, %d): %w", kl, vl, err)
	}
	n := int(kl + vl)
	if cap(r.buf) < n {
		r.buf = make([]byte, n, max(n, 2*cap(r.buf)))
	}
	r.buf = r.buf[:n]
	if _, err := io.ReadFull(r.r, r.buf); err != nil {
		return false, fmt.Errorf("cdcjoin: extsort: read run: %w", err)
	}
	r.kl = int(kl)
	return true, nil
}

func (r *runReader) key() []byte   { return r.buf[:r.kl] }
func (r *runReader) value() []byte { return r.buf[r.kl:] }

// Iterator returns the sorted records: call Next, then Key and Value, until
// Next returns false; then check Err.
type Iterator struct {
	s     *Sorter
	srcs  []source
	files []vfs.File
	heap  []heapItem // min-heap by key; heap[0] is the current record after Next
	cur   source
	err   error
}

// heapItem is a source and the first 8 bytes of its current key.
type heapItem struct {
	src    source
	prefix uint64
}

func (it *Iterator) less(i, j int) bool {
	a, b := &it.heap[i], &it.heap[j]
	if a.prefix != b.prefix {
		return a.prefix < b.prefix
	}
	return bytes.Compare(a.src.key(), b.src.key()) < 0
}

func (it *Iterator) init() {
	for i := len(it.heap)/2 - 1; i >= 0; i-- {
		it.down(i)
	}
}

func (it *Iterator) down(i int) {
	n := len(it.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && it.less(r, l) {
			m = r
		}
		if !it.less(m, i) {
			return
		}
		it.heap[i], it.heap[m] = it.heap[m], it.heap[i]
		i = m
	}
}

// Next moves to the next record. The slices of the previous record are
// invalid afterwards.
func (it *Iterator) Next() bool {
	if it.err != nil {
		return false
	}
	if it.cur != nil {
		ok, err := it.cur.next()
		if err != nil {
			it.err = err
			return false
		}
		if ok {
			it.heap[0].prefix = prefixOf(it.cur.key())
		} else {
			last := len(it.heap) - 1
			it.heap[0] = it.heap[last]
			it.heap = it.heap[:last]
		}
		it.down(0)
	}
	if len(it.heap) == 0 {
		it.cur = nil
		return false
	}
	it.cur = it.heap[0].src
	return true
}

// Key is the current record's key, valid until Next.
func (it *Iterator) Key() []byte { return it.cur.key() }

// Value is the current record's value, valid until Next.
func (it *Iterator) Value() []byte { return it.cur.value() }

// Err is the first I/O error met.
func (it *Iterator) Err() error { return it.err }

// Close closes the run files (the Sorter's Close removes them).
func (it *Iterator) Close() error {
	var err error
	for _, f := range it.files {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("cdcjoin: extsort: %w", cerr)
		}
	}
	it.files, it.heap, it.cur = nil, nil, nil
	return err
}

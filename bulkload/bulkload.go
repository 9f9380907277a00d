// Package bulkload applies a whole snapshot, or the rebuild of a keyed
// partition, to an empty join state by sorting instead of row by row: the
// records are sorted externally (package extsort: bounded memory, sorted
// runs spilled to disk), each row's records are folded into its final state,
// the sorted parents and children are written as tables (joinstate.Load)
// and, for a snapshot, the joined rows are emitted by a streaming merge of
// the sorted parents and children.
//
// It reaches the state and the ClickHouse-visible output that the Keyer and
// the Join reach applying the same records one by one from an empty state:
//
//   - a row's stored version is the version of the record that last changed
//     it (an upsert equal to the stored row changes nothing; TOAST
//     placeholders keep the stored values; a snapshot child's join key
//     comes from its completed row, as the child index would resolve it);
//   - every joined row is emitted once, as an upsert whose version is the
//     larger of its parent's and its child's versions, which is the version
//     the record-by-record path emits last for that row; a LEFT join's
//     parent without children is emitted padded, at the version of the
//     record that last made it childless (its upsert, a delete of its last
//     child, or a truncate of the children);
//   - rows that appeared and disappeared within the load are not emitted,
//     and nothing is retracted (every row is new).
//
// Versions are the caller's: the same records with the same versions give
// the same state and the same (row, version) pairs, so a load that crashed
// is simply run again.
//
// Memory: at most Options.MemoryBytes of buffered records across the
// sorters (outside the Go heap), plus a 256 KiB read buffer per spilled run
// while merging, plus one row of each side being folded. Disk: a snapshot's children are
// spilled twice (sorted by child key to fold them and build the child
// index, then by join key), its parents once; a rebuild's records once.
package bulkload

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/extsort"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/version"
)

// Mode selects what a Loader is fed.
type Mode uint8

// Modes.
const (
	// Snapshot: decoded snapshot reads of a new state (Parent, Child). A
	// child's join key comes from its row; the child index is written.
	Snapshot Mode = iota + 1
	// Rebuild: keyed inputs of one keyed partition (Apply): upserts,
	// deletes and truncates of both sides, children addressed by (join key,
	// child key). No child index (the keying stage keeps it).
	Rebuild
)

// Options configure a Loader.
type Options struct {
	Mode Mode
	// FS and Dir hold the spilled runs. Dir is dedicated to the Loader:
	// New empties it (runs of a load that crashed) and Close removes it.
	// FS defaults to the OS filesystem; Dir is required.
	FS  vfs.FS
	Dir string
	// MemoryBytes bounds the buffered records of all sorters together.
	// Default 256 MiB; at least 1 MiB.
	MemoryBytes int
}

// EnsureDefaults fills in the defaults of unset fields and returns o.
func (o *Options) EnsureDefaults() *Options {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.MemoryBytes == 0 {
		o.MemoryBytes = 256 << 20
	}
	return o
}

// Validate reports every problem of o at once (after EnsureDefaults).
func (o *Options) Validate() error {
	var errs []error
	if o.Mode != Snapshot && o.Mode != Rebuild {
		errs = append(errs, fmt.Errorf("unknown mode %d", o.Mode))
	}
	if o.Dir == "" {
		errs = append(errs, errors.New("no spill directory"))
	}
	if o.MemoryBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("memory budget %d is below 1 MiB", o.MemoryBytes))
	}
	if len(errs) > 0 {
		return fmt.Errorf("cdcjoin: bulk load: %w", errors.Join(errs...))
	}
	return nil
}

// Writer receives the loaded state, each keyspace in increasing key order
// (keyspaces interleaved). *joinstate.Load implements it.
type Writer interface {
	AddParent(joinKey, value []byte) error
	AddChild(joinKey, childKey, value []byte) error
	AddChildIndex(childKey, entry []byte) error
}

// Result counts what Finish wrote and emitted.
type Result struct {
	Records      uint64 // records fed
	Parents      uint64 // parent records written
	Children     uint64 // child records written
	IndexEntries uint64 // child index entries written (Snapshot)
	Upserts      uint64 // joined rows emitted (padded ones included)
	SpilledBytes uint64 // bytes written to sorted runs
}

// Loader accumulates the records of one load. Not safe for concurrent use.
// Close it (also after Finish or an error) to remove its runs.
type Loader struct {
	spec     *keyed.Spec
	o        Options
	parents  *extsort.Sorter
	children *extsort.Sorter
	folded   *extsort.Sorter // Snapshot: children by (join key, child key)
	truncs   [3][]uint64     // Rebuild: truncate versions by side (row.Side)
	seq      uint64
	lastVer  uint64
	key, val []byte
	res      Result
	finished bool
}

// Record kinds in the sorters' values.
const (
	kindDelete = 0 // a delete (Rebuild), or a "deleted at" marker (folded children)
	kindUpsert = 1
	kindLoad   = 2 // a record stored as is, with its versions (ParentLoad, ChildLoad)
)

// New returns an empty Loader; it empties opts.Dir.
func New(spec *keyed.Spec, opts Options) (*Loader, error) {
	if err := opts.EnsureDefaults().Validate(); err != nil {
		return nil, err
	}
	if err := opts.FS.RemoveAll(opts.Dir); err != nil {
		return nil, fmt.Errorf("cdcjoin: bulk load: %w", err)
	}
	l := &Loader{spec: spec, o: opts}
	var err error
	// Children are about twice the parents in a one-to-many join.
	if l.parents, err = l.sorter("parents", opts.MemoryBytes/3); err != nil {
		return nil, err
	}
	if l.children, err = l.sorter("children", opts.MemoryBytes-opts.MemoryBytes/3); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func (l *Loader) sorter(name string, budget int) (*extsort.Sorter, error) {
	return extsort.New(extsort.Options{FS: l.o.FS, Dir: l.o.Dir, Name: name, MemoryBytes: budget})
}

// Len is the number of records fed so far.
func (l *Loader) Len() uint64 { return l.res.Records }

// Close removes the spilled runs and the spill directory.
func (l *Loader) Close() error {
	var errs []error
	for _, s := range []*extsort.Sorter{l.parents, l.children, l.folded} {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	if err := l.o.FS.RemoveAll(l.o.Dir); err != nil {
		errs = append(errs, fmt.Errorf("cdcjoin: bulk load: %w", err))
	}
	return errors.Join(errs...)
}

func (l *Loader) check(version uint64) error {
	if l.finished {
		return errors.New("cdcjoin: bulk load: record after Finish")
	}
	if version < l.lastVer {
		return fmt.Errorf("cdcjoin: bulk load: version %d after %d: versions must not decrease", version, l.lastVer)
	}
	l.lastVer = version
	l.res.Records++
	l.seq++
	return nil
}

// record is one fed record as stored in a sorter: the key is the row's key
// and a sequence number; the value is
//
//	kind, uvarint at (the version it was applied at), uvarint partition+1,
//	for a load: uvarint version, uvarint pad version; the row (upserts and
//	loads, row.AppendRow)
type record struct {
	kind     byte
	at       uint64
	part     int32 // source partition (-1: unknown)
	ver, pad uint64
	row      []byte
}

// add adds (a ‖ b ‖ seq, r) to s, with vals as r's row.
func (l *Loader) add(s *extsort.Sorter, a, b []byte, r *record, vals []row.Value) error {
	l.key = binary.BigEndian.AppendUint64(append(append(l.key[:0], a...), b...), l.seq)
	l.val = binary.AppendUvarint(append(l.val[:0], r.kind), r.at)
	l.val = binary.AppendUvarint(l.val, uint64(r.part+1))
	if r.kind == kindLoad {
		l.val = binary.AppendUvarint(binary.AppendUvarint(l.val, r.ver), r.pad)
	}
	if vals != nil {
		l.val = row.AppendRow(l.val, vals)
	}
	return s.Add(l.key, l.val)
}

// Parent feeds a snapshot read of the parent joinKey (Snapshot mode), from
// source partition partition. Versions must not decrease from one record
// to the next.
func (l *Loader) Parent(joinKey []byte, version uint64, partition int32, vals []row.Value) error {
	if l.o.Mode != Snapshot {
		return errors.New("cdcjoin: bulk load: Parent needs Snapshot mode")
	}
	if err := l.check(version); err != nil {
		return err
	}
	return l.add(l.parents, joinKey, nil, &record{kind: kindUpsert, at: version, part: partition}, vals)
}

// Child feeds a snapshot read of the child childKey (Snapshot mode), from
// source partition partition; its join key is resolved from vals when the
// load finishes.
func (l *Loader) Child(childKey []byte, version uint64, partition int32, vals []row.Value) error {
	if l.o.Mode != Snapshot {
		return errors.New("cdcjoin: bulk load: Child needs Snapshot mode")
	}
	if err := l.check(version); err != nil {
		return err
	}
	return l.add(l.children, childKey, nil, &record{kind: kindUpsert, at: version, part: partition}, vals)
}

// Apply feeds one keyed input (Rebuild mode) applied at version.
func (l *Loader) Apply(in *keyed.Input, version uint64) error {
	if l.o.Mode != Rebuild {
		return errors.New("cdcjoin: bulk load: Apply needs Rebuild mode")
	}
	if err := l.check(version); err != nil {
		return err
	}
	r := record{at: version, part: -1}
	switch in.Kind {
	case keyed.ParentUpsert, keyed.ChildUpsert:
		r.kind = kindUpsert
	case keyed.ParentDelete, keyed.ChildDelete:
		r.kind = kindDelete
	case keyed.ParentLoad, keyed.ChildLoad:
		r.kind, r.ver, r.pad = kindLoad, in.Version, in.PadVersion
	case keyed.Truncate:
		l.truncs[in.Side] = append(l.truncs[in.Side], version)
		return nil
	default:
		return fmt.Errorf("cdcjoin: bulk load: cannot apply a %s input", in.Kind)
	}
	if r.kind == kindUpsert && in.PartitionKnown {
		r.part = in.Partition
	}
	var vals []row.Value
	if r.kind != kindDelete {
		vals = in.Row
	}
	if in.Side == row.Parent {
		return l.add(l.parents, in.JoinKey, nil, &r, vals)
	}
	return l.add(l.children, in.JoinKey, in.ChildKey, &r, vals)
}

// split returns a sorter record's row key (without the sequence number)
// and decodes its value into r (r.row aliases val).
func split(key, val []byte, r *record) ([]byte, error) {
	if len(key) < 8 || len(val) == 0 {
		return nil, fmt.Errorf("%w: bulk load record", row.ErrCorrupt)
	}
	r.kind, val = val[0], val[1:]
	var n, m int
	var p uint64
	if r.at, n = binary.Uvarint(val); n > 0 {
		p, m = binary.Uvarint(val[n:])
	}
	if n <= 0 || m <= 0 || p > 1<<31 {
		return nil, fmt.Errorf("%w: bulk load record versions", row.ErrCorrupt)
	}
	r.part, val = int32(p)-1, val[n+m:]
	r.ver, r.pad = r.at, 0
	if r.kind == kindLoad {
		if r.ver, n = binary.Uvarint(val); n > 0 {
			r.pad, m = binary.Uvarint(val[n:])
		}
		if n <= 0 || m <= 0 {
			return nil, fmt.Errorf("%w: bulk load record versions", row.ErrCorrupt)
		}
		val = val[n+m:]
	}
	r.row = val
	return key[:len(key)-8], nil
}

// KeyedRebuild feeds a Rebuild-mode Loader with the records of one keyed
// partition (the keyed log's records, keyedlog.Decode: inputs and epoch
// markers, never the hot-key router's), in offset order: each input at the version its offset has on Clock, which the
// partition's epoch markers raise on the way, as the join stage would
// apply them. Not safe for concurrent use.
type KeyedRebuild struct {
	L     *Loader
	Spec  *keyed.Spec
	Clock version.Clock
	// Last is the offset of the last record fed (-1 before the first);
	// Records counts them.
	Last    int64
	Records int
	m       keyedlog.Msg
}

// NewKeyedRebuild returns a KeyedRebuild feeding l, starting from clock.
func NewKeyedRebuild(l *Loader, spec *keyed.Spec, clock version.Clock) *KeyedRebuild {
	return &KeyedRebuild{L: l, Spec: spec, Clock: clock, Last: -1}
}

// Add feeds the record at offset (records at or before Last are skipped:
// redelivered). Errors are bad records (wrapped) or the Loader's.
func (r *KeyedRebuild) Add(offset int64, key, value []byte) error {
	if offset <= r.Last {
		return nil
	}
	if err := keyedlog.Decode(r.Spec, key, value, nil, &r.m); err != nil {
		return fmt.Errorf("keyed record @%d: %w", offset, err)
	}
	switch r.m.Kind {
	case keyedlog.KindEpoch:
		r.Clock.Raise(offset, r.m.Epoch)
	case keyedlog.KindStep:
		// Budget for fan-outs in progress: a rebuild does none.
	case keyedlog.KindInput:
		if err := r.L.Apply(&r.m.In, r.Clock.At(offset)); err != nil {
			return err
		}
	default:
		return fmt.Errorf("keyed record @%d: a %s record: the hot-key router's records are rebuilt by the router", offset, r.m.Kind)
	}
	r.Last = offset
	r.Records++
	return nil
}

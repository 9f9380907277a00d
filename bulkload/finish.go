package bulkload

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cdcjoin/cdcjoin/extsort"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
)

// rowFold is one row's state while its records are folded in order, as the
// Join (or the Keyer's child index) would keep it.
type rowFold struct {
	live   bool
	ver    uint64      // stored version: of the record that last changed the row (a load's own)
	at     uint64      // version the last change was applied at (orders it against removals)
	pad    uint64      // pad version: a load's, carried by later changes (0 for a new row)
	loaded bool        // the last change was a load
	part   int32       // source partition of the last change (-1: unknown)
	vals   []row.Value // the row (valid while live)
	delVer uint64      // version at which a live row was last removed (0: never)
	in     []row.Value // scratch: the record's row
	merged []row.Value // scratch
}

func (f *rowFold) reset() {
	f.live, f.ver, f.at, f.pad, f.loaded, f.part, f.delVer = false, 0, 0, 0, false, -1, 0
	f.vals = f.vals[:0]
}

// apply folds one record into f.
func (f *rowFold) apply(r *record) error {
	switch r.kind {
	case kindDelete:
		f.remove(r.at)
		return nil
	case kindLoad:
		var err error
		if f.vals, err = row.DecodeRow(f.vals[:0], r.row); err != nil {
			return err
		}
		f.live, f.ver, f.at, f.pad, f.loaded, f.part = true, r.ver, r.at, r.pad, true, -1
		return nil
	}
	var err error
	if f.in, err = row.DecodeRow(f.in[:0], r.row); err != nil {
		return err
	}
	var same bool
	f.merged, same = keyed.CompleteRow(f.merged, f.in, f.vals, f.live)
	if !f.live || !same {
		if !f.live {
			f.pad = 0
		}
		f.vals, f.merged = f.merged, f.vals
		f.ver, f.at, f.loaded = r.at, r.at, false
		// A change keeps the partition it came from, when known, else the
		// row's (the Join's rule for parent records).
		if r.part >= 0 || !f.live {
			f.part = r.part
		}
	}
	f.live = true
	return nil
}

func (f *rowFold) remove(v uint64) {
	if f.live {
		f.live, f.delVer = false, v
	}
}

// truncations applies the truncates of one side to folds: a row live when a
// truncate happens is removed at its version.
type truncations []uint64

// between applies to f the first truncate after version after and before
// version before (exclusive), if any.
func (t truncations) between(f *rowFold, after, before uint64) {
	i, _ := slices.BinarySearch(t, after+1)
	if i < len(t) && t[i] < before {
		f.remove(t[i])
	}
}

// group reads a sorter's records one row (records sharing a key without
// the sequence number) at a time.
type group struct {
	it    *extsort.Iterator
	valid bool
	key   []byte // current group's key
	r     record
}

func newGroup(it *extsort.Iterator) *group {
	g := &group{it: it}
	g.valid = it.Next()
	return g
}

// fold folds the next group into f (after reset) and returns its key
// (valid until the next call), or nil at the end. truncs (may be nil) are
// the side's truncates.
func (g *group) fold(f *rowFold, truncs truncations) ([]byte, error) {
	if !g.valid {
		return nil, g.it.Err()
	}
	f.reset()
	k, err := split(g.it.Key(), g.it.Value(), &g.r)
	if err != nil {
		return nil, err
	}
	g.key = append(g.key[:0], k...)
	prev := uint64(0)
	for g.valid {
		k, err := split(g.it.Key(), g.it.Value(), &g.r)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(k, g.key) {
			break
		}
		truncs.between(f, prev, g.r.at)
		if err := f.apply(&g.r); err != nil {
			return nil, err
		}
		prev = g.r.at
		g.valid = g.it.Next()
	}
	truncs.between(f, prev, ^uint64(0))
	return g.key, g.it.Err()
}

// Finish sorts what was fed, writes the final state to w (parents,
// children and, for a snapshot, the child index, each in key order) and, if
// emit is not nil, emits every joined row (see the package doc). The Change
// passed to emit is reused. No records may be fed afterwards.
func (l *Loader) Finish(w Writer, emit keyed.Emit) (Result, error) {
	if l.finished {
		return l.res, errors.New("cdcjoin: bulk load: Finish called twice")
	}
	l.finished = true
	var children childSource
	if l.o.Mode == Snapshot {
		var err error
		if children, err = l.foldSnapshotChildren(w); err != nil {
			return l.res, err
		}
	} else {
		it, err := l.children.Sort()
		if err != nil {
			return l.res, err
		}
		defer it.Close()
		children = &rebuildChildren{g: newGroup(it), truncs: l.truncs[row.Child]}
	}
	pit, err := l.parents.Sort()
	if err != nil {
		return l.res, err
	}
	defer pit.Close()
	m := merger{l: l, w: w, emit: emit, parents: newGroup(pit), children: children, truncs: l.truncs[row.Parent]}
	err = m.run()
	for _, s := range []*extsort.Sorter{l.parents, l.children, l.folded} {
		if s != nil {
			l.res.SpilledBytes += s.SpilledBytes()
		}
	}
	return l.res, err
}

// child is one folded child: live (with its row) or removed at delVer.
type child struct {
	jk, ck []byte
	live   bool
	ver    uint64
	vals   []row.Value
	delVer uint64
}

// childSource yields folded children in (join key, child key) order;
// next returns false at the end.
type childSource interface {
	next(c *child) (bool, error)
}

// rebuildChildren folds a rebuild's child records by (join key, child key).
type rebuildChildren struct {
	g      *group
	truncs truncations
	f      rowFold
	jkLen  func([]byte) (int, error)
}

func (r *rebuildChildren) next(c *child) (bool, error) {
	for {
		k, err := r.g.fold(&r.f, r.truncs)
		if k == nil || err != nil {
			return false, err
		}
		if !r.f.live && r.f.delVer == 0 {
			continue // never live: nothing to write, nothing to pad
		}
		n, err := r.jkLen(k)
		if err != nil {
			return false, err
		}
		*c = child{jk: k[:n], ck: k[n:], live: r.f.live, ver: r.f.ver, vals: r.f.vals, delVer: r.f.delVer}
		return true, nil
	}
}

// jkLen returns the length of the join key at the start of key.
func (l *Loader) jkLen(scratch *[]row.Value) func([]byte) (int, error) {
	return func(key []byte) (int, error) {
		var n int
		var err error
		*scratch, n, err = row.DecodeKey((*scratch)[:0], key, len(l.spec.ParentKey))
		if err != nil {
			return 0, fmt.Errorf("cdcjoin: bulk load: %w", err)
		}
		return n, nil
	}
}

// snapshotChildren reads the folded snapshot children: (join key, child
// key) → kind, version, row.
type snapshotChildren struct {
	it    *extsort.Iterator
	vals  []row.Value
	jkLen func([]byte) (int, error)
}

func (s *snapshotChildren) next(c *child) (bool, error) {
	if !s.it.Next() {
		return false, s.it.Err()
	}
	key := s.it.Key()
	val := s.it.Value()
	if len(val) == 0 {
		return false, fmt.Errorf("%w: bulk load folded child", row.ErrCorrupt)
	}
	v, n := binary.Uvarint(val[1:])
	if n <= 0 {
		return false, fmt.Errorf("%w: bulk load folded child version", row.ErrCorrupt)
	}
	jn, err := s.jkLen(key)
	if err != nil {
		return false, err
	}
	*c = child{jk: key[:jn], ck: key[jn:], live: val[0] == kindUpsert}
	if c.live {
		c.ver = v
		if s.vals, err = row.DecodeRow(s.vals[:0], val[1+n:]); err != nil {
			return false, err
		}
		c.vals = s.vals
	} else {
		c.delVer = v
	}
	return true, nil
}

// foldSnapshotChildren folds each snapshot child's reads (by child key, in
// order), as the Keyer and the Join would: the join key comes from the
// completed row; a child whose join key changed was deleted under the old
// one. It writes the child index and sorts the folded children by (join
// key, child key) for the merge.
func (l *Loader) foldSnapshotChildren(w Writer) (childSource, error) {
	// The folded children get what the two buffers leave of the budget
	// (at least a third): the children's buffer goes to disk first when
	// it spilled before (the data is large) or the two take most of it.
	b := l.o.MemoryBytes
	if l.children.Runs() > 0 || l.parents.BufferedBytes()+l.children.BufferedBytes() > 2*b/3 {
		if err := l.children.Spill(true); err != nil {
			return nil, err
		}
	}
	it, err := l.children.Sort()
	if err != nil {
		return nil, err
	}
	defer it.Close()
	if l.folded, err = l.sorter("folded", b-l.parents.BufferedBytes()-l.children.BufferedBytes()); err != nil {
		return nil, err
	}
	type removal struct {
		jk  []byte
		ver uint64
	}
	var (
		f        rowFold
		jk, njk  []byte
		ck       []byte
		removals []removal
		key, val []byte
		entry    []byte
	)
	flush := func() error {
		if f.live {
			entry = keyed.AppendIndexEntry(entry[:0], f.part, jk, f.vals)
			if err := w.AddChildIndex(ck, entry); err != nil {
				return err
			}
			l.res.IndexEntries++
			key = append(append(key[:0], jk...), ck...)
			val = row.AppendRow(binary.AppendUvarint(append(val[:0], kindUpsert), f.ver), f.vals)
			if err := l.folded.Add(key, val); err != nil {
				return err
			}
		}
		for i, r := range removals {
			if r.jk == nil || (f.live && bytes.Equal(r.jk, jk)) {
				continue
			}
			ver := r.ver
			for j := i + 1; j < len(removals); j++ { // the latest removal per join key
				if bytes.Equal(removals[j].jk, r.jk) {
					ver = max(ver, removals[j].ver)
					removals[j].jk = nil
				}
			}
			key = append(append(key[:0], r.jk...), ck...)
			val = binary.AppendUvarint(append(val[:0], kindDelete), ver)
			if err := l.folded.Add(key, val); err != nil {
				return err
			}
		}
		return nil
	}
	started := false
	var r record
	for it.Next() {
		k, err := split(it.Key(), it.Value(), &r)
		if err != nil {
			return nil, err
		}
		v := r.at
		if !started || !bytes.Equal(k, ck) {
			if started {
				if err := flush(); err != nil {
					return nil, err
				}
			}
			started = true
			ck = append(ck[:0], k...)
			f.reset()
			jk, removals = jk[:0], removals[:0]
		}
		if f.in, err = row.DecodeRow(f.in[:0], r.row); err != nil {
			return nil, err
		}
		// The Keyer completes the row from the index entry (the child's
		// last row), then resolves its join key.
		var same bool
		f.merged, same = keyed.CompleteRow(f.merged, f.in, f.vals, f.live)
		var hasKey bool
		njk, hasKey = l.spec.ForeignKey(njk[:0], f.merged)
		if f.live && (!hasKey || !bytes.Equal(njk, jk)) {
			removals = append(removals, removal{slices.Clone(jk), v})
			f.live = false
		}
		if !hasKey {
			continue // a NULL foreign key: joins nothing, not indexed
		}
		if !f.live || !same {
			f.vals, f.merged = f.merged, f.vals
			f.ver = v
		}
		f.live, f.part = true, r.part // the index entry records the event's partition
		jk = append(jk[:0], njk...)
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	if started {
		if err := flush(); err != nil {
			return nil, err
		}
	}
	fit, err := l.folded.Sort()
	if err != nil {
		return nil, err
	}
	var scratch []row.Value
	return &snapshotChildren{it: fit, jkLen: l.jkLen(&scratch)}, nil
}

// merger walks the folded parents and children side by side, in join-key
// order, writing both and emitting the joined rows.
type merger struct {
	l        *Loader
	w        Writer
	emit     keyed.Emit
	parents  *group
	children childSource
	truncs   truncations

	pf       rowFold
	pk       []byte // current parent's join key (nil: no more parents)
	c        child
	cvalid   bool
	enc      []byte
	change   row.Change
	pkey     []row.Value
	ckey     []row.Value
	out      []row.Value
	kscratch []row.Value
}

func (m *merger) nextParent() error {
	for {
		k, err := m.parents.fold(&m.pf, m.truncs)
		if k == nil || err != nil {
			m.pk = nil
			return err
		}
		if m.pf.live {
			m.pk = k
			return nil
		}
	}
}

func (m *merger) nextChild() error {
	var err error
	m.cvalid, err = m.children.next(&m.c)
	return err
}

func (m *merger) run() error {
	if rc, ok := m.children.(*rebuildChildren); ok {
		rc.jkLen = m.l.jkLen(&m.kscratch)
	}
	if err := m.nextParent(); err != nil {
		return err
	}
	if err := m.nextChild(); err != nil {
		return err
	}
	for m.pk != nil || m.cvalid {
		cmp := -1 // the parent comes first
		switch {
		case m.pk == nil:
			cmp = 1
		case m.cvalid:
			cmp = bytes.Compare(m.pk, m.c.jk)
		}
		if cmp > 0 { // children without a parent: stored, not joined
			if err := m.orphans(); err != nil {
				return err
			}
			continue
		}
		if err := m.group(cmp == 0); err != nil {
			return err
		}
		if err := m.nextParent(); err != nil {
			return err
		}
	}
	return nil
}

// orphans writes the children of the current child's join key, which has
// no parent.
func (m *merger) orphans() error {
	jk := slices.Clone(m.c.jk)
	for m.cvalid && bytes.Equal(m.c.jk, jk) {
		if err := m.writeChild(); err != nil {
			return err
		}
		if err := m.nextChild(); err != nil {
			return err
		}
	}
	return nil
}

func (m *merger) writeChild() error {
	if !m.c.live {
		return nil
	}
	m.enc = keyed.AppendChild(m.enc[:0], &keyed.ChildRecord{Version: m.c.ver, Row: m.c.vals})
	m.l.res.Children++
	return m.w.AddChild(m.c.jk, m.c.ck, m.enc)
}

// group writes the current parent with its children (hasChildren: the
// current child has its join key) and emits their joined rows.
func (m *merger) group(hasChildren bool) error {
	p := &m.pf
	var err error
	if m.emit != nil {
		if m.pkey, _, err = row.DecodeKey(m.pkey[:0], m.pk, len(m.l.spec.ParentKey)); err != nil {
			return fmt.Errorf("cdcjoin: bulk load: %w", err)
		}
	}
	anyLive, lastRemoved := false, uint64(0)
	for hasChildren && m.cvalid && bytes.Equal(m.c.jk, m.pk) {
		if m.c.live {
			anyLive = true
			if err := m.writeChild(); err != nil {
				return err
			}
			if err := m.emitRow(m.c.ck, m.c.vals, max(p.ver, m.c.ver)); err != nil {
				return err
			}
		} else {
			lastRemoved = max(lastRemoved, m.c.delVer)
		}
		if err := m.nextChild(); err != nil {
			return err
		}
	}
	rec := keyed.ParentRecord{Version: p.ver, PadVersion: p.pad, Row: p.vals, Partition: p.part}
	if !anyLive && m.l.spec.Left {
		// The padded row was last emitted when the parent last became
		// childless: at its own change (a load sets the pad version it
		// carries), or at the removal of its last child.
		switch {
		case lastRemoved > p.at:
			rec.PadVersion = lastRemoved
		case !p.loaded:
			rec.PadVersion = p.ver
		}
		if err := m.emitRow(nil, nil, rec.PadVersion); err != nil {
			return err
		}
	}
	m.enc = keyed.AppendParent(m.enc[:0], &rec)
	m.l.res.Parents++
	return m.w.AddParent(m.pk, m.enc)
}

// emitRow emits the upsert of the current parent joined with child ck (nil:
// the padded row).
func (m *merger) emitRow(ck []byte, cvals []row.Value, version uint64) error {
	if m.emit == nil {
		return nil
	}
	m.out = m.l.spec.Output(m.out, m.pf.vals, cvals)
	m.change = row.Change{Op: row.Upsert, Version: version, ParentKey: m.pkey, Values: m.out}
	if ck != nil {
		var err error
		if m.ckey, _, err = row.DecodeKey(m.ckey[:0], ck, len(m.l.spec.ChildKey)); err != nil {
			return fmt.Errorf("cdcjoin: bulk load: %w", err)
		}
		m.change.ChildKey = m.ckey
	}
	m.l.res.Upserts++
	return m.emit(&m.change)
}

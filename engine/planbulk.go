package engine

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"

	"github.com/cdcjoin/cdcjoin/bulkload"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/stage"
)

// Bulk load of a plan's snapshot.
//
// A new state of a multi-table plan starts in bulk mode when
// state.bulk_load_mb is not -1, as the parent/child join does (bulk.go),
// with one difference in how: the snapshot's records go through the very
// same stage.Pipeline as streaming records, in input order, but on a
// memState (an ordered map in memory) instead of the pebble transaction.
// So the load emits exactly the changes the row-by-row path emits, in the
// same order and with the same versions (every stage input takes the next
// position, as always), and reaches exactly the same state: when the load
// ends, the memState is written in key order as sorted tables and ingested
// with the positions and metadata in one atomic step (joinstate.Load), the
// changes having gone to the sink in the same batch (driver.Commit). What
// it saves is pebble: no memtable inserts, no block reads, seeks,
// compactions or row-cache upkeep while loading.
//
// The load ends like the parent/child join's: before the first event that
// is not a snapshot read (applied row by row, on the loaded state), after
// a record whose source.snapshot is "last", at Commit or Checkpoint — and
// after the record that takes the memState past state.bulk_load_mb (an
// estimate of its memory), the rest going row by row on the ingested state.
// Nothing but the version clock is committed before the end (once, at the
// start, synced): a crash while loading leaves a state with no positions
// and the same clock, so the load is run again from the first record and
// emits the same changes with the same versions (the upsert sink absorbs
// them; a Positioned sink sees the load as one batch, re-created).
//
// The state after the load differs from the row-by-row path's only in
// metadata: one batch instead of one per state.batch_events, and the bulk
// flag (driver.MetaBulkLoad) written false.

// startPlanBulk puts a new plan state into bulk mode.
func (e *Engine) startPlanBulk() error {
	if err := e.commitBulkStart(); err != nil {
		return err
	}
	e.pbulk = newMemState()
	e.bulkDir = filepath.Join(e.cfg.State.Dir, bulkDir)
	return nil
}

// commitBulkStart commits (and syncs) the clock and the bulk flag of a
// new state, before anything is loaded, so that a load run again after a
// crash gives the same versions.
func (e *Engine) commitBulkStart() error {
	t := e.store.Begin()
	err := errors.Join(driver.MetaClock.Put(t, e.clock), driver.MetaInputs.Put(t, 0),
		driver.MetaFingerprint.Put(t, e.fingerprint()), driver.MetaBulkLoad.Put(t, true))
	if err != nil {
		t.Abort()
		return err
	}
	if err := t.Commit(); err != nil {
		return err
	}
	return e.store.SyncWAL()
}

// planState is the State the plan's pipeline applies to: the memState
// while bulk loading, else the engine's transaction.
func (e *Engine) planState() stage.State {
	if e.pbulk != nil {
		return e.pbulk
	}
	return e.kv
}

// planBulkBefore ends a plan's bulk load before d when d is not made of
// snapshot reads.
func (e *Engine) planBulkBefore(ctx context.Context, d *Decoded) error {
	if e.pbulk == nil {
		return nil
	}
	for i := range d.items {
		if d.evs[i].Op != debezium.OpRead {
			return e.endPlanBulk(ctx)
		}
	}
	return nil
}

// planBulkAfter marks the load to end after the record just applied when
// it ended the snapshot or filled the memory budget.
func (e *Engine) planBulkAfter(d *Decoded) {
	if e.pbulk == nil {
		return
	}
	for i := range d.items {
		if d.evs[i].Source.Snapshot == "last" {
			e.endAfter = true
		}
	}
	limit := e.cfg.State.BulkLoadMB << 20
	if e.pbulkLimit > 0 {
		limit = e.pbulkLimit
	}
	if e.pbulk.bytes >= limit {
		e.endAfter = true
	}
}

// endPlanBulk ends a plan's bulk load: the memState is written to a
// joinstate.Load and committed with the batch (the load's changes, already
// emitted, are delivered first: driver.Commit). Records counts the
// records of the load; Children its rows, Parents its values. After an
// error the Engine must be closed.
func (e *Engine) endPlanBulk(ctx context.Context) error {
	m := e.pbulk
	if m == nil {
		return nil
	}
	e.pbulk, e.endAfter = nil, false
	_, err := e.finishLoad(ctx, func(load *joinstate.Load) (bulkload.Result, error) {
		res := bulkload.Result{Records: uint64(e.pending)}
		w := memWriter(load)
		if e.pbulkDrop != nil {
			w = &dropWriter{memWriter: load, prefix: e.pbulkDrop, dropped: &e.pbulkDropped}
		}
		err := m.writeTo(w, &res)
		return res, err
	})
	return err
}

// memState is a stage.State in memory, ordered where the State's contract
// needs it: a row's point operations go to one hash map, and each group
// keeps its rows, sorted by identity when it is scanned (or written out).
// Values are never modified in place (a put stores a new copy), so a scan
// hands out a snapshot of its group: writes made by its callbacks are not
// seen by it. bytes estimates the memory held. Not safe for concurrent
// use.
type memState struct {
	rows   map[string]*memRow // group ‖ id → row
	groups map[string]*memGroup
	vals   map[string][]byte
	bytes  int
	key    []byte // scratch: group ‖ id
	scans  [][]memEntry
}

// memRow is one row of a group; dead once deleted (a row put again after
// its delete is a new memRow).
type memRow struct {
	id, value []byte
	dead      bool
}

// memGroup is a group's rows. sorted: rows is in increasing id order;
// stale: rows may hold dead rows.
type memGroup struct {
	rows   []*memRow
	sorted bool
	stale  bool
}

type memEntry struct{ id, value []byte }

// Estimated memory per entry beyond its bytes (map entries, headers, the
// row's identity kept in its group).
const (
	memRowOverhead   = 128
	memValueOverhead = 64
	memGroupOverhead = 96
)

func newMemState() *memState {
	return &memState{rows: map[string]*memRow{}, groups: map[string]*memGroup{}, vals: map[string][]byte{}}
}

func (m *memState) rowKey(group, id []byte) []byte {
	m.key = append(append(m.key[:0], group...), id...)
	return m.key
}

// Row implements stage.State.
func (m *memState) Row(group, id []byte) ([]byte, bool, error) {
	if r := m.rows[string(m.rowKey(group, id))]; r != nil {
		return r.value, true, nil
	}
	return nil, false, nil
}

// PutRow implements stage.State.
func (m *memState) PutRow(group, id, value []byte) error {
	k := m.rowKey(group, id)
	if r := m.rows[string(k)]; r != nil {
		m.bytes += len(value) - len(r.value)
		r.value = slices.Clone(value)
		return nil
	}
	r := &memRow{id: slices.Clone(id), value: slices.Clone(value)}
	m.rows[string(k)] = r
	m.bytes += len(k) + len(id) + len(value) + memRowOverhead
	g := m.groups[string(group)]
	if g == nil {
		g = &memGroup{sorted: true}
		m.groups[string(group)] = g
		m.bytes += len(group) + memGroupOverhead
	}
	if n := len(g.rows); n > 0 && g.sorted && bytes.Compare(r.id, g.rows[n-1].id) <= 0 {
		g.sorted = false
	}
	g.rows = append(g.rows, r)
	return nil
}

// DeleteRow implements stage.State.
func (m *memState) DeleteRow(group, id []byte) error {
	k := m.rowKey(group, id)
	r := m.rows[string(k)]
	if r == nil {
		return nil
	}
	delete(m.rows, string(k))
	r.dead = true
	m.bytes -= len(k) + len(r.value)
	m.groups[string(group)].stale = true
	return nil
}

// normalize sorts g's rows and drops the dead ones (a dead row and the
// live one put after it share an identity: the sort is stable, the dead
// one goes).
func (m *memState) normalize(g *memGroup) {
	if g.sorted && !g.stale {
		return
	}
	if g.stale {
		out := g.rows[:0]
		for _, r := range g.rows {
			if r.dead {
				m.bytes -= len(r.id) + memRowOverhead
				continue
			}
			out = append(out, r)
		}
		clear(g.rows[len(out):])
		g.rows = out
	}
	if !g.sorted {
		slices.SortFunc(g.rows, func(a, b *memRow) int { return bytes.Compare(a.id, b.id) })
	}
	g.sorted, g.stale = true, false
}

// Rows implements stage.State.
func (m *memState) Rows(group []byte, fn func(id, value []byte) error) error {
	g := m.groups[string(group)]
	if g == nil {
		return nil
	}
	m.normalize(g)
	if len(g.rows) == 0 {
		return nil
	}
	// A snapshot of the group (scans nest: one buffer per depth).
	var snap []memEntry
	if n := len(m.scans); n > 0 {
		snap, m.scans = m.scans[n-1][:0], m.scans[:n-1]
	}
	for _, r := range g.rows {
		snap = append(snap, memEntry{r.id, r.value})
	}
	var err error
	for _, e := range snap {
		if err = fn(e.id, e.value); err != nil {
			break
		}
	}
	clear(snap)
	m.scans = append(m.scans, snap[:0])
	if err == stage.ErrStop {
		return nil
	}
	return err
}

// ScanRows implements stage.State: the groups with the prefix are found by
// a pass over every group (the pipeline scans across groups only for a
// truncate, which ends a bulk load before it is applied).
func (m *memState) ScanRows(prefix []byte, fn func(key, value []byte) error) error {
	var names []string
	for name := range m.groups {
		if len(name) >= len(prefix) && name[:len(prefix)] == string(prefix) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		group := []byte(name)
		var key []byte
		err := m.Rows(group, func(id, value []byte) error {
			key = append(append(key[:0], group...), id...)
			return fn(key, value)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Value implements stage.State.
func (m *memState) Value(key []byte) ([]byte, bool, error) {
	v, ok := m.vals[string(key)]
	return v, ok, nil
}

// PutValue implements stage.State.
func (m *memState) PutValue(key, value []byte) error {
	if old, ok := m.vals[string(key)]; ok {
		m.bytes += len(value) - len(old)
	} else {
		m.bytes += len(key) + len(value) + memValueOverhead
	}
	m.vals[string(key)] = slices.Clone(value)
	return nil
}

// DeleteValue implements stage.State.
func (m *memState) DeleteValue(key []byte) error {
	if old, ok := m.vals[string(key)]; ok {
		m.bytes -= len(key) + len(old) + memValueOverhead
		delete(m.vals, string(key))
	}
	return nil
}

// memWriter is what a memState is written to (*joinstate.Load): the
// plan's rows in the child keyspace, its values in the parent keyspace,
// as planKV keeps them.
type memWriter interface {
	AddParent(key, value []byte) error
	AddChild(group, id, value []byte) error
}

// dropWriter leaves out the rows whose group starts with prefix (tests:
// SetPlanBulkDrop).
type dropWriter struct {
	memWriter
	prefix  []byte
	dropped *uint64
}

func (d *dropWriter) AddChild(group, id, value []byte) error {
	if bytes.HasPrefix(group, d.prefix) {
		*d.dropped++
		return nil
	}
	return d.memWriter.AddChild(group, id, value)
}

// writeTo writes every row and value to w in key order, counting them in
// res (rows as Children, values as Parents). It empties m as it goes.
func (m *memState) writeTo(w memWriter, res *bulkload.Result) error {
	names := make([]string, 0, len(m.groups))
	for name := range m.groups {
		names = append(names, name)
	}
	// Groups are never prefixes of one another's keys (stage.State), so
	// group order, then id order, is key order.
	slices.Sort(names)
	for _, name := range names {
		g := m.groups[name]
		m.normalize(g)
		group := []byte(name)
		for _, r := range g.rows {
			if err := w.AddChild(group, r.id, r.value); err != nil {
				return err
			}
			res.Children++
		}
		delete(m.groups, name)
	}
	m.rows = nil
	keys := make([]string, 0, len(m.vals))
	for k := range m.vals {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := w.AddParent([]byte(k), m.vals[k]); err != nil {
			return err
		}
		res.Parents++
	}
	m.vals = nil
	return nil
}

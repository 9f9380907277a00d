// Package memstate is a stage.State in memory, for the bulk paths of
// multi-stage plans: a plan's stage.Pipeline (replay's snapshot load,
// engine) or stage.Operator (run's rebuild of a stage partition, kafkarun)
// runs on it exactly as on the pebble transaction, and the result is
// written out in key order (WriteTo) as sorted tables ingested with the
// positions in one atomic step (joinstate.Load).
package memstate

import (
	"bytes"
	"slices"

	"github.com/cdcjoin/cdcjoin/stage"
)

// State is a stage.State in memory, ordered where the State's contract
// needs it: a row's point operations go to one hash map, and each group
// keeps its rows, sorted by identity when it is scanned (or written out).
// Values are never modified in place (a put stores a new copy), so a scan
// hands out a snapshot of its group: writes made by its callbacks are not
// seen by it. Bytes estimates the memory held. Not safe for concurrent
// use.
type State struct {
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

var _ stage.State = (*State)(nil)

// New returns an empty State.
func New() *State {
	return &State{rows: map[string]*memRow{}, groups: map[string]*memGroup{}, vals: map[string][]byte{}}
}

func (m *State) rowKey(group, id []byte) []byte {
	m.key = append(append(m.key[:0], group...), id...)
	return m.key
}

// Row implements stage.State.
func (m *State) Row(group, id []byte) ([]byte, bool, error) {
	if r := m.rows[string(m.rowKey(group, id))]; r != nil {
		return r.value, true, nil
	}
	return nil, false, nil
}

// PutRow implements stage.State.
func (m *State) PutRow(group, id, value []byte) error {
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
func (m *State) DeleteRow(group, id []byte) error {
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
func (m *State) normalize(g *memGroup) {
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
func (m *State) Rows(group []byte, fn func(id, value []byte) error) error {
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
// a pass over every group (the stages scan across groups only for a
// truncate, which ends both bulk paths before it is applied).
func (m *State) ScanRows(prefix []byte, fn func(key, value []byte) error) error {
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
func (m *State) Value(key []byte) ([]byte, bool, error) {
	v, ok := m.vals[string(key)]
	return v, ok, nil
}

// PutValue implements stage.State.
func (m *State) PutValue(key, value []byte) error {
	if old, ok := m.vals[string(key)]; ok {
		m.bytes += len(value) - len(old)
	} else {
		m.bytes += len(key) + len(value) + memValueOverhead
	}
	m.vals[string(key)] = slices.Clone(value)
	return nil
}

// DeleteValue implements stage.State.
func (m *State) DeleteValue(key []byte) error {
	if old, ok := m.vals[string(key)]; ok {
		m.bytes -= len(key) + len(old) + memValueOverhead
		delete(m.vals, string(key))
	}
	return nil
}

// Writer is what a State is written to (*joinstate.Load): its rows in
// the child keyspace, its values in the parent keyspace, as the drivers'
// State over a joinstate.Txn keeps them (stage.KeyedState, engine's
// planKV).
type Writer interface {
	AddParent(key, value []byte) error
	AddChild(group, id, value []byte) error
}

// Drop returns a Writer that leaves out the rows whose group starts with
// prefix, counting them in *dropped: the negative controls of the bulk
// paths (a load that loses rows must be caught).
func Drop(w Writer, prefix []byte, dropped *uint64) Writer {
	return &dropWriter{Writer: w, prefix: prefix, dropped: dropped}
}

type dropWriter struct {
	Writer
	prefix  []byte
	dropped *uint64
}

func (d *dropWriter) AddChild(group, id, value []byte) error {
	if bytes.HasPrefix(group, d.prefix) {
		*d.dropped++
		return nil
	}
	return d.Writer.AddChild(group, id, value)
}

// Bytes estimates the memory m holds.
func (m *State) Bytes() int { return m.bytes }

// WriteTo writes every row and value to w in key order and returns how
// many rows and values it wrote. It empties m as it goes: m is not usable
// after it.
func (m *State) WriteTo(w Writer) (rows, values uint64, err error) {
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
				return rows, values, err
			}
			rows++
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
			return rows, values, err
		}
		values++
	}
	m.vals = nil
	return rows, values, nil
}

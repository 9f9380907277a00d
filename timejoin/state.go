package timejoin

import (
	"bytes"
	"errors"
	"sort"
)

// State is the ordered key-value space a Join keeps everything in. Keys
// and values are the Join's (see keys.go for the layout).
//
// Contracts every implementation keeps:
//   - Reads see all earlier writes made through the same State.
//   - A State copies the slices it is given; a slice it returns (or passes
//     to a callback) is valid only until the next call on the State (for
//     Scan's callback: until it returns).
//   - Scan streams the keys in [lo, hi) in byte order; writes made by its
//     callback are not seen by the scan in progress. An error returned by
//     the callback ends the scan and is returned.
//   - Errors are the storage's (I/O, corruption), wrapped.
//
// joinstate.Space implements it on pebble; MemState is the in-memory model.
type State interface {
	Get(key []byte) (value []byte, ok bool, err error)
	Put(key, value []byte) error
	Delete(key []byte) error
	Scan(lo, hi []byte, fn func(key, value []byte) error) error
}

// errCorrupt marks stored bytes the Join cannot decode.
var errCorrupt = errors.New("cdcjoin: time join state: corrupt")

// MemState is an in-memory State: a sorted slice (tests, the test driver).
// The zero value is empty and ready. Not safe for concurrent use.
type MemState struct {
	keys []string
	vals map[string][]byte
}

var _ State = (*MemState)(nil)

func (m *MemState) find(key []byte) (int, bool) {
	i := sort.SearchStrings(m.keys, string(key))
	return i, i < len(m.keys) && m.keys[i] == string(key)
}

// Get implements State.
func (m *MemState) Get(key []byte) ([]byte, bool, error) {
	v, ok := m.vals[string(key)]
	return v, ok, nil
}

// Put implements State.
func (m *MemState) Put(key, value []byte) error {
	if m.vals == nil {
		m.vals = map[string][]byte{}
	}
	k := string(key)
	if _, ok := m.vals[k]; !ok {
		i, _ := m.find(key)
		m.keys = append(m.keys, "")
		copy(m.keys[i+1:], m.keys[i:])
		m.keys[i] = k
	}
	m.vals[k] = bytes.Clone(value)
	return nil
}

// Delete implements State.
func (m *MemState) Delete(key []byte) error {
	i, ok := m.find(key)
	if !ok {
		return nil
	}
	m.keys = append(m.keys[:i], m.keys[i+1:]...)
	delete(m.vals, string(key))
	return nil
}

// Scan implements State: it iterates over a snapshot of the range taken
// when it starts.
func (m *MemState) Scan(lo, hi []byte, fn func(key, value []byte) error) error {
	i, _ := m.find(lo)
	type kv struct {
		k string
		v []byte
	}
	var snap []kv
	for ; i < len(m.keys) && (hi == nil || m.keys[i] < string(hi)); i++ {
		snap = append(snap, kv{m.keys[i], m.vals[m.keys[i]]}) // values are never modified in place
	}
	for _, e := range snap {
		if err := fn([]byte(e.k), e.v); err != nil {
			return err
		}
	}
	return nil
}

// Len returns the number of entries.
func (m *MemState) Len() int { return len(m.keys) }

// Bytes returns the total size of the keys and values.
func (m *MemState) Bytes() int {
	n := 0
	for _, k := range m.keys {
		n += len(k) + len(m.vals[k])
	}
	return n
}

// Clone returns a deep copy (a crash test's committed state).
func (m *MemState) Clone() *MemState {
	c := &MemState{keys: append([]string(nil), m.keys...), vals: make(map[string][]byte, len(m.vals))}
	for k, v := range m.vals {
		c.vals[k] = bytes.Clone(v)
	}
	return c
}

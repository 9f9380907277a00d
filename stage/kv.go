package stage

import (
	"bytes"
	"slices"
)

// State is what the operators read and write: rows grouped under group
// keys (a multimap group → id → value, both byte strings of the
// operators' own layout; a group is never a prefix of another group's
// keys), and single values by key. The rules are keyed.State's:
//   - reads see all earlier writes made through the same State;
//   - a State copies the slices it is given; a slice it returns (or passes
//     to a callback) is valid only until the next call on it (for
//     callbacks: until the callback returns);
//   - Rows and ScanRows stream in key order without loading the range into
//     memory, may be nested, and writes made by their callbacks are not
//     seen by the scan in progress; a callback returning ErrStop ends the
//     scan without an error;
//   - errors are the storage's, wrapped; a State never panics on bad bytes.
//
// joinstate.Txn's keyspaces carry it in the drivers (rows in the child
// keyspace, values in the parent keyspace: the row cache answers their
// point reads, absences included, while the state fits in it); MemState
// is the model.
type State interface {
	Row(group, id []byte) (value []byte, ok bool, err error)
	PutRow(group, id, value []byte) error
	DeleteRow(group, id []byte) error
	// Rows streams group's rows in id order.
	Rows(group []byte, fn func(id, value []byte) error) error
	// ScanRows streams every row whose group and id, concatenated, start
	// with prefix, fn getting them concatenated.
	ScanRows(prefix []byte, fn func(key, value []byte) error) error

	Value(key []byte) (value []byte, ok bool, err error)
	PutValue(key, value []byte) error
	DeleteValue(key []byte) error
}

// ErrStop stops a scan early without an error.
var ErrStop = stopError{}

type stopError struct{}

func (stopError) Error() string { return "stop" }

// MemState is an in-memory State: the model the exhaustive tests run on.
// Not safe for concurrent use.
type MemState struct {
	rows map[string][]byte // group + id
	vals map[string][]byte
}

// NewMemState returns an empty MemState.
func NewMemState() *MemState {
	return &MemState{rows: map[string][]byte{}, vals: map[string][]byte{}}
}

// Clone returns a deep copy (a committed snapshot).
func (m *MemState) Clone() *MemState {
	c := NewMemState()
	for k, v := range m.rows {
		c.rows[k] = v
	}
	for k, v := range m.vals {
		c.vals[k] = v
	}
	return c
}

// Len returns the number of rows and values.
func (m *MemState) Len() int { return len(m.rows) + len(m.vals) }

// Row implements State.
func (m *MemState) Row(group, id []byte) ([]byte, bool, error) {
	v, ok := m.rows[string(group)+string(id)]
	return v, ok, nil
}

// PutRow implements State.
func (m *MemState) PutRow(group, id, value []byte) error {
	m.rows[string(group)+string(id)] = slices.Clone(value)
	return nil
}

// DeleteRow implements State.
func (m *MemState) DeleteRow(group, id []byte) error {
	delete(m.rows, string(group)+string(id))
	return nil
}

// Rows implements State.
func (m *MemState) Rows(group []byte, fn func(id, value []byte) error) error {
	return m.ScanRows(group, func(k, v []byte) error { return fn(k[len(group):], v) })
}

// ScanRows implements State (it sorts a snapshot of the range).
func (m *MemState) ScanRows(prefix []byte, fn func(key, value []byte) error) error {
	var keys []string
	for k := range m.rows {
		if bytes.HasPrefix([]byte(k), prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i] = m.rows[k]
	}
	for i, k := range keys {
		if err := fn([]byte(k), vals[i]); err != nil {
			if err == ErrStop {
				return nil
			}
			return err
		}
	}
	return nil
}

// Value implements State.
func (m *MemState) Value(key []byte) ([]byte, bool, error) {
	v, ok := m.vals[string(key)]
	return v, ok, nil
}

// PutValue implements State.
func (m *MemState) PutValue(key, value []byte) error {
	m.vals[string(key)] = slices.Clone(value)
	return nil
}

// DeleteValue implements State.
func (m *MemState) DeleteValue(key []byte) error {
	delete(m.vals, string(key))
	return nil
}

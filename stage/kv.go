package stage

import (
	"bytes"
	"slices"
)

// KV is the state the operators read and write: one ordered key-value
// keyspace whose keys the operators build (see the package doc for the
// layout). The rules are keyed.State's:
//   - reads see all earlier writes made through the same KV;
//   - a KV copies the slices it is given; a slice it returns (or passes to
//     a callback) is valid only until the next call on it (for callbacks:
//     until the callback returns);
//   - Scan streams in key order without loading the range into memory,
//     and writes made by its callback are not seen by the scan in
//     progress;
//   - errors are the storage's, wrapped; a KV never panics on bad bytes.
type KV interface {
	Get(key []byte) (value []byte, ok bool, err error)
	Put(key, value []byte) error
	Delete(key []byte) error
	// Scan streams the entries whose key starts with prefix and sorts
	// after after (every one when after is nil), in key order. fn may stop
	// the scan by returning ErrStop (Scan then returns nil).
	Scan(prefix, after []byte, fn func(key, value []byte) error) error
}

// ErrStop stops a Scan early without an error.
var ErrStop = stopError{}

type stopError struct{}

func (stopError) Error() string { return "stop" }

// MemKV is an in-memory KV: the model the exhaustive tests run on. Not
// safe for concurrent use.
type MemKV struct{ m map[string][]byte }

// NewMemKV returns an empty MemKV.
func NewMemKV() *MemKV { return &MemKV{m: map[string][]byte{}} }

// Clone returns a deep copy (a committed snapshot).
func (m *MemKV) Clone() *MemKV {
	c := NewMemKV()
	for k, v := range m.m {
		c.m[k] = v
	}
	return c
}

// Len returns the number of entries.
func (m *MemKV) Len() int { return len(m.m) }

// Get implements KV.
func (m *MemKV) Get(key []byte) ([]byte, bool, error) {
	v, ok := m.m[string(key)]
	return v, ok, nil
}

// Put implements KV.
func (m *MemKV) Put(key, value []byte) error {
	m.m[string(key)] = append([]byte{}, value...)
	return nil
}

// Delete implements KV.
func (m *MemKV) Delete(key []byte) error {
	delete(m.m, string(key))
	return nil
}

// Scan implements KV (it sorts a snapshot of the range).
func (m *MemKV) Scan(prefix, after []byte, fn func(key, value []byte) error) error {
	var keys []string
	for k := range m.m {
		if bytes.HasPrefix([]byte(k), prefix) && (after == nil || k > string(after)) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i] = m.m[k]
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

// prefixEnd returns the smallest key after every key with prefix (nil
// when there is none).
func prefixEnd(prefix []byte) []byte {
	end := slices.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

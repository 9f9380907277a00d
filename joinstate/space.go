package joinstate

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Space is an ordered key-value keyspace of a Txn (keys 'X' + the
// caller's key) for operators whose state is not parent/child rows:
// package timejoin keeps its rows, versions, timers and watermarks here
// (timejoin.State). Writes commit with the rest of the Txn; point reads go
// through the row cache. Truncates never touch it.
type Space struct{ t *Txn }

// Space returns t's operator keyspace.
func (t *Txn) Space() Space { return Space{t} }

func (s Space) key(k []byte) []byte {
	s.t.key = append(append(s.t.key[:0], prefixSpace), k...)
	return s.t.key
}

// Get returns the value of key; the slice is valid until the next call on
// the Txn.
func (s Space) Get(key []byte) ([]byte, bool, error) { return s.t.get(s.key(key)) }

// Put stores key's value (the Txn copies both).
func (s Space) Put(key, value []byte) error { return s.t.set(s.key(key), value) }

// Delete removes key.
func (s Space) Delete(key []byte) error { return s.t.del(s.key(key)) }

// Scan streams the keys in [lo, hi) (hi nil: to the end of the space) in
// order, seeing the Txn's writes so far; writes made by fn are not seen by
// the scan in progress. fn may call Get and Scan (a nested scan gets an
// iterator of its own); its slices are valid until it returns. An error
// from fn ends the scan and is returned.
func (s Space) Scan(lo, hi []byte, fn func(key, value []byte) error) error {
	t := s.t
	opts := &pebble.IterOptions{LowerBound: append([]byte{prefixSpace}, lo...)}
	if hi != nil {
		opts.UpperBound = append([]byte{prefixSpace}, hi...)
	} else {
		opts.UpperBound = []byte{prefixSpace + 1}
	}
	var it *pebble.Iterator
	reuse := !t.spaceBusy
	if reuse && t.spaceIt != nil {
		it = t.spaceIt
		it.SetOptions(opts) // also refreshes its view of the batch
	} else {
		var err error
		if it, err = t.b.NewIter(opts); err != nil {
			return fmt.Errorf("cdcjoin: state: %w", err)
		}
		if reuse {
			t.spaceIt = it
		}
	}
	if reuse {
		t.spaceBusy = true
	}
	var err error
	for valid := it.First(); valid; valid = it.Next() {
		if err = fn(it.Key()[1:], it.Value()); err != nil {
			break
		}
	}
	if ierr := it.Error(); err == nil && ierr != nil {
		err = t.s.h.check(fmt.Errorf("cdcjoin: state: %w", ierr))
	}
	if reuse {
		t.spaceBusy = false
	} else if cerr := it.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("cdcjoin: state: %w", cerr)
	}
	return err
}

// SpaceBytes estimates the operator keyspace's bytes on disk.
func (s *Store) SpaceBytes() uint64 { return s.prefixBytes(prefixSpace) }

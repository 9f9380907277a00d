package keyed

import (
	"bytes"
	"slices"
)

// MemState is an in-memory State and Index: the plain model on which the
// join core's exhaustive tests run, and a reference for other
// implementations. Scans sort, so it is meant for small states. Not safe for
// concurrent use.
type MemState struct {
	parents     map[string][]byte
	children    map[string]map[string][]byte // join key → child key → value
	childIndex  map[string][]byte
	parentIndex map[string][]byte
	aux         map[string][]byte
}

var (
	_ State = (*MemState)(nil)
	_ Index = (*MemState)(nil)
)

// NewMemState returns an empty state.
func NewMemState() *MemState {
	return &MemState{
		parents: map[string][]byte{}, children: map[string]map[string][]byte{},
		childIndex: map[string][]byte{}, parentIndex: map[string][]byte{},
		aux: map[string][]byte{},
	}
}

// Clone returns a deep copy of m (a snapshot, e.g. of committed state).
func (m *MemState) Clone() *MemState {
	c := NewMemState()
	for k, v := range m.parents {
		c.parents[k] = v
	}
	for jk, cs := range m.children {
		cc := make(map[string][]byte, len(cs))
		for k, v := range cs {
			cc[k] = v
		}
		c.children[jk] = cc
	}
	for k, v := range m.childIndex {
		c.childIndex[k] = v
	}
	for k, v := range m.parentIndex {
		c.parentIndex[k] = v
	}
	for k, v := range m.aux {
		c.aux[k] = v
	}
	return c
}

func clone(b []byte) []byte { return append([]byte{}, b...) }

func get(m map[string][]byte, k []byte) ([]byte, bool, error) {
	v, ok := m[string(k)]
	return v, ok, nil
}

// Parent implements State.
func (m *MemState) Parent(joinKey []byte) ([]byte, bool, error) { return get(m.parents, joinKey) }

// PutParent implements State.
func (m *MemState) PutParent(joinKey, value []byte) error {
	m.parents[string(joinKey)] = clone(value)
	return nil
}

// DeleteParent implements State.
func (m *MemState) DeleteParent(joinKey []byte) error {
	delete(m.parents, string(joinKey))
	return nil
}

// Child implements State.
func (m *MemState) Child(joinKey, childKey []byte) ([]byte, bool, error) {
	v, ok := m.children[string(joinKey)][string(childKey)]
	return v, ok, nil
}

// PutChild implements State.
func (m *MemState) PutChild(joinKey, childKey, value []byte) error {
	cs := m.children[string(joinKey)]
	if cs == nil {
		cs = map[string][]byte{}
		m.children[string(joinKey)] = cs
	}
	cs[string(childKey)] = clone(value)
	return nil
}

// DeleteChild implements State.
func (m *MemState) DeleteChild(joinKey, childKey []byte) error {
	cs := m.children[string(joinKey)]
	delete(cs, string(childKey))
	if len(cs) == 0 {
		delete(m.children, string(joinKey))
	}
	return nil
}

type kv struct{ k, v []byte }

// sorted returns a snapshot of m's entries in key order.
func sorted(m map[string][]byte) []kv {
	out := make([]kv, 0, len(m))
	for k, v := range m {
		out = append(out, kv{[]byte(k), v})
	}
	slices.SortFunc(out, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	return out
}

// Children implements State.
func (m *MemState) Children(joinKey []byte, fn func(childKey, value []byte) error) error {
	for _, e := range sorted(m.children[string(joinKey)]) {
		if err := fn(e.k, e.v); err != nil {
			return err
		}
	}
	return nil
}

// ChildrenAfter implements State.
func (m *MemState) ChildrenAfter(joinKey, after []byte, fn func(childKey, value []byte) error) error {
	for _, e := range sorted(m.children[string(joinKey)]) {
		if after != nil && bytes.Compare(e.k, after) <= 0 {
			continue
		}
		if err := fn(e.k, e.v); err != nil {
			return err
		}
	}
	return nil
}

// HasChildren implements State.
func (m *MemState) HasChildren(joinKey, except []byte) (bool, error) {
	for ck := range m.children[string(joinKey)] {
		if except == nil || ck != string(except) {
			return true, nil
		}
	}
	return false, nil
}

// Groups implements State.
func (m *MemState) Groups(fn func(joinKey, parent []byte, children ChildScan) error) error {
	for _, p := range sorted(m.parents) {
		kids := sorted(m.children[string(p.k)])
		scanned := false
		scan := func(yield func(childKey, value []byte) error) error {
			if scanned {
				return errScannedTwice
			}
			scanned = true
			for _, c := range kids {
				if err := yield(c.k, c.v); err != nil {
					return err
				}
			}
			return nil
		}
		if err := fn(p.k, p.v, scan); err != nil {
			return err
		}
	}
	return nil
}

// ClearParents implements State.
func (m *MemState) ClearParents() error {
	clear(m.parents)
	return nil
}

// ClearChildren implements State.
func (m *MemState) ClearChildren() error {
	clear(m.children)
	return nil
}

// ChildIndex implements Index.
func (m *MemState) ChildIndex(childKey []byte) ([]byte, bool, error) {
	return get(m.childIndex, childKey)
}

// SetChildIndex implements Index.
func (m *MemState) SetChildIndex(childKey, entry []byte) error {
	m.childIndex[string(childKey)] = clone(entry)
	return nil
}

// DeleteChildIndex implements Index.
func (m *MemState) DeleteChildIndex(childKey []byte) error {
	delete(m.childIndex, string(childKey))
	return nil
}

// ClearChildIndex implements Index.
func (m *MemState) ClearChildIndex() error {
	clear(m.childIndex)
	return nil
}

// ParentIndex implements Index.
func (m *MemState) ParentIndex(parentKey []byte) ([]byte, bool, error) {
	return get(m.parentIndex, parentKey)
}

// SetParentIndex implements Index.
func (m *MemState) SetParentIndex(parentKey, entry []byte) error {
	m.parentIndex[string(parentKey)] = clone(entry)
	return nil
}

// DeleteParentIndex implements Index.
func (m *MemState) DeleteParentIndex(parentKey []byte) error {
	delete(m.parentIndex, string(parentKey))
	return nil
}

// ClearParentIndex implements Index.
func (m *MemState) ClearParentIndex() error {
	clear(m.parentIndex)
	return nil
}

// Aux implements State.
func (m *MemState) Aux(key []byte) ([]byte, bool, error) { return get(m.aux, key) }

// PutAux implements State.
func (m *MemState) PutAux(key, value []byte) error {
	m.aux[string(key)] = clone(value)
	return nil
}

// DeleteAux implements State.
func (m *MemState) DeleteAux(key []byte) error {
	delete(m.aux, string(key))
	return nil
}

// AuxScan implements State.
func (m *MemState) AuxScan(prefix, start []byte, fn func(key, value []byte) error) error {
	for _, e := range sorted(m.aux) {
		if !bytes.HasPrefix(e.k, prefix) || (start != nil && bytes.Compare(e.k, start) < 0) {
			continue
		}
		if err := fn(e.k, e.v); err != nil {
			return err
		}
	}
	return nil
}

package keyed

import "errors"

// State is what a Join reads and writes: per join key, the parent's value
// state and the children's map state (child key → value), both ordered by
// the encoded keys (row.AppendKey tuples). Values are opaque to the State:
// the Join encodes its records (ParentRecord, ChildRecord) itself.
//
// Contracts every implementation keeps:
//   - Reads see all earlier writes made through the same State.
//   - A State copies the slices it is given; a slice it returns (or passes
//     to a callback) is valid only until the next call on the State (for
//     callbacks: until the callback returns). Callers decode or copy.
//   - Children and Groups stream in key order and never load a join key's
//     children into memory at once; writes made by their callbacks are not
//     seen by the scan in progress.
//   - Errors are the storage's (I/O, corruption), wrapped; a State never
//     panics on bad bytes.
//
// joinstate.Txn implements it on pebble; MemState is the in-memory model.
type State interface {
	Parent(joinKey []byte) (value []byte, ok bool, err error)
	PutParent(joinKey, value []byte) error
	DeleteParent(joinKey []byte) error

	Child(joinKey, childKey []byte) (value []byte, ok bool, err error)
	PutChild(joinKey, childKey, value []byte) error
	DeleteChild(joinKey, childKey []byte) error
	// Children streams the children of joinKey in child-key order.
	Children(joinKey []byte, fn func(childKey, value []byte) error) error
	// ChildrenAfter streams the children of joinKey whose child key sorts
	// after the key after (every child when after is nil), in child-key
	// order: where a fan-out done in chunks resumes.
	ChildrenAfter(joinKey, after []byte, fn func(childKey, value []byte) error) error
	// HasChildren reports whether joinKey has a child other than except
	// (which may be nil).
	HasChildren(joinKey, except []byte) (bool, error)

	// Groups streams every stored parent, in join-key order, with a scan
	// of its children (to be called at most once, during fn). Children
	// whose join key has no parent are skipped.
	Groups(fn func(joinKey, parent []byte, children ChildScan) error) error

	// ClearParents and ClearChildren delete a whole side (a truncate).
	ClearParents() error
	ClearChildren() error

	// Aux, PutAux, DeleteAux and AuxScan are a small ordered key-value
	// keyspace for the join's bookkeeping next to the rows (child counts,
	// hot keys, fan-outs in progress and the inputs waiting for them, see
	// package skew). Keys are the caller's; truncates (ClearParents,
	// ClearChildren) and Groups never touch it. It commits with the rest.
	Aux(key []byte) (value []byte, ok bool, err error)
	PutAux(key, value []byte) error
	DeleteAux(key []byte) error
	// AuxScan streams the entries whose key starts with prefix and is at
	// least start (nil: from the first), in key order. Writes made by fn
	// are not seen by the scan in progress.
	AuxScan(prefix, start []byte, fn func(key, value []byte) error) error
}

// ChildScan streams the children of one join key (see State.Groups). It may
// be called at most once.
type ChildScan = func(fn func(childKey, value []byte) error) error

// Index is what a Keyer reads and writes: the child index (child key →
// the join key the child lives under and its last complete row) and, when
// Keyer.ResolveParents is set, the parent index (parent key → its last
// complete row). Entries are opaque to the Index; the slice and copy rules
// are State's.
type Index interface {
	ChildIndex(childKey []byte) (entry []byte, ok bool, err error)
	SetChildIndex(childKey, entry []byte) error
	DeleteChildIndex(childKey []byte) error
	ClearChildIndex() error

	ParentIndex(parentKey []byte) (entry []byte, ok bool, err error)
	SetParentIndex(parentKey, entry []byte) error
	DeleteParentIndex(parentKey []byte) error
	ClearParentIndex() error
}

var errScannedTwice = errors.New("cdcjoin: state: a join key's children scanned twice")

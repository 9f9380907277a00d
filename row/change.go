package row

// ChangeOp says whether a joined row appears/changes or disappears.
type ChangeOp uint8

// Output operations.
const (
	// Upsert: the row identified by the row key now has Values.
	Upsert ChangeOp = iota + 1
	// Retract: the row identified by the row key no longer exists; Values are
	// the values it was last emitted with.
	Retract
	// Insert: a row of an append-only output (a time join, package
	// timejoin), emitted once and never changed. It has no row key
	// (ParentKey, ChildKey nil); Version is the row's position in its
	// stream's output (1, 2, …), which a replay after a crash reproduces.
	Insert
)

func (o ChangeOp) String() string {
	switch o {
	case Upsert:
		return "upsert"
	case Retract:
		return "retract"
	case Insert:
		return "insert"
	}
	return "invalid"
}

// Change is one change of the materialized join, keyed by the row key
// (ParentKey, ChildKey).
//
// Versions: Version is the version of the input event that caused the change.
// Per row key, versions strictly increase in processing order, and replaying
// the same input from the same state yields the same changes with the same
// versions, so a sink keeping "highest version wins" per row key is
// idempotent. PrevVersion is the version at which the row was last emitted
// (for Retract, and for an Upsert of an existing row: Prev != nil); sinks that
// cancel rows (VersionedCollapsingMergeTree) need it.
//
// Ownership: the slices are only valid during the emit callback that received
// the Change; a sink that keeps them must copy them (the Values' strings may be
// kept).
type Change struct {
	Op          ChangeOp
	Version     uint64
	ParentKey   []Value // the join key (the parent's primary key)
	ChildKey    []Value // the child's primary key; nil for a LEFT join's padded row
	Values      []Value // select-list values, in select order
	Prev        []Value // Upsert of an existing row: its previous values; else nil
	PrevVersion uint64
}

// Padded reports whether c is a LEFT join's parent-without-children row.
func (c *Change) Padded() bool { return c.ChildKey == nil }

package keyed

import (
	"fmt"

	"github.com/cdcjoin/cdcjoin/row"
)

// InputKind is the kind of a keyed input.
type InputKind uint8

// Keyed input kinds.
const (
	ParentUpsert InputKind = iota + 1
	ParentDelete
	ChildUpsert
	ChildDelete
	// Truncate clears one side (Input.Side).
	Truncate
	// ParentLoad and ChildLoad store a record as is, with the versions it
	// was last emitted with (Input.Version, Input.PadVersion), and emit
	// nothing: the row is already in the sink. They carry state from
	// elsewhere — a replay's state handed over to run, or rows moved
	// between keyed partitions — so that later changes of the row cancel
	// and supersede exactly what was emitted.
	ParentLoad
	ChildLoad
	// EpochMarker raises the version epoch (Input.Epoch) of the keyed
	// partition it is read from. It changes no state: the driver applies it
	// to its version.Clock; Join.Apply rejects it.
	EpochMarker
)

func (k InputKind) String() string {
	switch k {
	case ParentUpsert:
		return "parent_upsert"
	case ParentDelete:
		return "parent_delete"
	case ChildUpsert:
		return "child_upsert"
	case ChildDelete:
		return "child_delete"
	case Truncate:
		return "truncate"
	case ParentLoad:
		return "parent_load"
	case ChildLoad:
		return "child_load"
	case EpochMarker:
		return "epoch_marker"
	}
	return "invalid"
}

// Input is one keyed change of a source row, the join operator's input.
type Input struct {
	Kind InputKind
	// Side is the table the input concerns (set for every kind).
	Side row.Side
	// JoinKey is the encoded join key tuple (row.AppendKey); unset for
	// Truncate.
	JoinKey []byte
	// ChildKey is the encoded child primary key (child inputs only).
	ChildKey []byte
	// Row is the projected row for upserts; it may hold KindUnavailable
	// placeholders, which keep the stored value.
	Row []row.Value
	// Epoch is an EpochMarker's proposed epoch.
	Epoch uint64
	// Version and PadVersion are a loaded record's versions (ParentLoad,
	// ChildLoad).
	Version, PadVersion uint64
	// Partition is the source partition of a parent upsert's event, when
	// PartitionKnown (a driver keying and joining on one state: the join
	// keeps it in the parent record).
	Partition      int32
	PartitionKnown bool
	// Absent (child upserts) says the child is known not to be stored under
	// JoinKey, so the join skips looking it up. The Keyer sets it from its
	// child index; it is only valid where keyer and join share one state
	// (the engine), and is not part of the keyed-topic record.
	Absent bool
}

// Emit receives one change. The Change and its slices are reused after Emit
// returns (see Change's ownership rules). An error aborts Apply.
type Emit func(*row.Change) error

// Stats counts what a Join did; the caller reads and resets it.
type Stats struct {
	Inputs      uint64
	Upserts     uint64
	Retractions uint64
	NoOps       uint64 // inputs that changed nothing (duplicates, unselected columns)
	MaxFanOut   uint64 // the most changes one input caused
	Unavailable uint64 // TOAST placeholders with no stored value to keep
}

// Join applies keyed Inputs to join state and emits changes of the joined
// rows. Not safe for concurrent use; it holds only scratch buffers, so any
// number of Joins may share a Spec.
type Join struct {
	spec  *Spec
	Stats Stats

	parent, oldParent ParentRecord
	child, oldChild   ChildRecord
	change            row.Change
	pkey, ckey        []row.Value
	vals, prev        []row.Value
	fan               uint64
	enc               []byte // scratch: records being stored
	scanParent        ParentRecord
	scanChild         ChildRecord
}

// NewJoin returns a join operator for spec.
func NewJoin(spec *Spec) *Join { return &Join{spec: spec} }

// Apply applies one input with the given version. Versions must increase
// from one Apply to the next on the same state; every change emitted by this
// call carries version. Errors come from the state (wrapped) or from emit.
func (j *Join) Apply(t State, in *Input, version uint64, emit Emit) error {
	j.Stats.Inputs++
	j.fan = 0
	var err error
	switch in.Kind {
	case ParentUpsert:
		err = j.parentUpsert(t, in, version, emit)
	case ParentDelete:
		err = j.parentDelete(t, in.JoinKey, version, emit)
	case ChildUpsert:
		err = j.childUpsert(t, in, version, emit)
	case ChildDelete:
		err = j.childDelete(t, in.JoinKey, in.ChildKey, version, emit)
	case ParentLoad:
		j.parent = ParentRecord{Version: in.Version, PadVersion: in.PadVersion, Row: append(j.parent.Row[:0], in.Row...), Partition: -1}
		err = t.PutParent(in.JoinKey, j.encParent(&j.parent))
	case ChildLoad:
		j.child = ChildRecord{Version: in.Version, Row: append(j.child.Row[:0], in.Row...)}
		err = t.PutChild(in.JoinKey, in.ChildKey, j.encChild(&j.child))
	case Truncate:
		if in.Side == row.Parent {
			err = j.truncateParents(t, version, emit)
		} else {
			err = j.truncateChildren(t, version, emit)
		}
	default:
		err = fmt.Errorf("cdcjoin: join: invalid input kind %d", in.Kind)
	}
	if j.fan == 0 {
		j.Stats.NoOps++
	}
	if j.fan > j.Stats.MaxFanOut {
		j.Stats.MaxFanOut = j.fan
	}
	return err
}

// merge copies vals into dst, keeping old values where vals has TOAST
// placeholders, and reports whether the result differs from old.
func (j *Join) merge(dst, vals, old []row.Value, hasOld bool) ([]row.Value, bool) {
	dst = dst[:0]
	changed := !hasOld
	for i, v := range vals {
		if v.Kind == row.KindUnavailable {
			if hasOld {
				v = old[i]
			} else {
				j.Stats.Unavailable++
			}
		}
		if hasOld && !v.Equal(old[i]) {
			changed = true
		}
		dst = append(dst, v)
	}
	return dst, changed
}

func (j *Join) emit(emit Emit, op row.ChangeOp, version uint64, joinKey, childKey []byte, vals, prev []row.Value, prevVersion uint64) error {
	var err error
	j.pkey, _, err = row.DecodeKey(j.pkey[:0], joinKey, len(j.spec.ParentKey))
	if err != nil {
		return err
	}
	c := &j.change
	*c = row.Change{Op: op, Version: version, ParentKey: j.pkey, Values: vals, Prev: prev, PrevVersion: prevVersion}
	if childKey != nil {
		j.ckey, _, err = row.DecodeKey(j.ckey[:0], childKey, len(j.spec.ChildKey))
		if err != nil {
			return err
		}
		c.ChildKey = j.ckey
	}
	if op == row.Upsert {
		j.Stats.Upserts++
	} else {
		j.Stats.Retractions++
	}
	j.fan++
	return emit(c)
}

func (j *Join) parentUpsert(t State, in *Input, version uint64, emit Emit) error {
	had, err := j.readParent(t, in.JoinKey, &j.oldParent)
	if err != nil {
		return err
	}
	var changed bool
	j.parent.Row, changed = j.merge(j.parent.Row, in.Row, j.oldParent.Row, had)
	if !changed {
		return nil
	}
	j.parent.Version = version
	j.parent.PadVersion = j.oldParent.PadVersion
	j.parent.Partition = -1
	if in.PartitionKnown {
		j.parent.Partition = in.Partition
	} else if had {
		j.parent.Partition = j.oldParent.Partition
	}
	if !had {
		j.parent.PadVersion = 0
	}
	any := false
	err = j.eachChild(func(fn func(ck, v []byte) error) error { return t.Children(in.JoinKey, fn) }, func(ck []byte, c *ChildRecord) error {
		any = true
		j.vals = j.spec.Output(j.vals, j.parent.Row, c.Row)
		var prev []row.Value
		var prevVer uint64
		if had {
			j.prev = j.spec.Output(j.prev, j.oldParent.Row, c.Row)
			prev, prevVer = j.prev, max(j.oldParent.Version, c.Version)
		}
		return j.emit(emit, row.Upsert, version, in.JoinKey, ck, j.vals, prev, prevVer)
	})
	if err != nil {
		return err
	}
	if !any && j.spec.Left {
		j.vals = j.spec.Output(j.vals, j.parent.Row, nil)
		var prev []row.Value
		var prevVer uint64
		if had {
			j.prev = j.spec.Output(j.prev, j.oldParent.Row, nil)
			prev, prevVer = j.prev, j.oldParent.PadVersion
		}
		j.parent.PadVersion = version
		if err := j.emit(emit, row.Upsert, version, in.JoinKey, nil, j.vals, prev, prevVer); err != nil {
			return err
		}
	}
	return t.PutParent(in.JoinKey, j.encParent(&j.parent))
}

func (j *Join) parentDelete(t State, joinKey []byte, version uint64, emit Emit) error {
	had, err := j.readParent(t, joinKey, &j.oldParent)
	if err != nil || !had {
		return err
	}
	if err := j.retractParentRows(t, joinKey, &j.oldParent, version, emit); err != nil {
		return err
	}
	return t.DeleteParent(joinKey)
}

// retractParentRows retracts every joined row of parent p.
func (j *Join) retractParentRows(t State, joinKey []byte, p *ParentRecord, version uint64, emit Emit) error {
	children := func(fn func(ck, v []byte) error) error { return t.Children(joinKey, fn) }
	any, err := j.retractChildren(joinKey, p, children, version, emit)
	if err != nil || any || !j.spec.Left {
		return err
	}
	j.vals = j.spec.Output(j.vals, p.Row, nil)
	return j.emit(emit, row.Retract, version, joinKey, nil, j.vals, nil, p.PadVersion)
}

// retractChildren retracts the rows joining parent p with each child
// children streams, and reports whether there was any.
func (j *Join) retractChildren(joinKey []byte, p *ParentRecord, children ChildScan, version uint64, emit Emit) (bool, error) {
	any := false
	err := j.eachChild(children, func(ck []byte, c *ChildRecord) error {
		any = true
		j.vals = j.spec.Output(j.vals, p.Row, c.Row)
		return j.emit(emit, row.Retract, version, joinKey, ck, j.vals, nil, max(p.Version, c.Version))
	})
	return any, err
}

func (j *Join) childUpsert(t State, in *Input, version uint64, emit Emit) error {
	had := false
	if !in.Absent {
		var err error
		if had, err = j.readChild(t, in.JoinKey, in.ChildKey, &j.oldChild); err != nil {
			return err
		}
	}
	var changed bool
	j.child.Row, changed = j.merge(j.child.Row, in.Row, j.oldChild.Row, had)
	if !changed {
		return nil
	}
	j.child.Version = version
	hasParent, err := j.readParent(t, in.JoinKey, &j.parent)
	if err != nil {
		return err
	}
	if hasParent {
		if !had && j.spec.Left {
			others, err := t.HasChildren(in.JoinKey, in.ChildKey)
			if err != nil {
				return err
			}
			if !others {
				j.vals = j.spec.Output(j.vals, j.parent.Row, nil)
				if err := j.emit(emit, row.Retract, version, in.JoinKey, nil, j.vals, nil, j.parent.PadVersion); err != nil {
					return err
				}
			}
		}
		j.vals = j.spec.Output(j.vals, j.parent.Row, j.child.Row)
		var prev []row.Value
		var prevVer uint64
		if had {
			j.prev = j.spec.Output(j.prev, j.parent.Row, j.oldChild.Row)
			prev, prevVer = j.prev, max(j.parent.Version, j.oldChild.Version)
		}
		if err := j.emit(emit, row.Upsert, version, in.JoinKey, in.ChildKey, j.vals, prev, prevVer); err != nil {
			return err
		}
	}
	return t.PutChild(in.JoinKey, in.ChildKey, j.encChild(&j.child))
}

func (j *Join) childDelete(t State, joinKey, childKey []byte, version uint64, emit Emit) error {
	had, err := j.readChild(t, joinKey, childKey, &j.oldChild)
	if err != nil || !had {
		return err
	}
	if err := t.DeleteChild(joinKey, childKey); err != nil {
		return err
	}
	hasParent, err := j.readParent(t, joinKey, &j.parent)
	if err != nil || !hasParent {
		return err
	}
	j.vals = j.spec.Output(j.vals, j.parent.Row, j.oldChild.Row)
	if err := j.emit(emit, row.Retract, version, joinKey, childKey, j.vals, nil, max(j.parent.Version, j.oldChild.Version)); err != nil {
		return err
	}
	if !j.spec.Left {
		return nil
	}
	others, err := t.HasChildren(joinKey, childKey)
	if err != nil || others {
		return err
	}
	j.vals = j.spec.Output(j.vals, j.parent.Row, nil)
	if err := j.emit(emit, row.Upsert, version, joinKey, nil, j.vals, nil, 0); err != nil {
		return err
	}
	j.parent.PadVersion = version
	return t.PutParent(joinKey, j.encParent(&j.parent))
}

// truncateParents retracts every joined row and deletes all parents.
func (j *Join) truncateParents(t State, version uint64, emit Emit) error {
	err := j.groups(t, func(jk []byte, p *ParentRecord, children ChildScan) error {
		any, err := j.retractChildren(jk, p, children, version, emit)
		if err != nil || any || !j.spec.Left {
			return err
		}
		j.vals = j.spec.Output(j.vals, p.Row, nil)
		return j.emit(emit, row.Retract, version, jk, nil, j.vals, nil, p.PadVersion)
	})
	if err != nil {
		return err
	}
	return t.ClearParents()
}

// truncateChildren retracts every parent-child row, pads parents in a LEFT
// join, and deletes all children. Parent record writes (the pad version) do
// not disturb the scan in progress.
func (j *Join) truncateChildren(t State, version uint64, emit Emit) error {
	err := j.groups(t, func(jk []byte, p *ParentRecord, children ChildScan) error {
		any, err := j.retractChildren(jk, p, children, version, emit)
		if err != nil || !any || !j.spec.Left {
			return err
		}
		j.vals = j.spec.Output(j.vals, p.Row, nil)
		if err := j.emit(emit, row.Upsert, version, jk, nil, j.vals, nil, 0); err != nil {
			return err
		}
		p.PadVersion = version
		return t.PutParent(jk, j.encParent(p))
	})
	if err != nil {
		return err
	}
	return t.ClearChildren()
}

// readParent reads and decodes joinKey's parent into rec.
func (j *Join) readParent(t State, joinKey []byte, rec *ParentRecord) (bool, error) {
	v, ok, err := t.Parent(joinKey)
	if !ok || err != nil {
		return false, err
	}
	return true, DecodeParent(v, rec)
}

// readChild reads and decodes child (joinKey, childKey) into rec.
func (j *Join) readChild(t State, joinKey, childKey []byte, rec *ChildRecord) (bool, error) {
	v, ok, err := t.Child(joinKey, childKey)
	if !ok || err != nil {
		return false, err
	}
	return true, DecodeChild(v, rec)
}

// encParent encodes rec into the Join's scratch buffer (valid until the
// next encoding).
func (j *Join) encParent(rec *ParentRecord) []byte {
	j.enc = AppendParent(j.enc[:0], rec)
	return j.enc
}

// encChild encodes rec into the Join's scratch buffer.
func (j *Join) encChild(rec *ChildRecord) []byte {
	j.enc = AppendChild(j.enc[:0], rec)
	return j.enc
}

// eachChild runs scan, decoding each child into a reused record for fn.
func (j *Join) eachChild(scan ChildScan, fn func(childKey []byte, c *ChildRecord) error) error {
	return scan(func(ck, v []byte) error {
		if err := DecodeChild(v, &j.scanChild); err != nil {
			return err
		}
		return fn(ck, &j.scanChild)
	})
}

// groups runs t.Groups, decoding each parent into a reused record for fn.
func (j *Join) groups(t State, fn func(joinKey []byte, p *ParentRecord, children ChildScan) error) error {
	return t.Groups(func(jk, v []byte, children ChildScan) error {
		if err := DecodeParent(v, &j.scanParent); err != nil {
			return err
		}
		return fn(jk, &j.scanParent, children)
	})
}

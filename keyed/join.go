package keyed

import (
	"errors"
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

	// NoFanOut, if set, names join keys whose parent-child rows this Join
	// does not emit: parent inputs and truncates update the parent (and a
	// LEFT join's padded row) without scanning the key's children, because
	// someone else emits those rows (package skew: the salted replicas of
	// a hot key). Child inputs are applied as usual.
	NoFanOut func(joinKey []byte) (bool, error)
	// ChildDelta is how the last Apply changed its join key's number of
	// children: +1 (a child inserted), -1 (deleted) or 0. Truncates leave
	// it 0.
	ChildDelta int

	parent, oldParent ParentRecord
	child, oldChild   ChildRecord
	change            row.Change
	pkey, ckey        []row.Value
	vals, prev        []row.Value
	fan               uint64
	enc               []byte // scratch: records being stored
	scanParent        ParentRecord
	scanChild         ChildRecord
	fo                FanOut // the fan-out being emitted
	budget            int    // rows the current fan-out may still emit (< 0: no limit)
	more              bool   // the fan-out stopped at its budget with children left
}

// NewJoin returns a join operator for spec.
func NewJoin(spec *Spec) *Join { return &Join{spec: spec} }

// Apply applies one input with the given version. Versions must increase
// from one Apply to the next on the same state; every change emitted by this
// call carries version. Errors come from the state (wrapped) or from emit.
func (j *Join) Apply(t State, in *Input, version uint64, emit Emit) error {
	_, err := j.Start(t, in, version, -1, emit)
	return err
}

// Start is Apply with a budget: a parent input's fan-out (the rows of the
// parent's children) emits at most budget rows (budget < 0: no limit). When
// children are left, Start has already written the parent's new state and
// returns the rest of the fan-out, which the caller finishes with Continue
// before applying any other input of the same join key (inputs of other
// keys may come in between; truncates may not). The returned FanOut owns
// its slices; it encodes with AppendFanOut to be kept with the state.
func (j *Join) Start(t State, in *Input, version uint64, budget int, emit Emit) (*FanOut, error) {
	j.Stats.Inputs++
	j.fan = 0
	j.ChildDelta = 0
	j.budget, j.more = budget, false
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
		var had bool
		if _, had, err = t.Child(in.JoinKey, in.ChildKey); err == nil && !had {
			j.ChildDelta = 1
		}
		j.child = ChildRecord{Version: in.Version, Row: append(j.child.Row[:0], in.Row...)}
		if err == nil {
			err = t.PutChild(in.JoinKey, in.ChildKey, j.encChild(&j.child))
		}
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
	if err != nil || !j.more {
		return nil, err
	}
	fo := j.fo.clone()
	return &fo, nil
}

// Continue emits up to budget more rows of a fan-out returned by Start
// (budget < 0: all of them) and reports whether it is finished. fo must
// come from Start (or DecodeFanOut) on the same state, with no input of its
// join key applied since; Continue advances it.
func (j *Join) Continue(t State, fo *FanOut, budget int, emit Emit) (done bool, err error) {
	j.fan = 0
	j.budget, j.more = budget, false
	j.fo = *fo // shares fo's slices until the end of this call
	_, err = j.fanOut(t, emit)
	fo.After = j.fo.After
	j.fo = FanOut{}
	if err != nil {
		return false, err
	}
	return !j.more, nil
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
	j.fo = FanOut{Kind: ParentUpsert, JoinKey: in.JoinKey, Version: version, Had: had, Old: j.oldParent, New: j.parent.Row, After: j.fo.After[:0]}
	any, err := j.startFanOut(t, in.JoinKey, emit)
	if err != nil {
		return err
	}
	if j.more {
		return t.PutParent(in.JoinKey, j.encParent(&j.parent))
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
	j.fo = FanOut{Kind: ParentDelete, JoinKey: joinKey, Version: version, Had: true, Old: j.oldParent, After: j.fo.After[:0]}
	any, err := j.startFanOut(t, joinKey, emit)
	if err != nil {
		return err
	}
	if !any && !j.more && j.spec.Left {
		j.vals = j.spec.Output(j.vals, j.oldParent.Row, nil)
		if err := j.emit(emit, row.Retract, version, joinKey, nil, j.vals, nil, j.oldParent.PadVersion); err != nil {
			return err
		}
	}
	return t.DeleteParent(joinKey)
}

// startFanOut emits the first rows of the fan-out in j.fo (the rows of the
// parent's children), or, for a join key under NoFanOut, only finds out
// whether it has children. It reports whether there was any child.
func (j *Join) startFanOut(t State, joinKey []byte, emit Emit) (bool, error) {
	if skip, any, err := j.delegated(t, joinKey); skip || err != nil {
		return any, err
	}
	return j.fanOut(t, emit)
}

// delegated reports whether joinKey's parent-child rows are someone else's
// to emit (NoFanOut), and if so whether the key has children.
func (j *Join) delegated(t State, joinKey []byte) (skip, any bool, err error) {
	if j.NoFanOut == nil {
		return false, false, nil
	}
	if skip, err = j.NoFanOut(joinKey); !skip || err != nil {
		return false, false, err
	}
	any, err = t.HasChildren(joinKey, nil)
	return true, any, err
}

// errBudget stops a children scan when a fan-out's budget is spent.
var errBudget = errors.New("cdcjoin: join: fan-out budget spent")

// fanOut emits the rows of j.fo's children after j.fo.After, up to
// j.budget rows; it sets j.more when it stopped with children left (and
// j.fo.After to the last child emitted). It reports whether it saw any
// child.
func (j *Join) fanOut(t State, emit Emit) (bool, error) {
	fo := &j.fo
	any := false
	scan := func(fn func(ck, v []byte) error) error { return t.ChildrenAfter(fo.JoinKey, fo.After, fn) }
	err := j.eachChild(scan, func(ck []byte, c *ChildRecord) error {
		any = true
		if j.budget == 0 {
			j.more = true
			return errBudget
		}
		j.budget--
		var err error
		if fo.Kind == ParentUpsert {
			j.vals = j.spec.Output(j.vals, fo.New, c.Row)
			var prev []row.Value
			var prevVer uint64
			if fo.Had {
				j.prev = j.spec.Output(j.prev, fo.Old.Row, c.Row)
				prev, prevVer = j.prev, max(fo.Old.Version, c.Version)
			}
			err = j.emit(emit, row.Upsert, fo.Version, fo.JoinKey, ck, j.vals, prev, prevVer)
		} else {
			j.vals = j.spec.Output(j.vals, fo.Old.Row, c.Row)
			err = j.emit(emit, row.Retract, fo.Version, fo.JoinKey, ck, j.vals, nil, max(fo.Old.Version, c.Version))
		}
		if j.budget >= 0 {
			fo.After = append(fo.After[:0], ck...)
		}
		return err
	})
	if err == errBudget {
		err = nil
	}
	return any, err
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
	if !had {
		j.ChildDelta = 1
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
	j.ChildDelta = -1
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
		any, err := j.truncateRows(t, jk, p, children, version, emit)
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
		any, err := j.truncateRows(t, jk, p, children, version, emit)
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

// truncateRows retracts the rows of parent p's children for a truncate
// (or, under NoFanOut, only finds out whether it has children).
func (j *Join) truncateRows(t State, jk []byte, p *ParentRecord, children ChildScan, version uint64, emit Emit) (bool, error) {
	if skip, any, err := j.delegated(t, jk); skip || err != nil {
		return any, err
	}
	return j.retractChildren(jk, p, children, version, emit)
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

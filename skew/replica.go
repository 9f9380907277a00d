package skew

import (
	"encoding/binary"
	"errors"

	"github.com/cdcjoin/cdcjoin/keyed"
)

// replicaState is the keyed.State of one replica (join key, salt): its
// parent record and its share of the children, kept in the Aux keyspace
// ('r' joinKey salt → parent, 'd' joinKey salt childKey → child) so that
// the partition's own truncates and Groups never see them: a replica
// changes only by the forwards of its hot key's partition, in their order.
// The join key passed to its methods must be the replica's.
type replicaState struct {
	t    keyed.State
	salt uint16
	key  []byte
	pfx  []byte
}

const (
	auxReplicaParent = 'r'
	auxReplicaChild  = 'd'
)

var errReplicaWhole = errors.New("cdcjoin: skew: a replica has no whole-side operations")

func (r *replicaState) bind(t keyed.State, salt uint16) *replicaState {
	r.t, r.salt = t, salt
	return r
}

func (r *replicaState) parentKey(jk []byte) []byte {
	r.key = binary.BigEndian.AppendUint16(append(append(r.key[:0], auxReplicaParent), jk...), r.salt)
	return r.key
}

func (r *replicaState) childPrefix(jk []byte) []byte {
	r.pfx = binary.BigEndian.AppendUint16(append(append(r.pfx[:0], auxReplicaChild), jk...), r.salt)
	return r.pfx
}

func (r *replicaState) childKey(jk, ck []byte) []byte {
	r.key = append(append(r.key[:0], r.childPrefix(jk)...), ck...)
	return r.key
}

func (r *replicaState) Parent(jk []byte) ([]byte, bool, error) { return r.t.Aux(r.parentKey(jk)) }
func (r *replicaState) PutParent(jk, v []byte) error           { return r.t.PutAux(r.parentKey(jk), v) }
func (r *replicaState) DeleteParent(jk []byte) error           { return r.t.DeleteAux(r.parentKey(jk)) }
func (r *replicaState) Child(jk, ck []byte) ([]byte, bool, error) {
	return r.t.Aux(r.childKey(jk, ck))
}
func (r *replicaState) PutChild(jk, ck, v []byte) error { return r.t.PutAux(r.childKey(jk, ck), v) }
func (r *replicaState) DeleteChild(jk, ck []byte) error { return r.t.DeleteAux(r.childKey(jk, ck)) }

func (r *replicaState) Children(jk []byte, fn func(ck, v []byte) error) error {
	return r.ChildrenAfter(jk, nil, fn)
}

func (r *replicaState) ChildrenAfter(jk, after []byte, fn func(ck, v []byte) error) error {
	pfx := append([]byte(nil), r.childPrefix(jk)...)
	var start []byte
	if after != nil {
		// Child keys are prefix-free: the first key after `after` is at
		// least after+0x00.
		start = append(append(append([]byte(nil), pfx...), after...), 0)
	}
	return r.t.AuxScan(pfx, start, func(k, v []byte) error { return fn(k[len(pfx):], v) })
}

func (r *replicaState) HasChildren(jk, except []byte) (bool, error) {
	found := false
	stop := errors.New("stop")
	err := r.Children(jk, func(ck, _ []byte) error {
		if except == nil || string(ck) != string(except) {
			found = true
			return stop
		}
		return nil
	})
	if err == stop {
		err = nil
	}
	return found, err
}

func (r *replicaState) Groups(func(jk, parent []byte, children keyed.ChildScan) error) error {
	return errReplicaWhole
}
func (r *replicaState) ClearParents() error  { return errReplicaWhole }
func (r *replicaState) ClearChildren() error { return errReplicaWhole }

func (r *replicaState) Aux(k []byte) ([]byte, bool, error) { return r.t.Aux(k) }
func (r *replicaState) PutAux(k, v []byte) error           { return r.t.PutAux(k, v) }
func (r *replicaState) DeleteAux(k []byte) error           { return r.t.DeleteAux(k) }
func (r *replicaState) AuxScan(p, s []byte, fn func(k, v []byte) error) error {
	return r.t.AuxScan(p, s, fn)
}

var _ keyed.State = (*replicaState)(nil)

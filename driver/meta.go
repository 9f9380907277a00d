package driver

import (
	"encoding/binary"
	"fmt"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/version"
)

// The metadata a driven partition commits with its state: every key a
// driver writes, with its one encoding. A MetaKey is a descriptor (its
// name and how its value is stored), never state.
//
//	key          value                                  who
//	clock        version.Clock                          engine, join partitions
//	inputs       uint64: keyed inputs applied            engine (the clock's positions)
//	version      uint64: ≤ wave 1's version counter      engine (read only: a legacy clock)
//	fingerprint  the join's shape (Fingerprint)          engine
//	keytypes     job.Decoder.KeyTypes                    engine
//	batches      uint64: batches committed               engine (a Positioned sink's position)
//	stream       the state's stream for delivery markers engine (a time join: its rows' _stream)
//	bulk_load    1 while a bulk load of the snapshot runs engine
//	changelog    uint64: the changelog offset mirrored   keying indexes
//	shape        the index's projection                  keying indexes
//
// A join partition of `run` keeps only its clock (and its position); its
// stream is named by its sink (the keyed topic, partition and topic id).
var (
	MetaClock       = MetaKey[version.Clock]{"clock", encodeClock, decodeClock}
	MetaInputs      = MetaKey[int64]{"inputs", encodeUint, decodeUint}
	MetaLegacyCount = MetaKey[int64]{"version", encodeUint, decodeUint}
	MetaFingerprint = MetaKey[[]byte]{"fingerprint", encodeBytes, decodeBytes}
	MetaKeyTypes    = MetaKey[[]byte]{"keytypes", encodeBytes, decodeBytes}
	MetaBatches     = MetaKey[int64]{"batches", encodeUint, decodeUint}
	MetaStream      = MetaKey[string]{"stream", encodeString, decodeString}
	MetaBulkLoad    = MetaKey[bool]{"bulk_load", encodeBool, decodeBool}
	MetaChangelog   = MetaKey[int64]{"changelog", encodeUint, decodeUint}
	MetaIndexShape  = MetaKey[[]byte]{"shape", encodeBytes, decodeBytes}
)

// MetaReader reads committed metadata (joinstate.Store, joinstate.Txn):
// nil for an absent name.
type MetaReader interface {
	Meta(name string) ([]byte, error)
}

// MetaWriter writes metadata with a batch's state writes (joinstate.Txn,
// joinstate.Load).
type MetaWriter interface {
	SetMeta(name string, value []byte) error
}

// MetaKey names one metadata value of type T and its encoding.
type MetaKey[T any] struct {
	Name   string
	encode func(T) []byte
	decode func([]byte) (T, error)
}

// Get reads k's committed value; ok is false when absent.
func (k MetaKey[T]) Get(r MetaReader) (v T, ok bool, err error) {
	b, err := r.Meta(k.Name)
	if err != nil || b == nil {
		return v, false, err
	}
	if v, err = k.decode(b); err != nil {
		return v, false, fmt.Errorf("state metadata %q: %w", k.Name, err)
	}
	return v, true, nil
}

// Put writes v as k's value.
func (k MetaKey[T]) Put(w MetaWriter, v T) error { return w.SetMeta(k.Name, k.encode(v)) }

func encodeClock(c version.Clock) []byte {
	b, _ := c.MarshalBinary()
	return b
}

func decodeClock(b []byte) (version.Clock, error) {
	var c version.Clock
	return c, c.UnmarshalBinary(b)
}

func encodeUint(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }

func decodeUint(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: %d bytes, want 8", row.ErrCorrupt, len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

func encodeBytes(b []byte) []byte           { return b }
func decodeBytes(b []byte) ([]byte, error)  { return b, nil }
func encodeString(s string) []byte          { return []byte(s) }
func decodeString(b []byte) (string, error) { return string(b), nil }
func encodeBool(v bool) []byte {
	if v {
		return []byte{1}
	}
	return []byte{0}
}
func decodeBool(b []byte) (bool, error) { return len(b) == 1 && b[0] == 1, nil }

// Fingerprint identifies a join's shape: a state built for another
// projection or join kind must not be resumed (MetaFingerprint).
func Fingerprint(spec *keyed.Spec) []byte {
	kind := "inner"
	if spec.Left {
		kind = "left"
	}
	s := fmt.Sprintf("v2|%s|%v|%v|%v|%v|%v|%v", kind, spec.ParentColumns, spec.ChildColumns,
		spec.ParentKey, spec.ChildKey, spec.ChildFK, spec.Out)
	return []byte(s)
}

// IndexShape identifies the projection a keying index was built for
// (MetaIndexShape).
func IndexShape(spec *keyed.Spec) []byte {
	return []byte(fmt.Sprintf("%v|%v", spec.ParentColumns, spec.ChildColumns))
}

// CheckFingerprint refuses a state (in dir) whose committed fingerprint is
// another join shape's.
func CheckFingerprint(r MetaReader, spec *keyed.Spec, dir string) error {
	return CheckFingerprintBytes(r, Fingerprint(spec), dir)
}

// CheckFingerprintBytes is CheckFingerprint for a shape's own fingerprint
// (a multi-stage plan's, say).
func CheckFingerprintBytes(r MetaReader, want []byte, dir string) error {
	fp, ok, err := MetaFingerprint.Get(r)
	if err != nil {
		return err
	}
	if ok && string(fp) != string(want) {
		return fmt.Errorf("cdcjoin: state in %s was built for another join shape (%s); remove it to rebuild", dir, fp)
	}
	return nil
}

// ReadClock returns the version clock committed in r, or for a state
// without one (new, or a join partition written by cdcjoin ≤ wave 1) the
// legacy clock of legacyEpoch (kafka.epoch), which the partition's epoch
// markers raise.
func ReadClock(r MetaReader, legacyEpoch uint64) (version.Clock, error) {
	c, ok, err := MetaClock.Get(r)
	if err != nil || ok {
		return c, err
	}
	return version.Legacy(legacyEpoch), nil
}

// PlanFingerprint identifies the state shape of a multi-stage plan's
// `replay` (MetaFingerprint): the query and every table's key, and the
// layout of the tables' index entries: partitions says they record their
// source partitions (stage.Keyer.Partitions, "plan2", what a handover
// needs), else they are rows alone ("plan1", states of cdcjoin before it).
func PlanFingerprint(cfg *config.Config, partitions bool) []byte {
	b := []byte("plan1|")
	if partitions {
		b = []byte("plan2|")
	}
	for _, t := range cfg.Plan().Tables {
		b = fmt.Appendf(b, "%s:%s:%v|", t.Alias, t.Name, t.Key)
	}
	return append(b, cfg.Query...)
}

// PlanPartitions reports whether a plan's replay state in r records its
// index entries' source partitions (PlanFingerprint): true for a new state
// (no fingerprint yet) and for one built so, false for an older one; a
// state of another shape is refused (in dir).
func PlanPartitions(r MetaReader, cfg *config.Config, dir string) (bool, error) {
	fp, ok, err := MetaFingerprint.Get(r)
	if err != nil || !ok {
		return true, err
	}
	if string(fp) == string(PlanFingerprint(cfg, false)) {
		return false, nil
	}
	return true, CheckFingerprintBytes(r, PlanFingerprint(cfg, true), dir)
}

package keyedlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
)

// The keying stage's records (package keyed's Inputs) and epoch markers.
const (
	recParent    = 'P'
	recChild     = 'C'
	recTruncate  = 'T'
	recEpoch     = 'E'
	valueV1      = 0x01
	valueLoad    = 0x02
	valueCompact = 0x03
)

// AppendInputKey appends the record key of in (not an EpochMarker) to dst.
func AppendInputKey(dst []byte, in *keyed.Input) []byte {
	switch in.Kind {
	case keyed.Truncate:
		return append(dst, recTruncate, sideByte(in.Side))
	case keyed.ParentUpsert, keyed.ParentDelete, keyed.ParentLoad:
		return append(append(dst, recParent), in.JoinKey...)
	default:
		return append(append(append(dst, recChild), in.JoinKey...), in.ChildKey...)
	}
}

// AppendInputValue appends the record value of in to dst (the full row of
// an upsert: see AppendCompactValue); it returns nil for deletes
// (tombstones).
func AppendInputValue(dst []byte, in *keyed.Input) []byte {
	switch in.Kind {
	case keyed.ParentUpsert, keyed.ChildUpsert:
		return row.AppendRow(append(dst, valueV1), in.Row)
	case keyed.ParentLoad:
		dst = binary.AppendUvarint(append(dst, valueLoad), in.Version)
		return row.AppendRow(binary.AppendUvarint(dst, in.PadVersion), in.Row)
	case keyed.ChildLoad:
		dst = binary.AppendUvarint(append(dst, valueLoad), in.Version)
		return row.AppendRow(dst, in.Row)
	case keyed.Truncate:
		return append(dst, valueV1)
	}
	return nil
}

// AppendCompactValue appends the record value of in to dst as
// AppendInputValue does, but leaves out of an upsert's row the columns its
// record key (key, made by AppendInputKey) carries, when the key holds
// exactly their values (always for inputs of the Keyer; otherwise, or for
// other kinds, it writes what AppendInputValue writes). Decode reads both.
func AppendCompactValue(s *keyed.Spec, dst, key []byte, in *keyed.Input) []byte {
	if (in.Kind != keyed.ParentUpsert && in.Kind != keyed.ChildUpsert) || len(key) < 1 {
		return AppendInputValue(dst, in)
	}
	n := len(dst)
	dst = append(dst, valueCompact)
	start := len(dst)
	// The key the row's own values make, to compare with the record key.
	if in.Side == row.Parent {
		dst = appendKeyOf(dst, in.Row, s.ParentKey)
	} else {
		dst = appendKeyOf(appendKeyOf(dst, in.Row, s.ChildFK), in.Row, s.ChildKey)
	}
	if string(dst[start:]) != string(key[1:]) {
		return AppendInputValue(dst[:n], in)
	}
	dst = dst[:start]
	for i, v := range in.Row {
		if !inKey(s, in.Side, i) {
			dst = row.AppendRowValue(dst, v)
		}
	}
	return dst
}

func appendKeyOf(dst []byte, vals []row.Value, idx []int) []byte {
	for _, i := range idx {
		if i >= len(vals) {
			return append(dst, 0xff) // never a key: no compact form
		}
		dst = row.AppendKey(dst, vals[i:i+1])
	}
	return dst
}

// inKey reports whether column i of side's row is carried by the keyed
// record key.
func inKey(s *keyed.Spec, side row.Side, i int) bool {
	if side == row.Parent {
		return slices.Contains(s.ParentKey, i)
	}
	return slices.Contains(s.ChildFK, i) || slices.Contains(s.ChildKey, i)
}

// decodeCompact decodes the row of a 0x03 value (b, after its format
// byte) into in.Row, taking the key columns from in's keys.
func decodeCompact(s *keyed.Spec, in *keyed.Input, b []byte) error {
	want := len(s.ParentColumns)
	if in.Side == row.Child {
		want = len(s.ChildColumns)
	}
	r := slices.Grow(in.Row[:0], 2*want)[:want]
	// Key values and the rest are decoded after the row's want slots.
	var kv []row.Value
	var err error
	if in.Side == row.Parent {
		if kv, _, err = row.DecodeKey(r[want:want], in.JoinKey, len(s.ParentKey)); err != nil {
			return err
		}
		for j, i := range s.ParentKey {
			r[i] = kv[j]
		}
	} else {
		if kv, _, err = row.DecodeKey(r[want:want], in.JoinKey, len(s.ChildFK)); err != nil {
			return err
		}
		if kv, _, err = row.DecodeKey(kv, in.ChildKey, len(s.ChildKey)); err != nil {
			return err
		}
		for j, i := range s.ChildFK {
			r[i] = kv[j]
		}
		for j, i := range s.ChildKey {
			r[i] = kv[len(s.ChildFK)+j]
		}
	}
	rest, err := row.DecodeRow(kv[len(kv):len(kv)], b)
	if err != nil {
		return err
	}
	j := 0
	for i := range r {
		if inKey(s, in.Side, i) {
			continue
		}
		if j >= len(rest) {
			return fmt.Errorf("%w: compact keyed row has %d columns, the join projects %d (config changed? the keyed topic must be rebuilt)", row.ErrCorrupt, len(rest), want-len(kv))
		}
		r[i] = rest[j]
		j++
	}
	if j != len(rest) {
		return fmt.Errorf("%w: compact keyed row has %d columns, the join projects %d (config changed? the keyed topic must be rebuilt)", row.ErrCorrupt, len(rest), j)
	}
	in.Row = r
	return nil
}

// decodeInput parses a record of the keying stage ('P', 'C', 'T') into
// in, reusing in.Row; in's byte slices alias key.
func decodeInput(s *keyed.Spec, key, value []byte, in *keyed.Input) error {
	if value != nil && (len(value) == 0 || (value[0] != valueV1 && value[0] != valueLoad && value[0] != valueCompact)) {
		return errors.New("unknown value format")
	}
	*in = keyed.Input{Row: in.Row[:0]}
	switch key[0] {
	case recTruncate:
		in.Kind = keyed.Truncate
		switch key[1] {
		case 'P':
			in.Side = row.Parent
		case 'C':
			in.Side = row.Child
		default:
			return fmt.Errorf("bad truncate side %q", key[1])
		}
		return nil
	case recParent:
		in.Side, in.JoinKey = row.Parent, key[1:]
		in.Kind = keyed.ParentDelete
		if value != nil {
			in.Kind = keyed.ParentUpsert
		}
		if value != nil && value[0] == valueLoad {
			in.Kind = keyed.ParentLoad
			var err error
			if value, err = loadVersions(value, &in.Version, &in.PadVersion); err != nil {
				return err
			}
		}
	case recChild:
		in.Side = row.Child
		_, n, err := row.DecodeKey(nil, key[1:], len(s.ParentKey))
		if err != nil {
			return err
		}
		in.JoinKey, in.ChildKey = key[1:1+n], key[1+n:]
		in.Kind = keyed.ChildDelete
		if value != nil {
			in.Kind = keyed.ChildUpsert
		}
		if value != nil && value[0] == valueLoad {
			in.Kind = keyed.ChildLoad
			var err error
			if value, err = loadVersions(value, &in.Version, nil); err != nil {
				return err
			}
		}
	}
	if value != nil && value[0] == valueCompact {
		if in.Kind != keyed.ParentUpsert && in.Kind != keyed.ChildUpsert {
			return fmt.Errorf("a compact value on a %q record", key[0])
		}
		return decodeCompact(s, in, value[1:])
	}
	if value != nil {
		var err error
		if in.Row, err = row.DecodeRow(in.Row, value[1:]); err != nil {
			return err
		}
		want := len(s.ParentColumns)
		if in.Side == row.Child {
			want = len(s.ChildColumns)
		}
		if len(in.Row) != want {
			return fmt.Errorf("row has %d columns, the join projects %d (config changed? the keyed topic must be rebuilt)", len(in.Row), want)
		}
	}
	return nil
}

// loadVersions reads the versions of a load record's value (after its
// format byte) and returns the value re-framed so that the row follows
// one format byte (value[1:] is the row).
func loadVersions(value []byte, version, pad *uint64) ([]byte, error) {
	b := value[1:]
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, fmt.Errorf("%w: load version", row.ErrCorrupt)
	}
	*version, b = v, b[n:]
	if pad != nil {
		p, m := binary.Uvarint(b)
		if m <= 0 {
			return nil, fmt.Errorf("%w: load pad version", row.ErrCorrupt)
		}
		*pad, b = p, b[m:]
	}
	return value[len(value)-len(b)-1:], nil
}

// AppendEpochKey appends the record key of an epoch marker proposing
// epoch, written by writer (unique per write: an instance id and a nonce);
// its value is EpochValue().
func AppendEpochKey(dst []byte, epoch uint64, writer string) []byte {
	dst = binary.BigEndian.AppendUint64(append(dst, recEpoch), epoch)
	return append(dst, writer...)
}

// EpochValue returns the value of an epoch marker record.
func EpochValue() []byte { return []byte{valueV1} }

// Partition returns the keyed-topic partition of a join key: FNV-1a 64 of
// the encoded key, modulo n. Every input for one join key lands on one
// partition, which is what makes per-partition join state complete.
func Partition(joinKey []byte, n int32) int32 {
	h := uint64(14695981039346656037)
	for _, c := range joinKey {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return int32(h % uint64(n))
}

func sideByte(s row.Side) byte {
	if s == row.Parent {
		return 'P'
	}
	return 'C'
}

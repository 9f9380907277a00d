package keyed

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cdcjoin/cdcjoin/row"
)

// Keyed-topic record format (the internal, compacted "<name>.keyed" topic).
//
//	key:   'P' joinKey            parent row
//	       'C' joinKey childKey   child row
//	       'T' side               truncate of side ('P' or 'C')
//	value: 0x01 row (row.AppendRow) for upserts; nil (a tombstone) for
//	       deletes; 0x01 for truncates.
//	       0x03 row without the columns the key carries (the parent key;
//	       the child's foreign key and key), for upserts whose key holds
//	       exactly those values (AppendCompactRecordValue: what the keying
//	       stage writes since it was introduced; 0x01 records written
//	       before stay readable).
//
// The key is unique per live source row, so log compaction keeps exactly the
// live rows (plus the latest truncate marker per side), and the topic doubles
// as the join state's changelog.
const (
	recParent    = 'P'
	recChild     = 'C'
	recTruncate  = 'T'
	recEpoch     = 'E'
	valueV1      = 0x01
	valueLoad    = 0x02
	valueCompact = 0x03
)

// AppendRecordKey appends in's keyed-topic record key to dst.
func AppendRecordKey(dst []byte, in *Input) []byte {
	switch in.Kind {
	case Truncate:
		return append(dst, recTruncate, sideByte(in.Side))
	case ParentUpsert, ParentDelete, ParentLoad:
		return append(append(dst, recParent), in.JoinKey...)
	default:
		return append(append(append(dst, recChild), in.JoinKey...), in.ChildKey...)
	}
}

// AppendRecordValue appends in's record value to dst; it returns nil for
// deletes (tombstones).
func AppendRecordValue(dst []byte, in *Input) []byte {
	switch in.Kind {
	case ParentUpsert, ChildUpsert:
		return row.AppendRow(append(dst, valueV1), in.Row)
	case ParentLoad:
		dst = binary.AppendUvarint(append(dst, valueLoad), in.Version)
		return row.AppendRow(binary.AppendUvarint(dst, in.PadVersion), in.Row)
	case ChildLoad:
		dst = binary.AppendUvarint(append(dst, valueLoad), in.Version)
		return row.AppendRow(dst, in.Row)
	case Truncate:
		return append(dst, valueV1)
	}
	return nil
}

// AppendCompactRecordValue appends in's record value to dst as
// AppendRecordValue does, but leaves out of an upsert's row the columns its
// record key (key, made by AppendRecordKey) carries, when the key holds
// exactly their values (always for inputs of the Keyer; otherwise, or for
// other kinds, it writes what AppendRecordValue writes). DecodeRecord reads
// both.
func (s *Spec) AppendCompactRecordValue(dst, key []byte, in *Input) []byte {
	if (in.Kind != ParentUpsert && in.Kind != ChildUpsert) || len(key) < 1 {
		return AppendRecordValue(dst, in)
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
		return AppendRecordValue(dst[:n], in)
	}
	dst = dst[:start]
	for i, v := range in.Row {
		if !s.inKey(in.Side, i) {
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
func (s *Spec) inKey(side row.Side, i int) bool {
	if side == row.Parent {
		return slices.Contains(s.ParentKey, i)
	}
	return slices.Contains(s.ChildFK, i) || slices.Contains(s.ChildKey, i)
}

// decodeCompact decodes the row of a 0x03 value (b, after its format
// byte) into in.Row, taking the key columns from in's keys.
func (s *Spec) decodeCompact(in *Input, b []byte) error {
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
		if s.inKey(in.Side, i) {
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

// DecodeRecord parses a keyed-topic record into in, reusing in.Row. The
// Input's byte slices alias key.
func (s *Spec) DecodeRecord(key, value []byte, in *Input) error {
	if len(key) < 2 {
		return fmt.Errorf("cdcjoin: keyed record: key too short (%d bytes)", len(key))
	}
	if value != nil && (len(value) == 0 || (value[0] != valueV1 && value[0] != valueLoad && value[0] != valueCompact)) {
		return fmt.Errorf("cdcjoin: keyed record: unknown value format")
	}
	*in = Input{Row: in.Row[:0]}
	switch key[0] {
	case recEpoch:
		if len(key) < 9 {
			return fmt.Errorf("cdcjoin: keyed record: epoch marker key too short (%d bytes)", len(key))
		}
		in.Kind, in.Epoch = EpochMarker, binary.BigEndian.Uint64(key[1:9])
		return nil
	case recTruncate:
		in.Kind = Truncate
		switch key[1] {
		case 'P':
			in.Side = row.Parent
		case 'C':
			in.Side = row.Child
		default:
			return fmt.Errorf("cdcjoin: keyed record: bad truncate side %q", key[1])
		}
		return nil
	case recParent:
		in.Side, in.JoinKey = row.Parent, key[1:]
		in.Kind = ParentDelete
		if value != nil {
			in.Kind = ParentUpsert
		}
		if value != nil && value[0] == valueLoad {
			in.Kind = ParentLoad
			var err error
			if value, err = loadVersions(value, &in.Version, &in.PadVersion); err != nil {
				return err
			}
		}
	case recChild:
		in.Side = row.Child
		_, n, err := row.DecodeKey(nil, key[1:], len(s.ParentKey))
		if err != nil {
			return fmt.Errorf("cdcjoin: keyed record: %w", err)
		}
		in.JoinKey, in.ChildKey = key[1:1+n], key[1+n:]
		in.Kind = ChildDelete
		if value != nil {
			in.Kind = ChildUpsert
		}
		if value != nil && value[0] == valueLoad {
			in.Kind = ChildLoad
			var err error
			if value, err = loadVersions(value, &in.Version, nil); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("cdcjoin: keyed record: unknown key type %q", key[0])
	}
	if value != nil && value[0] == valueCompact {
		if in.Kind != ParentUpsert && in.Kind != ChildUpsert {
			return fmt.Errorf("cdcjoin: keyed record: a compact value on a %q record", key[0])
		}
		if err := s.decodeCompact(in, value[1:]); err != nil {
			return fmt.Errorf("cdcjoin: keyed record: %w", err)
		}
	} else if value != nil {
		var err error
		in.Row, err = row.DecodeRow(in.Row, value[1:])
		if err != nil {
			return fmt.Errorf("cdcjoin: keyed record: %w", err)
		}
		want := len(s.ParentColumns)
		if in.Side == row.Child {
			want = len(s.ChildColumns)
		}
		if len(in.Row) != want {
			return fmt.Errorf("cdcjoin: keyed record: row has %d columns, the join projects %d (config changed? the keyed topic must be rebuilt)", len(in.Row), want)
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
		return nil, fmt.Errorf("cdcjoin: keyed record: %w: load version", row.ErrCorrupt)
	}
	*version, b = v, b[n:]
	if pad != nil {
		p, m := binary.Uvarint(b)
		if m <= 0 {
			return nil, fmt.Errorf("cdcjoin: keyed record: %w: load pad version", row.ErrCorrupt)
		}
		*pad, b = p, b[m:]
	}
	return value[len(value)-len(b)-1:], nil
}

// AppendEpochMarker appends the keyed-topic record key of an epoch marker
// proposing epoch, written by writer (unique per write: an instance id and
// a nonce); its value is EpochMarkerValue().
func AppendEpochMarker(dst []byte, epoch uint64, writer string) []byte {
	dst = binary.BigEndian.AppendUint64(append(dst, recEpoch), epoch)
	return append(dst, writer...)
}

// EpochMarkerValue returns the value of an epoch marker record.
func EpochMarkerValue() []byte { return []byte{valueV1} }

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

package timejoin

import (
	"encoding/binary"
	"fmt"
)

// State layout. Every key starts with a one-byte prefix; join keys and
// primary keys are length-prefixed (uvarint), times are 8 bytes
// big-endian with the sign bit flipped (so byte order is time order):
//
//	'r' side len(jk) jk time pk          → flags, row           a row of an interval or window join, a temporal left row
//	'v' len(pk) pk time seq              → 0x00 | 0x01 len(jk) jk row   a temporal right version (0x00: deleted)
//	'k' len(jk) jk pk                    → ()                    the temporal right pk has a version under jk
//	'm' 'w'                              → Watermarks
//	'm' 'c'                              → counters: rows emitted (seq), right changes applied
//
// Timers are not in the state but in the Join's memory (memory.go), keyed
// like this and rebuilt by Load from the rows, versions and watermarks:
//
//	't' fire side len(jk) jk time pk     a row's timer: 'r' + key[9:] is the row
//	't' fire 'W' jk                      the window of jk ending at fire+1 closes
//	't' fire 'V' pk                      versions of pk below fire+1 are retired
//
// A timer fires when E > fire. Per key, a side's rows are ordered by
// time, so an interval lookup is one range scan and the timers are a queue
// ordered by fire time.
const (
	kRow     = 'r'
	kVersion = 'v'
	kMember  = 'k'
	kTimer   = 't'
	kMeta    = 'm'

	tWindow  = 'W'
	tVersion = 'V'
)

// Row flags.
const (
	fMatched   = 1 << 0 // the row joined a partner (interval)
	fOuterDone = 1 << 1 // its padded row was emitted (interval, bound before its own time)
	fKeyNull   = 1 << 2 // its join key has a NULL: it never matches
	fCompact   = 1 << 3 // the value leaves out the join key columns (Spec.KeyCols)
	fTimeOut   = 1 << 4 // and the time column (the key's time)
)

var (
	metaWatermarks = []byte{kMeta, 'w'}
	metaCounters   = []byte{kMeta, 'c'}
)

func appendTime(b []byte, t int64) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(t)^(1<<63))
}

func readTime(b []byte) int64 { return int64(binary.BigEndian.Uint64(b) ^ (1 << 63)) }

func appendBytes(b, v []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

// readBytes splits a length-prefixed field off b.
func readBytes(b []byte) (v, rest []byte, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		return nil, nil, fmt.Errorf("%w: key field", errCorrupt)
	}
	return b[k : k+int(n)], b[k+int(n):], nil
}

// rowPrefix is 'r' side len(jk) jk: the rows of one key of one side.
func rowPrefix(b []byte, side Side, jk []byte) []byte {
	return appendBytes(append(b, kRow, byte(side)), jk)
}

// rowKey is the key of a row.
func rowKey(b []byte, side Side, jk []byte, t int64, pk []byte) []byte {
	return append(appendTime(rowPrefix(b, side, jk), t), pk...)
}

// parseRowKey splits a row key (from its side byte on: key[1:]).
func parseRowKey(k []byte) (side Side, jk []byte, t int64, pk []byte, err error) {
	if len(k) < 1 {
		return 0, nil, 0, nil, fmt.Errorf("%w: row key", errCorrupt)
	}
	side = Side(k[0])
	jk, rest, err := readBytes(k[1:])
	if err != nil || len(rest) < 8 {
		return 0, nil, 0, nil, fmt.Errorf("%w: row key", errCorrupt)
	}
	return side, jk, readTime(rest), rest[8:], nil
}

// timeBound returns prefix + the encoding of t, or for t = MaxTime+1
// (after) the prefix's successor: keys prefix+time+… with time < t sort
// below it.
func timeBound(b, prefix []byte, t int64, after bool) []byte {
	if after {
		if t == MaxTime {
			return successor(append(b, prefix...))
		}
		t++
	}
	return appendTime(append(b, prefix...), t)
}

// successor returns the smallest key above every key with prefix p
// (modifying p's bytes): p with its last byte below 0xff incremented.
func successor(p []byte) []byte {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] != 0xff {
			p[i]++
			return p[:i+1]
		}
	}
	return nil // every byte 0xff: no successor (nil: no upper bound)
}

// versionPrefix is 'v' len(pk) pk: the versions of a temporal right pk.
func versionPrefix(b []byte, pk []byte) []byte { return appendBytes(append(b, kVersion), pk) }

func versionKey(b []byte, pk []byte, t int64, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(appendTime(versionPrefix(b, pk), t), seq)
}

// memberPrefix is 'k' len(jk) jk: the temporal right pks with a version
// under jk.
func memberPrefix(b []byte, jk []byte) []byte { return appendBytes(append(b, kMember), jk) }

func memberKey(b []byte, jk, pk []byte) []byte { return append(memberPrefix(b, jk), pk...) }

// version is a temporal right version's value: 0x00 (deleted, or under a
// NULL key: matches nothing), or 0x01 len(jk) jk row.
type version struct {
	deleted bool
	jk      []byte
	row     []byte // encoded (row.AppendRow)
}

func (v *version) append(b []byte) []byte {
	if v.deleted {
		return append(b, 0)
	}
	return append(appendBytes(append(b, 1), v.jk), v.row...)
}

func (v *version) parse(b []byte) error {
	switch {
	case len(b) == 1 && b[0] == 0:
		*v = version{deleted: true}
		return nil
	case len(b) > 1 && b[0] == 1:
		jk, rest, err := readBytes(b[1:])
		if err != nil {
			return err
		}
		*v = version{jk: jk, row: rest}
		return nil
	}
	return fmt.Errorf("%w: version", errCorrupt)
}

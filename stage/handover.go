package stage

import (
	"encoding/binary"
	"fmt"

	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/plan"
	"github.com/cdcjoin/cdcjoin/row"
)

// A handover gives the state of a plan's `replay` (one State: every
// stage's rows, the materializer's, the tables' indexes) to `run`, whose
// stages each keep theirs on their own keyed log: each row of stage n's
// state becomes a load record in stage n's log, which its Operator
// installs as it is, with the version the replay gave it, and without
// emitting anything (the sink has its rows already). A load record has
// the key of the row's input record, so that the row's next input
// supersedes it in the compacted log. Values (after the key's 'I' or 'M'):
//
//	'I' …   flags (1: matchable | 2: load | 4: pad epoch) uvarint(version) [uvarint(pad epoch)] row
//	'M' …   0xFF uvarint(version the row key's row was emitted with) row
//
// A stage row's load carries its side's pad epoch at its join key, if
// any (every row of the side there carries the same); a materializer
// incarnation's carries the version its row key's row was last emitted
// with (the row is the first live incarnation's: the one the loads
// install leave first).

const (
	flagMatchable = 1
	flagLoad      = 2
	flagPad       = 4
	matLoad       = 0xFF // not a row.Kind: a materializer record's value starts with one
)

// HandoverRecords streams the rows of every stage of p (1-based, and
// Stages(p) for the materializer) held in kv, the state of p's Pipeline,
// as load records (key, value) of stage n's log, on partition partition
// of parts. The slices are valid only during the call.
func HandoverRecords(p *plan.Plan, kv State, parts int32, send func(n int, partition int32, key, value []byte) error) error {
	var rec record
	var key, val []byte
	for n := 1; n <= len(p.Stages); n++ {
		j := NewJoin(&p.Stages[n-1])
		err := j.scanRows(kv, func(jk []byte, s Side, id, v []byte) error {
			if err := decodeRecord(v, &rec); err != nil {
				return err
			}
			var pad *uint64
			if jk[0] != Unmatchable {
				e, ok, err := kv.Value(j.padKey(nil, jk, s))
				if err != nil {
					return err
				}
				if ok {
					x, n := binary.Uvarint(e)
					if n <= 0 {
						return fmt.Errorf("%w: stage pad epoch", row.ErrCorrupt)
					}
					pad = &x
				}
			}
			key, val = AppendLoadRecord(key[:0], val[:0], s, jk, id, rec.matchable, rec.version, pad, rec.row)
			return send(n, InputPartition(jk, id, parts), key, val)
		})
		if err != nil {
			return fmt.Errorf("stage %d: %w", n, err)
		}
	}
	if !p.Materialize {
		return nil
	}
	n := len(p.Stages) + 1
	var vals []row.Value
	prefix := []byte{'m', 'i'}
	err := kv.ScanRows(prefix, func(k, v []byte) error {
		rest := k[len(prefix):]
		_, l, err := row.DecodeKey(nil, rest, len(p.RowKey))
		if err != nil {
			return err
		}
		rk, id := rest[:l], rest[l:]
		cv, ok, err := kv.Row([]byte{'m', 'c'}, rk)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: a live incarnation of an output row that was never emitted", row.ErrCorrupt)
		}
		ver, m := binary.Uvarint(cv)
		if m <= 0 {
			return fmt.Errorf("%w: materializer row", row.ErrCorrupt)
		}
		if vals, err = row.DecodeRow(vals[:0], v); err != nil {
			return err
		}
		key, val = AppendMatLoadRecord(key[:0], val[:0], rk, id, ver, vals)
		return send(n, keyedlog.Partition(rk, parts), key, val)
	})
	if err != nil {
		return fmt.Errorf("materializer: %w", err)
	}
	return nil
}

// AppendLoadRecord appends the key and value of the load record of side
// s's row at join key jk with identity id (its flags, version and row, and
// pad, the side's pad epoch there, when it has one).
func AppendLoadRecord(key, val []byte, s Side, jk, id []byte, matchable bool, version uint64, pad *uint64, r []row.Value) ([]byte, []byte) {
	key, _ = AppendInputRecord(key, nil, s, &Input{Delete: true, Key: jk, ID: id})
	f := byte(flagLoad)
	if matchable {
		f |= flagMatchable
	}
	if pad != nil {
		f |= flagPad
	}
	val = binary.AppendUvarint(append(val, f), version)
	if pad != nil {
		val = binary.AppendUvarint(val, *pad)
	}
	return key, row.AppendRow(val, r)
}

// AppendMatLoadRecord appends the key and value of the load record of an
// incarnation id of output row rk whose row was last emitted at version.
func AppendMatLoadRecord(key, val, rk, id []byte, version uint64, r []row.Value) ([]byte, []byte) {
	key, _ = AppendMatRecord(key, nil, rk, &Delta{Op: row.Retract, ID: id})
	val = binary.AppendUvarint(append(val, matLoad), version)
	return key, row.AppendRow(val, r)
}

// IndexEntries streams the tables' index entries held in kv, the state of
// p's Pipeline with RecordPartitions: for each, its FROM item t, the
// source partition it records, its key in run's keying index (group and
// primary key) and its row's encoding (what that index keeps). The slices
// are valid only during the call.
func IndexEntries(p *plan.Plan, kv State, fn func(t int, partition int32, key, rowBytes []byte) error) error {
	for t := range p.Tables {
		err := kv.ScanRows([]byte{'i', byte(t)}, func(k, v []byte) error {
			part, r, err := SplitIndexEntry(v)
			if err != nil {
				return err
			}
			return fn(t, part, k, r)
		})
		if err != nil {
			return fmt.Errorf("index of %s: %w", p.Tables[t].Alias, err)
		}
	}
	return nil
}

// Load installs side s's row at key jk with identity id as it is, with its
// version and, when pad is set, the side's pad epoch at jk, emitting
// nothing (a load record).
func (j *Join) Load(kv State, s Side, jk, id []byte, matchable bool, version uint64, pad *uint64, r []row.Value) error {
	j.enc = appendRecord(j.enc[:0], &record{matchable: matchable, version: version, row: r})
	if err := kv.PutRow(j.group(j.key, jk, s), id, j.enc); err != nil {
		return err
	}
	if pad != nil {
		return j.setPadEpoch(kv, jk, s, *pad)
	}
	return nil
}

// Load installs incarnation id of output row rk with row r, rk's row
// having been emitted at version, emitting nothing (a load record): the
// row key's emitted row is its first live incarnation's.
func (m *Materializer) Load(kv State, rk, id []byte, version uint64, r []row.Value) error {
	m.key = append(append(m.key[:0], 'm', 'i'), rk...)
	m.enc = row.AppendRow(m.enc[:0], r)
	if err := kv.PutRow(m.key, id, m.enc); err != nil {
		return err
	}
	m.have = false
	err := kv.Rows(m.key, func(_, v []byte) error {
		m.enc = append(binary.AppendUvarint(m.enc[:0], version), v...)
		m.have = true
		return ErrStop
	})
	if err != nil || !m.have {
		return err
	}
	return kv.PutRow([]byte{'m', 'c'}, rk, m.enc)
}

// decodeLoad parses the value of a stage row's load record (after its
// flags byte f).
func decodeLoad(f byte, v []byte, vals []row.Value) (version uint64, pad *uint64, out []row.Value, err error) {
	ver, n := binary.Uvarint(v)
	if n <= 0 {
		return 0, nil, vals, fmt.Errorf("%w: load record version", row.ErrCorrupt)
	}
	v = v[n:]
	if f&flagPad != 0 {
		x, n := binary.Uvarint(v)
		if n <= 0 {
			return 0, nil, vals, fmt.Errorf("%w: load record pad epoch", row.ErrCorrupt)
		}
		pad, v = &x, v[n:]
	}
	out, err = row.DecodeRow(vals[:0], v)
	return ver, pad, out, err
}

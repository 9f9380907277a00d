package stage

import (
	"encoding/binary"
	"fmt"

	"github.com/cdcjoin/cdcjoin/plan"
	"github.com/cdcjoin/cdcjoin/row"
)

// Materializer merges the last stage's output per output row key (the
// keys of every table), for plans whose rows can be emitted at more than
// one join key (plan.Plan.Materialize): there, two incarnations of one row
// (the same row at two keys of the last stage, or of an earlier one) may
// live at once for a while, when their changes come from different
// partitions. It keeps every live incarnation ('m' 'i' rowkey id → row)
// and the row it emitted (group 'm' 'c', id rowkey → version, row), and emits the
// first live incarnation (in identity order) whenever that changes — like
// Flink's SinkUpsertMaterializer. Each row key is then emitted by one
// materializer, with its versions. Not safe for concurrent use.
type Materializer struct {
	p        *plan.Plan
	rk, key  []byte
	enc      []byte
	cur, win []row.Value
	delta    Delta
	have     bool
}

// NewMaterializer returns the materializer of p.
func NewMaterializer(p *plan.Plan) *Materializer { return &Materializer{p: p} }

// RowKey appends the output row key of an output row of p's last stage.
func RowKey(dst []byte, p *plan.Plan, r []row.Value) []byte {
	for _, i := range p.RowKey {
		dst = row.AppendKey(dst, r[i:i+1])
	}
	return dst
}

// Apply applies one change of the last stage's output (an incarnation
// d.ID of the row) with version, emitting the changes of the merged row
// (ID: its row key).
func (m *Materializer) Apply(kv State, d *Delta, version uint64, emit Emit) error {
	return m.ApplyAt(kv, RowKey(m.rk[:0], m.p, d.Row), d, version, emit)
}

// ApplyAt is Apply of a change d of output row rk (RowKey of its row):
// for a retraction, d.Row is not read (`run`'s materializer gets rk from
// its record's key).
func (m *Materializer) ApplyAt(kv State, rk []byte, d *Delta, version uint64, emit Emit) error {
	m.rk = append(m.rk[:0], rk...)
	m.key = append(append(m.key[:0], 'm', 'i'), m.rk...)
	var err error
	if d.Op == row.Upsert {
		m.enc = row.AppendRow(m.enc[:0], d.Row)
		err = kv.PutRow(m.key, d.ID, m.enc)
	} else {
		err = kv.DeleteRow(m.key, d.ID)
	}
	if err != nil {
		return err
	}
	// The winner: the first live incarnation.
	m.have = false
	err = kv.Rows(m.key, func(_, v []byte) error {
		var err error
		m.win, err = row.DecodeRow(m.win[:0], v)
		m.have = true
		if err != nil {
			return err
		}
		return ErrStop
	})
	if err != nil {
		return err
	}
	ckey := []byte{'m', 'c'}
	cv, had, err := kv.Row(ckey, m.rk)
	if err != nil {
		return err
	}
	var curVer uint64
	if had {
		ver, n := binary.Uvarint(cv)
		if n <= 0 {
			return fmt.Errorf("%w: materializer row", row.ErrCorrupt)
		}
		curVer = ver
		if m.cur, err = row.DecodeRow(m.cur[:0], cv[n:]); err != nil {
			return err
		}
	}
	switch {
	case !m.have && !had:
		return nil
	case !m.have:
		if err := kv.DeleteRow(ckey, m.rk); err != nil {
			return err
		}
		m.delta = Delta{Op: row.Retract, ID: m.rk, Row: m.cur, Version: version, PrevVersion: curVer}
		return emit(&m.delta)
	case had && equalRows(m.cur, m.win):
		return nil
	}
	m.enc = row.AppendRow(binary.AppendUvarint(m.enc[:0], version), m.win)
	if err := kv.PutRow(ckey, m.rk, m.enc); err != nil {
		return err
	}
	m.delta = Delta{Op: row.Upsert, ID: m.rk, Row: m.win, Version: version}
	if had {
		m.delta.Prev, m.delta.PrevVersion = m.cur, curVer
	}
	return emit(&m.delta)
}

// Rows streams the materialized rows (in row-key order).
func (m *Materializer) Rows(kv State, fn func(r []row.Value) error) error {
	var vals []row.Value
	return kv.Rows([]byte{'m', 'c'}, func(_, v []byte) error {
		_, n := binary.Uvarint(v)
		if n <= 0 {
			return fmt.Errorf("%w: materializer row", row.ErrCorrupt)
		}
		var err error
		if vals, err = row.DecodeRow(vals[:0], v[n:]); err != nil {
			return err
		}
		return fn(vals)
	})
}

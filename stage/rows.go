package stage

import "github.com/cdcjoin/cdcjoin/row"

// Rows streams the stage's current output rows (as upserts, unfiltered by
// the residual), in the order of its keyspace: the joined rows from each
// left row, then the padded rows. It is the output a sink holds after
// applying everything the stage emitted.
func (j *Join) Rows(kv State, fn Emit) error {
	var rec record
	return j.scanRows(kv, func(key []byte, s Side, id, v []byte) error {
		if err := decodeRecord(v, &rec); err != nil {
			return err
		}
		rec.row = append([]row.Value(nil), rec.row...)
		if s == L {
			found := false
			if rec.matchable {
				err := j.eachMatchable(kv, key, R, func(oid []byte) error {
					found = true
					return j.emitJoined(fn, L, row.Upsert, id, rec.row, nil, oid, key, rec.version, 0)
				})
				if err != nil {
					return err
				}
			}
			if !found && j.padL {
				return j.emitPad(fn, L, row.Upsert, id, rec.row, nil, key, rec.version, 0)
			}
			return nil
		}
		if !j.padR {
			return nil
		}
		if rec.matchable {
			if any, err := j.anyMatchable(kv, key, L, nil); err != nil || any {
				return err
			}
		}
		return j.emitPad(fn, R, row.Upsert, id, rec.row, nil, key, rec.version, 0)
	})
}

// Final streams the output of the plan held in kv (every row, as an
// upsert; unsorted): the materializer's rows, or the last stage's rows
// through its residual filter.
func (pl *Pipeline) Final(kv State, fn func(*row.Change) error) error {
	if pl.mat != nil {
		var d Delta
		return pl.mat.Rows(kv, func(r []row.Value) error {
			d = Delta{Op: row.Upsert, Row: r}
			c, err := pl.out.Change(&d)
			if err != nil {
				return err
			}
			return fn(c)
		})
	}
	last := len(pl.p.Stages)
	st := &pl.p.Stages[last-1]
	var scratch Delta
	return pl.joins[last-1].Rows(kv, func(d *Delta) error {
		return Filter(st.Residual, d, &scratch, func(d *Delta) error {
			c, err := pl.out.Change(d)
			if err != nil {
				return err
			}
			return fn(c)
		})
	})
}

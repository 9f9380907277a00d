package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/stage"
)

// A job with a multi-table plan (config.Plan) runs on the same engine:
// the same decoding goroutine, batches, commits, positions, version clock,
// sinks (changelog markers included) and resume; what differs is the join:
// a stage.Pipeline applies each event through every stage of the plan in
// one order, each stage input taking the next position (so versions
// strictly increase across the stages). A new state's snapshot is applied
// by the same pipeline on a state in memory, written out sorted when the
// load ends (planbulk.go). Fair fan-out is the parent/child join's (skew):
// a plan's fan-outs are done at once.

// planKV is the Pipeline's state on a joinstate.Txn: its rows in the
// child keyspace (group = join key, id = child key), its values in the
// parent keyspace, so that the row cache answers point reads (absences
// included, while the state fits in it) as for the parent/child join.
type planKV struct {
	e *Engine        // the engine's Txn in progress, or
	t *joinstate.Txn // this one (reading a committed state)
}

func (k *planKV) txn() *joinstate.Txn {
	if k.e != nil {
		return k.e.txn
	}
	return k.t
}

func stopOK(err error) error {
	if err == stage.ErrStop {
		return nil
	}
	return err
}

func (k *planKV) Row(group, id []byte) ([]byte, bool, error) { return k.txn().Child(group, id) }
func (k *planKV) PutRow(group, id, value []byte) error       { return k.txn().PutChild(group, id, value) }
func (k *planKV) DeleteRow(group, id []byte) error           { return k.txn().DeleteChild(group, id) }
func (k *planKV) Rows(group []byte, fn func(id, value []byte) error) error {
	return stopOK(k.txn().Children(group, fn))
}
func (k *planKV) ScanRows(prefix []byte, fn func(key, value []byte) error) error {
	return stopOK(k.txn().ScanChildren(prefix, fn))
}
func (k *planKV) Value(key []byte) ([]byte, bool, error) { return k.txn().Parent(key) }
func (k *planKV) PutValue(key, value []byte) error       { return k.txn().PutParent(key, value) }
func (k *planKV) DeleteValue(key []byte) error           { return k.txn().DeleteParent(key) }

// decodePlan decodes r for every FROM item its topic feeds.
func decodePlan(d *job.PlanDecoder, r *Record, out *Decoded) {
	items := d.Items(r.Topic)
	out.items = append(out.items[:0], items...)
	if len(items) == 0 {
		out.Err = d.NotATopic(r.Topic, r.Partition, r.Offset)
		return
	}
	for len(out.evs) < len(items) {
		out.evs = append(out.evs, out.ev)
	}
	for i, it := range items {
		out.ok, out.Err = d.Decode(it, r.Topic, r.Partition, r.Offset, r.Key, r.Value, &out.evs[i])
		if out.Err != nil || !out.ok {
			return
		}
	}
}

// applyPlan applies a decoded record of a plan's topic.
func (e *Engine) applyPlan(ctx context.Context, d *Decoded) error {
	// A load ends before the record, committing (so emit is the next batch's).
	if err := e.planBulkBefore(ctx, d); err != nil {
		return err
	}
	emit := e.output(ctx).Emit
	r := &d.Record
	e.pipe.SetPartition(r.Partition)
	next := func() uint64 {
		v := e.clock.At(e.inputs)
		e.inputs++
		return v
	}
	kv := e.planState()
	for i, it := range d.items {
		e.ptypes.Observe(it, &d.evs[i])
		err := e.pipe.Apply(kv, it, &d.evs[i], next, emit)
		var ke *stage.KeyError
		var xe *stage.ExprError
		switch {
		case errors.As(err, &ke):
			return &driver.Bad{Kind: "key", Err: fmt.Errorf("cdcjoin: bad record at %s/%d@%d: %s", r.Topic, r.Partition, r.Offset, strings.TrimPrefix(err.Error(), "cdcjoin: "))}
		case errors.As(err, &xe):
			return &driver.Bad{Kind: "query", Err: fmt.Errorf("cdcjoin: bad record at %s/%d@%d: %s", r.Topic, r.Partition, r.Offset, strings.TrimPrefix(err.Error(), "cdcjoin: "))}
		case err != nil:
			return err
		}
	}
	e.planBulkAfter(d)
	return nil
}

// planFingerprint identifies a plan's state shape
// (driver.PlanFingerprint): the query, every table's key, and whether its
// index entries record their source partitions (e.planV1: not, a state
// of an earlier cdcjoin, which kafkarun.Handover refuses).
func (e *Engine) planFingerprint() []byte {
	return driver.PlanFingerprint(e.cfg, !e.planV1)
}

// finalPlan streams the plan's output sorted by row key.
func (e *Engine) finalPlan(t *joinstate.Txn, fn func(parentKey, childKey, vals []row.Value) error) error {
	type final struct {
		key        []byte
		pk, ck, vs []row.Value
	}
	var rows []final
	kv := &planKV{t: t}
	err := e.pipe.Final(kv, func(c *row.Change) error {
		k := row.AppendKey(nil, c.ParentKey)
		k = row.AppendKey(k, c.ChildKey)
		rows = append(rows, final{k, slices.Clone(c.ParentKey), slices.Clone(c.ChildKey), slices.Clone(c.Values)})
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortStableFunc(rows, func(a, b final) int { return bytes.Compare(a.key, b.key) })
	for _, r := range rows {
		if err := fn(r.pk, r.ck, r.vs); err != nil {
			return err
		}
	}
	return nil
}

// planStats sums the plan's stages' counters into the join's (the largest
// fan-out of any stage).
func (e *Engine) planStats() keyed.Stats {
	var s keyed.Stats
	for n := 1; n <= len(e.pipe.Plan().Stages); n++ {
		st := e.pipe.Stats(n)
		s.Inputs += st.Inputs
		s.Upserts += st.Upserts
		s.Retractions += st.Retractions
		s.NoOps += st.NoOps
		s.MaxFanOut = max(s.MaxFanOut, st.MaxFanOut)
	}
	return s
}

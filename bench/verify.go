package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// verifySink applies what the pipeline's sink acknowledged (at Flush) to a
// model of a ReplacingMergeTree, so that a run can be checked against the
// join of the tables the generators ended with (Options.Verify). It passes
// everything on to inner. Write and Flush may come from several goroutines
// (the Kafka pipeline's partitions).
type verifySink struct {
	inner sink.Sink

	mu      sync.Mutex
	pending []row.Change
	rmt     *cdcgen.ReplacingMergeTree
	err     error
}

func newVerifySink(inner sink.Sink) *verifySink {
	return &verifySink{inner: inner, rmt: cdcgen.NewReplacingMergeTree()}
}

func (v *verifySink) Write(ctx context.Context, cs []row.Change) error {
	if err := v.inner.Write(ctx, cs); err != nil {
		return err
	}
	v.record(cs)
	return nil
}

// record keeps copies of changes written, until a Flush.
func (v *verifySink) record(cs []row.Change) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, c := range cs {
		cp := c
		cp.ParentKey = append([]row.Value(nil), c.ParentKey...)
		if c.ChildKey != nil {
			cp.ChildKey = append([]row.Value(nil), c.ChildKey...)
		}
		cp.Values = append([]row.Value(nil), c.Values...)
		cp.Prev = nil
		v.pending = append(v.pending, cp)
	}
}

func (v *verifySink) Flush(ctx context.Context) error {
	if err := v.inner.Flush(ctx); err != nil {
		return err
	}
	v.apply()
	return nil
}

// apply applies the changes written so far to the model (they were
// flushed).
func (v *verifySink) apply() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for i := range v.pending {
		if _, err := v.rmt.ApplyChange(&v.pending[i]); err != nil && v.err == nil {
			v.err = err
		}
	}
	v.pending = v.pending[:0]
}

func (v *verifySink) Close() error { return v.inner.Close() }

// view returns a sink for one more pipeline instance (--instances): it
// writes to its own null sink (one goroutine at a time) and to v's model.
// Only for a verifySink over a null sink (ok false otherwise).
func (v *verifySink) view() (s sink.Sink, ok bool) {
	ns, ok := v.inner.(*NullSink)
	if !ok {
		return nil, false
	}
	return &verifyView{v: v, inner: NewNullSink(ns.names)}, true
}

// verifyView is one instance's side of a shared verifySink.
type verifyView struct {
	v     *verifySink
	inner sink.Sink
}

func (w *verifyView) Write(ctx context.Context, cs []row.Change) error {
	if err := w.inner.Write(ctx, cs); err != nil {
		return err
	}
	w.v.record(cs)
	return nil
}

func (w *verifyView) Flush(ctx context.Context) error {
	if err := w.inner.Flush(ctx); err != nil {
		return err
	}
	w.v.apply()
	return nil
}

func (w *verifyView) Close() error { return w.inner.Close() }

// Stats passes the inner sink's counters on.
func (v *verifySink) Stats() sink.Stats {
	if r, ok := v.inner.(sink.StatsReporter); ok {
		return r.Stats()
	}
	return sink.Stats{}
}

// check compares the model's live rows of the generators' key space (the
// hot parent, probes and fences live above it) with the join of tables.
func (v *verifySink) check(tables []cdcgen.Tables) error {
	users := map[int64]cdcgen.User{}
	domains := map[int64]cdcgen.Domain{}
	for _, t := range tables {
		for id, u := range t.Users {
			users[id] = u
		}
		for id, d := range t.Domains {
			domains[id] = d
		}
	}
	want := cdcgen.Join(users, domains, false)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.err != nil {
		return fmt.Errorf("cdcjoin: bench: verify: %w", v.err)
	}
	var got []cdcgen.JoinedRow
	for _, r := range v.rmt.Live() {
		if id, err := strconv.ParseInt(r.Key.Parent, 10, 64); err == nil && id < hotUserID {
			got = append(got, r)
		}
	}
	if d := cdcgen.Diff(want, got, 10); d != "" {
		return fmt.Errorf("cdcjoin: bench: the output differs from the join of the generated tables:\n%s", d)
	}
	return nil
}

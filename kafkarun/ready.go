package kafkarun

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcjoin/cdcjoin/row"
)

// Readiness: an instance is ready (Options.Ready, /readyz) when both stages
// run, each has received its group's assignment, and every partition it
// owns has state caught up to the committed positions:
//
//   - keying: every assigned source partition's index is restored to its
//     changelog's end (restore). Indexes are restored as soon as the
//     partition's committed offset is known to be stable (OnOffsetsFetched:
//     KIP-447 makes that fetch wait for the previous owner's transaction),
//     between polls, not only when the partition's first records arrive;
//     so a moved partition's rebuild happens, and is visible as not ready,
//     before input for it shows up.
//   - join: every assigned keyed partition has a worker whose sink is open
//     and whose durable position reached the group's committed offset (or
//     what a Positioned sink delivered), or which waited catchUpIdle for
//     input below it (the records just below it were compacted away, or
//     are transaction markers).
//
// A partition whose local state was current when assigned, or a fresh one
// with nothing committed, is caught up at once. When a rebuild (no usable
// local state) or a catch-up (local state behind) ends, one line is logged
// and metrics.CatchUpSeconds / CatchUpRecords are bumped for it.

// catchUpIdle ends a join partition's row-by-row catch-up that has received
// no input for this long (bulk rebuilds end at rebuildIdle).
const catchUpIdle = 2 * time.Second

// keyingPollWait bounds a keying poll, so that indexes of partitions
// assigned without input are restored without waiting for any.
const keyingPollWait = 250 * time.Millisecond

// keyingReady is the keying stage's assignment as readiness sees it (under
// keying.mu).
type keyingReady struct {
	joined   bool                  // the group assigned partitions (maybe none) at least once
	assigned map[sourcePart]uint64 // owned source partitions → generation of the assignment
	fetched  map[sourcePart]bool   // their committed offsets are fetched (stable)
	gen      uint64
}

// assignPartitions records newly assigned source partitions
// (OnPartitionsAssigned; franz-go calls it for every assignment, empty
// ones too).
func (k *keying) assignPartitions(_ context.Context, _ *kgo.Client, added map[string][]int32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.rd.assigned == nil {
		k.rd.assigned, k.rd.fetched = map[sourcePart]uint64{}, map[sourcePart]bool{}
	}
	k.rd.joined = true
	for _, side := range []row.Side{row.Parent, row.Child} {
		for _, p := range added[k.topicOf(side)] {
			k.rd.gen++
			k.rd.assigned[sourcePart{side, p}] = k.rd.gen
		}
	}
}

// offsetsFetched marks the partitions whose committed offsets the group
// fetched (stable: no transaction of a previous owner pending), so their
// indexes may be restored.
func (k *keying) offsetsFetched(_ context.Context, _ *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	mark := func(topic string, parts []int32) {
		side := k.dec.Side(topic)
		if side == 0 {
			return
		}
		for _, p := range parts {
			if _, ok := k.rd.assigned[sourcePart{side, p}]; ok {
				k.rd.fetched[sourcePart{side, p}] = true
			}
		}
	}
	for _, t := range resp.Topics {
		var ps []int32
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 {
				ps = append(ps, p.Partition)
			}
		}
		mark(t.Topic, ps)
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			var ps []int32
			for _, p := range t.Partitions {
				if p.ErrorCode == 0 {
					ps = append(ps, p.Partition)
				}
			}
			mark(t.Topic, ps)
		}
	}
	return nil
}

// forget drops revoked or lost partitions from the readiness view (under
// k.mu).
func (k *keying) forget(sp sourcePart) {
	delete(k.rd.assigned, sp)
	delete(k.rd.fetched, sp)
}

// restoreFetched restores the indexes of owned partitions whose offsets
// are fetched but which have no index yet. Called between a poll and
// AllowRebalance; an assignment that changed during a restore (revoked,
// maybe given back) discards the restored store, the next call restores
// again.
func (k *keying) restoreFetched(ctx context.Context) error {
	k.mu.Lock()
	var todo []sourcePart
	gens := map[sourcePart]uint64{}
	for sp, gen := range k.rd.assigned {
		if k.rd.fetched[sp] && k.idx[sp] == nil {
			todo = append(todo, sp)
			gens[sp] = gen
		}
	}
	k.mu.Unlock()
	slices.SortFunc(todo, func(a, b sourcePart) int {
		if a.side != b.side {
			return int(a.side) - int(b.side)
		}
		return int(a.part - b.part)
	})
	for _, sp := range todo {
		s, err := k.restore(ctx, sp)
		if err != nil {
			return err
		}
		k.mu.Lock()
		if gen, ok := k.rd.assigned[sp]; ok && gen == gens[sp] && k.idx[sp] == nil {
			k.idx[sp] = s
			s = nil
		}
		k.mu.Unlock()
		if s != nil {
			s.Close()
		}
	}
	return nil
}

// notReady reports why the keying stage is not ready (nil: ready).
func (k *keying) notReady() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.rd.joined {
		return errors.New("keying stage: waiting for the group's assignment")
	}
	for sp := range k.rd.assigned {
		if k.idx[sp] != nil {
			continue
		}
		if !k.rd.fetched[sp] {
			return fmt.Errorf("keying stage: %s partition %d: waiting for its committed offset", sp.side, sp.part)
		}
		return fmt.Errorf("keying stage: %s partition %d: restoring its index", sp.side, sp.part)
	}
	return nil
}

// restoreMode names an index restore for the catch-up metrics and logs: "" when
// there was nothing to catch up (a current local state, or a fresh start
// with nothing committed).
func restoreMode(mode string, records int) string {
	if records == 0 || mode == "reuse" || mode == "fresh" {
		return ""
	}
	return mode
}

// joinReady is the join stage's assignment as readiness sees it (under
// joinStage.mu).
type joinReady struct {
	joined   bool               // the group assigned partitions (maybe none) at least once
	awaiting map[int32]struct{} // assigned, worker not started yet
}

// assigned records newly assigned keyed partitions (OnPartitionsAssigned,
// called for every assignment, empty ones too; their workers start in
// assign, after the offsets are fetched).
func (j *joinStage) assigned(_ context.Context, _ *kgo.Client, added map[string][]int32) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.rd.awaiting == nil {
		j.rd.awaiting = map[int32]struct{}{}
	}
	j.rd.joined = true
	for _, p := range added[j.topic] {
		if j.workers[p] == nil {
			j.rd.awaiting[p] = struct{}{}
		}
	}
}

// notReady reports why the join stage is not ready (nil: ready).
func (j *joinStage) notReady() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.rd.joined {
		return errors.New("join stage: waiting for the group's assignment")
	}
	for p := range j.rd.awaiting {
		return fmt.Errorf("join partition %d: assigned, starting", p)
	}
	for p, w := range j.workers {
		if w.caught.Load() {
			continue
		}
		if t := w.cuTarget.Load(); t >= 0 {
			return fmt.Errorf("join partition %d: catching up (position %d of %d)", p, w.pos.Load(), t)
		}
		return fmt.Errorf("join partition %d: starting", p)
	}
	return nil
}

// joinCatchUp is a worker's catch-up in progress (worker goroutine only).
type joinCatchUp struct {
	mode    string // rebuild | catch-up
	target  int64
	began   time.Time
	records int
}

// beginCatchUp decides, once the worker's sink is open (its emit-from
// position final), whether the partition must catch up before it is ready.
func (w *worker) beginCatchUp() {
	target, pos := w.out.EmitFrom(), w.pos.Load()
	w.cuTarget.Store(target)
	if target <= 0 || pos >= target {
		w.caught.Store(true)
		return
	}
	w.cu = joinCatchUp{mode: "catch-up", target: target, began: time.Now()}
	if !w.hasState {
		w.cu.mode = "rebuild"
	}
}

// countCatchUp counts the input records below the catch-up target.
func (w *worker) countCatchUp(recs []*kgo.Record) {
	if w.caught.Load() {
		return
	}
	for _, r := range recs {
		if r.Offset < w.cu.target && !r.Attrs.IsControl() {
			w.cu.records++
		}
	}
}

// checkCatchUp ends the catch-up once the durable position reached its
// target, or when idle (no input for catchUpIdle).
func (w *worker) checkCatchUp(idle bool) {
	if w.caught.Load() || !idle && w.pos.Load() < w.cu.target {
		return
	}
	d := time.Since(w.cu.began)
	w.j.m.CatchUpSeconds.WithLabelValues("join", w.cu.mode).Observe(d.Seconds())
	w.j.m.CatchUpRecords.WithLabelValues("join", w.cu.mode).Add(float64(w.cu.records))
	w.j.log.Info("partition caught up", "partition", w.p, "mode", w.cu.mode, "records", w.cu.records,
		"seconds", d.Seconds(), "position", w.pos.Load(), "committed", w.cu.target, "ended_idle", idle)
	w.caught.Store(true)
}

package kafkarun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The keying stage's local indexes: one pebble store per owned source
// partition, restored from its changelog when the partition is assigned,
// and the assignment as readiness sees it (ready once every owned
// partition's index is restored).

// index returns source partition p's index store, restoring it first if
// this instance was just assigned p.
func (k *keying) index(ctx context.Context, p sourcePart) (*joinstate.Store, error) {
	k.mu.Lock()
	s := k.idx[p]
	k.mu.Unlock()
	if s != nil {
		return s, nil
	}
	s, err := k.restore(ctx, p)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	k.idx[p] = s
	k.mu.Unlock()
	return s, nil
}

// restore opens source partition sp's local index, bringing it up to date
// with its changelog: an index left by an earlier run of this instance
// (same projection, its changelog position still in the log) reads only
// the records after its position; otherwise it is rebuilt from the whole
// changelog partition. Either way it then matches the committed source
// offset of sp (KIP-447 stable offsets make a new owner wait for the
// previous owner's transaction).
func (k *keying) restore(ctx context.Context, sp sourcePart) (*joinstate.Store, error) {
	p := sp.part
	start := time.Now()
	dir := filepath.Join(k.cfg.State.Dir, "keying", k.sideName(sp.side)+"-"+strconv.Itoa(int(p)))
	topic := k.indexTopic(sp.side)
	so := job.StateOptions(k.cfg, dir)
	so.CacheBytes = 8 << 20
	shape := k.indexShape()
	s, from, err := k.reusable(so, topic, p, shape)
	if err != nil {
		return nil, err
	}
	mode := "reuse"
	if s == nil {
		mode = "rebuild"
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("cdcjoin: keying: reset %s index: %w", k.sideName(sp.side), err)
		}
		if s, err = joinstate.Open(so); err != nil {
			return nil, err
		}
	}
	t := s.Begin()
	n := 0
	next := from
	// The source topic's id the index was built from: the local copy,
	// then any the changelog holds (topics.go).
	var builtFrom string
	if b, err := s.Meta(metaTopicID); err == nil && b != nil {
		builtFrom = string(b)
	}
	mark := k.markOf(sp)
	err = readPartition(ctx, k.base, k.adm, topic, p, from, mark, func(r *kgo.Record) error {
		n++
		if string(r.Key) == topicIDKey {
			if r.Value != nil {
				builtFrom = string(r.Value)
			}
			return nil
		}
		next = r.Offset + 1
		if string(r.Key) == keyTypesKey {
			if r.Value != nil && k.keyTypes().KeyTypesLearned() == 0 {
				return k.keyTypes().RestoreKeyTypes(r.Value)
			}
			return nil
		}
		switch {
		case k.plan != nil:
			return restorePlanIndex(t, r.Key, r.Value)
		case sp.side == row.Parent && r.Value == nil:
			return t.DeleteParentIndex(r.Key)
		case sp.side == row.Parent:
			return t.SetParentIndex(r.Key, r.Value)
		case r.Value == nil:
			return t.DeleteChildIndex(r.Key)
		}
		return t.SetChildIndex(r.Key, r.Value)
	})
	if err == nil {
		err = driver.MetaChangelog.Put(t, next)
	}
	if err == nil {
		err = driver.MetaIndexShape.Put(t, shape)
	}
	now := k.top.sourceIDs[k.topicOf(sp.side)]
	if err == nil && builtFrom != "" && now != "" && builtFrom != now {
		err = &RecreatedError{Topic: k.topicOf(sp.side), Was: builtFrom, Now: now, cfg: k.cfg}
	}
	if err == nil && now != "" {
		err = t.SetMeta(metaTopicID, []byte(now))
	}
	if err == nil {
		err = t.Commit()
	} else {
		t.Abort()
	}
	if err != nil {
		s.Close()
		var re *RecreatedError
		if errors.As(err, &re) {
			return nil, re
		}
		return nil, fmt.Errorf("cdcjoin: keying: restore %s index of partition %d: %w", k.sideName(sp.side), p, err)
	}
	switch {
	case mode == "reuse" && n > 0:
		mode = "catch-up"
	case mode == "rebuild" && n == 0:
		mode = "fresh" // nothing committed yet: not a rebuild
	}
	elapsed := time.Since(start)
	k.m.IndexRestoreRecords.WithLabelValues(k.sideName(sp.side), mode).Add(float64(n))
	if cm := restoreMode(mode, n); cm != "" {
		k.m.CatchUpSeconds.WithLabelValues("keying", cm).Observe(elapsed.Seconds())
		k.m.CatchUpRecords.WithLabelValues("keying", cm).Add(float64(n))
	}
	k.log.Info("index ready", "side", k.sideName(sp.side), "partition", p, "mode", mode, "records", n, "changelog_mark", mark, "seconds", elapsed.Seconds())
	return s, nil
}

// reusable opens the local index in so.Dir when it was left by an earlier
// run for the same projection and its changelog position is still in the
// partition's log; it returns the store and the offset to read from, or a
// nil store (rebuild from the log start).
func (k *keying) reusable(so joinstate.Options, topic string, p int32, shape []byte) (*joinstate.Store, int64, error) {
	if _, err := os.Stat(so.Dir); err != nil {
		return nil, 0, nil
	}
	s, err := joinstate.Open(so)
	if err != nil {
		k.log.Warn("local index unusable; rebuilding it from the changelog", "dir", so.Dir, "err", err)
		return nil, 0, nil
	}
	from, ok1, err1 := driver.MetaChangelog.Get(s)
	sh, _, err2 := driver.MetaIndexShape.Get(s)
	if err1 != nil || err2 != nil || !ok1 || string(sh) != string(shape) {
		s.Close()
		return nil, 0, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	starts, err := k.adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	var end int64
	if err == nil {
		end, err = partitionEnd(ctx, k.adm, topic, p)
	}
	if err != nil {
		s.Close()
		return nil, 0, kafkaFault(fmt.Errorf("cdcjoin: keying: %s/%d offsets: %w", topic, p, err))
	}
	st, _ := starts.Lookup(topic, p)
	if from > end {
		// Past the last stable offset: this index's own last transaction,
		// committed, its markers not written yet (keyingmarks.go); or past
		// the log's end (another log).
		var hwm int64
		if hwm, err = partitionHighWatermark(ctx, k.adm, topic, p); err != nil {
			s.Close()
			return nil, 0, err
		}
		end = hwm
	}
	if from < st.Offset || from > end {
		// Compacted or deleted past the position, or another log: rebuild.
		s.Close()
		return nil, 0, nil
	}
	return s, from, nil
}

// dropPartitions closes the indexes of revoked or lost partitions; a later
// assignment restores them from the changelog.
func (k *keying) dropPartitions(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.tk != nil {
		k.tk.dropped(lost)
	}
	for _, side := range k.sides() {
		for _, p := range lost[k.topicOf(side)] {
			sp := sourcePart{side, p}
			k.forget(sp)
			if s := k.idx[sp]; s != nil {
				delete(k.idx, sp)
				if k.ending {
					// The transaction's End is running: its index
					// transaction on s commits or aborts with it.
					k.dropped = append(k.dropped, s)
					continue
				}
				if err := s.Close(); err != nil {
					k.log.Warn("closing index", "side", k.sideName(side), "partition", p, "err", err)
				}
			}
		}
	}
}

// endRebalanceWindow closes the indexes of partitions dropped while a
// transaction ended (after its index transactions committed or aborted).
func (k *keying) endRebalanceWindow() {
	k.mu.Lock()
	dropped := k.dropped
	k.ending, k.dropped = false, nil
	k.mu.Unlock()
	for _, s := range dropped {
		if err := s.Close(); err != nil {
			k.log.Warn("closing index", "err", err)
		}
	}
}

// keyingReady is the keying stage's assignment as readiness sees it (under
// keying.mu).
type keyingReady struct {
	joined   bool                  // the group assigned partitions (maybe none) at least once
	assigned map[sourcePart]uint64 // owned source partitions → generation of the assignment
	fetched  map[sourcePart]bool   // their committed offsets are fetched (stable)
	gen      uint64
	// marks: the changelog marks their committed offsets carried
	// (keyingmarks.go), read to at least by their restores.
	marks map[sourcePart]int64
}

// assignPartitions records newly assigned source partitions
// (OnPartitionsAssigned; franz-go calls it for every assignment, empty
// ones too).
func (k *keying) assignPartitions(_ context.Context, _ *kgo.Client, added map[string][]int32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.rd.assigned == nil {
		k.rd.assigned, k.rd.fetched, k.rd.marks = map[sourcePart]uint64{}, map[sourcePart]bool{}, map[sourcePart]int64{}
	}
	k.rd.joined = true
	if k.tk != nil {
		k.tk.assigned(added)
	}
	for _, side := range k.sides() {
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
	mark := func(topic string, p int32, metadata *string) {
		side := k.sideOf(topic)
		if side == 0 {
			return
		}
		sp := sourcePart{side, p}
		if _, ok := k.rd.assigned[sp]; ok {
			k.rd.fetched[sp] = true
			if n, ok := decodeMark(metadata); ok {
				k.rd.marks[sp] = n
			} else {
				delete(k.rd.marks, sp)
			}
		}
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 {
				mark(t.Topic, p.Partition, p.Metadata)
			}
		}
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode == 0 {
					mark(t.Topic, p.Partition, p.Metadata)
				}
			}
		}
	}
	return nil
}

// forget drops revoked or lost partitions from the readiness view (under
// k.mu).
func (k *keying) forget(sp sourcePart) {
	delete(k.rd.assigned, sp)
	delete(k.rd.fetched, sp)
	delete(k.rd.marks, sp)
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
		if k.rd.fetched[sp] && k.idx[sp] == nil && k.indexed(sp.side) {
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
		if k.idx[sp] != nil || !k.indexed(sp.side) && k.rd.fetched[sp] {
			continue
		}
		if !k.rd.fetched[sp] {
			return fmt.Errorf("keying stage: %s partition %d: waiting for its committed offset", k.sideName(sp.side), sp.part)
		}
		return fmt.Errorf("keying stage: %s partition %d: restoring its index", k.sideName(sp.side), sp.part)
	}
	return nil
}

// indexed reports whether the stage keeps an index of side's source
// partitions: every side of a regular join or a plan; of a time join only
// a temporal join's right side (temporal.go).
func (k *keying) indexed(side row.Side) bool { return k.tk == nil || k.tk.indexed(side) }

// restoreMode names an index restore for the catch-up metrics and logs: "" when
// there was nothing to catch up (a current local state, or a fresh start
// with nothing committed).
func restoreMode(mode string, records int) string {
	if records == 0 || mode == "reuse" || mode == "fresh" {
		return ""
	}
	return mode
}

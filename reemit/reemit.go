// Package reemit brings a job's ClickHouse table back to the join its
// state holds (`cdcjoin reemit`): after an operator truncated the table,
// or rows were lost, the join's state still holds every row with the
// version it was emitted with. It runs on a stopped instance, over the
// keyed partitions whose state is in its state.dir, and is idempotent in
// both sink modes: it compares what the table holds per row key with the
// state and writes only the difference, so a second run writes nothing.
//
//   - upsert: a state row the table lacks, or holds at a lower version (or
//     deleted), is inserted with its version; a row the table holds live
//     that the state does not have is marked deleted at the partition's
//     clock (above everything it emitted; the next `run` raises the epoch
//     past it).
//   - changelog: per row key and version the net sum(_sign) is brought to 1
//     for the state's row and version, 0 for every other: a missing +1 is
//     inserted, a surplus or an orphaned -1 (a retraction that landed after
//     the rows it cancelled were truncated) is cancelled by copies with the
//     sign flipped.
//
// A row key of the table is attributed to a keyed partition from its
// parent key (NULL, integer, boolean and string keys); rows of other key
// kinds are only corrected when this state.dir holds every partition. A
// partition whose state is behind the join group's committed offset (a
// kill -9 lost its newest commits) is refused: its output below the
// committed offset is not in the state; bring it up to date with `run`
// and stop that with SIGTERM first.
package reemit

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink/clickhouse"
)

// Report counts what a Run found and wrote.
type Report struct {
	Partitions []int32 // the keyed partitions whose state was used
	StateRows  int     // rows of the join in those states
	Inserted   int     // state rows written (upsert: missing or older; changelog: +1)
	Cancelled  int     // changelog: (row key, version) nets brought to 0 or 1 by flipped copies
	Deleted    int     // upsert: table rows the state does not have, marked deleted
	Skipped    int     // table rows of no partition here that could be told (key kinds without a partition)
}

// partition is one keyed partition's state.
type partition struct {
	p     int32
	store *joinstate.Store
	next  uint64 // a version above everything the partition emitted
}

// Run re-emits the join held in cfg's state into its ClickHouse table.
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger) (Report, error) {
	var rep Report
	if cfg.ClickHouse == nil {
		return rep, fmt.Errorf("cdcjoin: reemit: the configuration has no clickhouse section")
	}
	unlock, err := kafkarun.LockStateDir(cfg.State.Dir)
	if err != nil {
		return rep, err
	}
	defer unlock()
	spec, err := job.Spec(cfg)
	if err != nil {
		return rep, err
	}
	nparts, committed, err := kafkarun.JoinOffsets(ctx, cfg)
	if err != nil {
		return rep, err
	}
	var parts []*partition
	defer func() {
		for _, pt := range parts {
			pt.store.Close()
		}
	}()
	topic := cfg.Kafka.KeyedTopic()
	var behind []string
	for p := int32(0); p < nparts; p++ {
		dir := filepath.Join(cfg.State.Dir, "partition-"+strconv.Itoa(int(p)))
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		st, err := joinstate.Open(job.StateOptions(cfg, dir))
		if err != nil {
			return rep, err
		}
		pt := &partition{p: p, store: st}
		parts = append(parts, pt)
		pos, has, err := st.Position(topic, p)
		if err != nil {
			return rep, err
		}
		if !has {
			pos = 0
		}
		if c, ok := committed[p]; ok && c > pos {
			behind = append(behind, fmt.Sprintf("partition %d at %d, committed %d", p, pos, c))
		}
		clock, err := driver.ReadClock(st, uint64(cfg.Kafka.Epoch))
		if err != nil {
			return rep, fmt.Errorf("cdcjoin: reemit: partition %d: %w", p, err)
		}
		pt.next = clock.At(pos)
		rep.Partitions = append(rep.Partitions, p)
	}
	if len(behind) > 0 {
		return rep, fmt.Errorf("cdcjoin: reemit: the state is behind the job's committed positions (%v): its output there is not in the state; start `cdcjoin run` with this state.dir until /readyz answers 200, stop it with SIGTERM, and run reemit again", behind)
	}
	if len(parts) == 0 {
		return rep, fmt.Errorf("cdcjoin: reemit: no join state under %s (partition-N directories)", cfg.State.Dir)
	}
	all := len(parts) == int(nparts)
	s, err := clickhouse.Open(ctx, cfg, clickhouse.Options{})
	if err != nil {
		return rep, err
	}
	defer s.Close()
	held := map[string][]clickhouse.Held{}
	err = s.Holdings(ctx, func(h clickhouse.Held) error {
		k := h.PK + "\x00" + h.CK
		held[k] = append(held[k], h)
		return nil
	})
	if err != nil {
		return rep, err
	}
	changelog := cfg.ClickHouse.Mode == config.ModeChangelog
	var batch []row.Change
	flushBatch := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := s.Write(ctx, batch); err != nil {
			return err
		}
		batch = batch[:0]
		return nil
	}
	byPartition := map[int32]*partition{}
	for _, pt := range parts {
		byPartition[pt.p] = pt
		t := pt.store.Begin()
		err := materialize(t, spec, func(pk, ck []row.Value, version uint64, vals []row.Value) error {
			rep.StateRows++
			pkt, ckt := clickhouse.RowKeyText(pk, ck)
			k := pkt + "\x00" + ckt
			hs := held[k]
			delete(held, k)
			add := 0
			if changelog {
				net := int64(0)
				for _, h := range hs {
					if h.Version == version {
						net = h.Net
						continue
					}
					if err := s.Cancel(ctx, h); err != nil {
						return err
					}
					rep.Cancelled++
				}
				switch {
				case net > 1:
					if err := s.Cancel(ctx, clickhouse.Held{PK: pkt, CK: ckt, Version: version, Net: net - 1}); err != nil {
						return err
					}
					rep.Cancelled++
				case net < 1:
					add = int(1 - net)
				}
			} else if len(hs) == 0 || hs[0].Version < version || hs[0].Version == version && hs[0].Net == 0 {
				add = 1
			}
			for ; add > 0; add-- {
				c := row.Change{Op: row.Upsert, Version: version, ParentKey: cloneVals(pk), Values: cloneVals(vals)}
				if ck != nil {
					c.ChildKey = cloneVals(ck)
				}
				batch = append(batch, c)
				rep.Inserted++
			}
			if len(batch) >= 1000 {
				return flushBatch()
			}
			return nil
		})
		t.Abort()
		if err != nil {
			return rep, fmt.Errorf("cdcjoin: reemit: partition %d: %w", pt.p, err)
		}
	}
	if err := flushBatch(); err != nil {
		return rep, err
	}
	// What the table holds that no state row explains: of this state's
	// partitions, it goes.
	for _, hs := range held {
		pt := owner(hs[0].PK, nparts, byPartition)
		if pt == nil && all {
			pt = parts[0] // a key kind without a partition: every partition is here
		}
		if pt == nil {
			rep.Skipped++
			continue
		}
		for _, h := range hs {
			switch {
			case changelog:
				if err := s.Cancel(ctx, h); err != nil {
					return rep, err
				}
				rep.Cancelled++
			case h.Net != 0:
				if err := s.Delete(ctx, h, max(pt.next, h.Version+1)); err != nil {
					return rep, err
				}
				rep.Deleted++
			}
		}
	}
	if err := s.Flush(ctx); err != nil {
		return rep, err
	}
	if log != nil {
		log.Info("reemit done", "partitions", rep.Partitions, "state_rows", rep.StateRows, "inserted", rep.Inserted,
			"cancelled", rep.Cancelled, "deleted", rep.Deleted, "skipped", rep.Skipped)
	}
	return rep, nil
}

// owner returns the partition of parts a table row's parent key text
// belongs to (nil: another, or a key kind it cannot tell).
func owner(pk string, nparts int32, parts map[int32]*partition) *partition {
	vals, ok := clickhouse.ParseKeyText(pk)
	if !ok {
		return nil
	}
	return parts[keyedlog.Partition(row.AppendKey(nil, vals), nparts)]
}

// materialize streams the joined rows of t with the versions they were
// last emitted with: a child row's the larger of its parent's and its own,
// a LEFT join's padded row its parent's pad version.
func materialize(t keyed.State, spec *keyed.Spec, fn func(pk, ck []row.Value, version uint64, vals []row.Value) error) error {
	var p keyed.ParentRecord
	var c keyed.ChildRecord
	var vals, pk, ck []row.Value
	return t.Groups(func(jk, pv []byte, children keyed.ChildScan) error {
		if err := keyed.DecodeParent(pv, &p); err != nil {
			return err
		}
		var err error
		if pk, _, err = row.DecodeKey(pk[:0], jk, len(spec.ParentKey)); err != nil {
			return err
		}
		any := false
		err = children(func(ckb, cv []byte) error {
			any = true
			if err := keyed.DecodeChild(cv, &c); err != nil {
				return err
			}
			var err error
			if ck, _, err = row.DecodeKey(ck[:0], ckb, len(spec.ChildKey)); err != nil {
				return err
			}
			vals = spec.Output(vals, p.Row, c.Row)
			return fn(pk, ck, max(p.Version, c.Version), vals)
		})
		if err != nil || any || !spec.Left {
			return err
		}
		vals = spec.Output(vals, p.Row, nil)
		return fn(pk, nil, p.PadVersion, vals)
	})
}

func cloneVals(vs []row.Value) []row.Value { return append([]row.Value(nil), vs...) }

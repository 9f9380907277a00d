package kafkarun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/internal/cerr"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/version"
)

// HandoverStats says what a Handover loaded.
type HandoverStats struct {
	Parents, Children       int64 // join state records loaded into the keyed topic
	ChildIndex, ParentIndex int64 // index entries loaded into the changelogs
	// A plan's: load records per stage (StageRows[n-1]: stage n's keyed
	// topic, the materializer's last) and the tables' index entries.
	StageRows        []int64
	TableIndex       int64
	SourcePartitions int // source partitions whose positions were taken over
	Epoch            uint64
	KeyedPartitions  int32
	Elapsed          time.Duration
}

// Handover prepares a job that has never run to continue exactly where a
// `replay` of the same job stopped, so that `run` takes over a table the
// replay backfilled.
//
// Keying the source topics again from their beginning would re-emit every
// row, but never retract rows that only the replay emitted: the two consume
// the topics in different interleavings, so a row the replay saw can be
// one run never forms. Instead Handover loads the replay's state:
//
//   - every parent and child of the join state goes to the keyed topic as a
//     load record (keyed.ParentLoad/ChildLoad) carrying the versions the
//     replay emitted it with;
//   - the replay's child index goes to the child index changelog, on the
//     source partition each entry records, and each parent's row to the
//     parent index changelog, on the partition its record keeps;
//   - an epoch marker above the replay's epoch goes to every keyed
//     partition;
//   - the join group is committed past all of it (the join stage loads the
//     records into its state without emitting), and last the keying group
//     at the replay's input positions: that commit completes the handover.
//
// `run` then keys only what the replay had not read, and every later
// change cancels and supersedes exactly what the replay emitted, in upsert
// and changelog mode alike.
//
// A multi-stage plan (config.Plan; plan.go's layout) is handed over the
// same way, stage by stage (handoverPlan): every row of each stage's state
// (and the materializer's) goes to that stage's keyed topic as a load
// record (stage.HandoverRecords) with the version the replay gave it, which
// the stage's operator installs without emitting; each table's index entry
// goes to its topic's index changelog "<group>.t<i>.index" on the source
// partition it records (a replay state of an earlier cdcjoin, whose plan
// indexes do not record it, is refused); epoch markers go to every
// partition of every stage; then every stage's group is committed past it
// all, and last the keying group.
//
// It refuses a job whose keying group has committed offsets (it has run or
// a handover finished). An interrupted Handover can be run again: the
// records it writes again are idempotent. The replay state is read, not
// changed. It blocks until done or ctx ends; progress goes to log.
func Handover(ctx context.Context, cfg *config.Config, replayState string, log *slog.Logger) (HandoverStats, error) {
	var st HandoverStats
	start := time.Now()
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := cfg.ValidateForKafka(); err != nil {
		return st, err
	}
	rs, err := driver.OpenReplayState(cfg, replayState)
	if err != nil {
		return st, cerr.Wrap(err, "handover: open the replay state")
	}
	defer rs.Close()
	spec := rs.Spec

	base, err := clientOpts(&cfg.Kafka, log)
	if err != nil {
		return st, err
	}
	admCl, err := kgo.NewClient(append(append([]kgo.Opt(nil), base...), kgo.MetadataMinAge(100*time.Millisecond))...)
	if err != nil {
		return st, fmt.Errorf("cdcjoin: kafka client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	kc := &cfg.Kafka
	var pr *planRun
	if cfg.Plan() != nil {
		pr = newPlanRun(cfg)
	}
	if done, err := hasCommitted(ctx, adm, kc.KeyingGroup()); err != nil {
		return st, err
	} else if done {
		groups := []string{kc.KeyingGroup(), kc.JoinGroup()}
		topics := []string{kc.KeyedTopic(), kc.ChildIndexTopic(), kc.ParentIndexTopic()}
		if pr != nil {
			n := NamesOf(cfg)
			groups, topics = n.Groups, append(n.Keyed, n.Index...)
		}
		return st, fmt.Errorf("cdcjoin: handover: job %q has already run (group %s has committed offsets): a handover only starts a job that never ran; "+
			"to start over, stop every instance and delete the groups %s and the topics %s",
			cfg.Name, kc.KeyingGroup(), strings.Join(groups, ", "), strings.Join(topics, ", "))
	}
	top, err := setup(ctx, cfg, pr, adm, admCl, log)
	if err != nil {
		return st, err
	}
	st.KeyedPartitions = top.keyedParts
	// The keying group's offsets: the replay's positions.
	parts := map[string]int32{cfg.Parent.Topic: top.parentParts, cfg.Child.Topic: top.childParts}
	if pr != nil {
		if parts, err = sourcePartitions(ctx, adm, pr.topics); err != nil {
			return st, err
		}
	}
	positions, n, err := replayPositions(rs, parts)
	if err != nil {
		return st, err
	}
	st.SourcePartitions = n

	w, err := newLoadWriter(ctx, cfg, base)
	if err != nil {
		return st, err
	}
	defer w.close()
	if pr != nil {
		return handoverPlan(ctx, cfg, pr, rs, w, handoverPlace{base, adm, top, parts, positions}, st, log, start)
	}
	produce := w.produce
	progress := newProgress(log, "handover")
	t := rs.Store.Begin()
	defer t.Abort()
	if err := loadState(t, spec, kc.KeyedTopic(), top.keyedParts, produce, &st, progress); err != nil {
		return st, err
	}
	if err := loadIndexes(t, kc, top, produce, &st, progress); err != nil {
		return st, err
	}
	// What the replay's decoders learned about key column types goes with
	// every index partition, as the keying stage keeps it.
	if kt := rs.KeyTypes; kt != nil {
		for p := int32(0); p < top.childParts; p++ {
			produce(&kgo.Record{Topic: kc.ChildIndexTopic(), Partition: p, Key: []byte(keyTypesKey), Value: kt})
		}
		for p := int32(0); p < top.parentParts; p++ {
			produce(&kgo.Record{Topic: kc.ParentIndexTopic(), Partition: p, Key: []byte(keyTypesKey), Value: kt})
		}
	}
	if err := w.flush(ctx); err != nil {
		return st, err
	}
	if st.Epoch, err = finishHandover(ctx, cfg, nil, rs, base, adm, top, positions); err != nil {
		return st, err
	}
	st.Elapsed = time.Since(start)
	log.Info("handover done", "parents", st.Parents, "children", st.Children, "child_index", st.ChildIndex,
		"parent_index", st.ParentIndex, "source_partitions", st.SourcePartitions, "epoch", st.Epoch, "elapsed", st.Elapsed)
	return st, nil
}

// replayPositions returns the replay's input positions as the keying
// group's offsets, and how many source partitions they name; parts are
// the source topics' partition counts (a topic the job does not read, or a
// partition it does not have, is refused).
func replayPositions(rs *driver.ReplayState, parts map[string]int32) (kadm.Offsets, int, error) {
	positions := kadm.Offsets{}
	n := 0
	err := rs.Store.Positions(func(topic string, part int32, next int64) error {
		np, ok := parts[topic]
		if !ok {
			return fmt.Errorf("cdcjoin: handover: the replay read topic %q, which is none of the job's source topics", topic)
		}
		if part >= np {
			return fmt.Errorf("cdcjoin: handover: the replay read %s partition %d, but the topic has %d partitions", topic, part, np)
		}
		positions.AddOffset(topic, part, next, -1)
		n++
		return nil
	})
	return positions, n, err
}

// finishHandover writes epoch markers above the replay's epoch to every
// keyed partition (of every stage of a plan), commits each join stage's
// group at its keyed topic's end, and last the keying group at the
// replay's positions: that commit completes the handover. It returns the
// epoch.
func finishHandover(ctx context.Context, cfg *config.Config, pr *planRun, rs *driver.ReplayState, base []kgo.Opt, adm *kadm.Client, top topology, positions kadm.Offsets) (uint64, error) {
	// Every version run gives from now on exceeds the replay's.
	replayEpoch := version.Epoch(rs.Clock.At(rs.Inputs))
	epoch := max(version.Propose(time.Now()), replayEpoch+1)
	if err := writeEpochMarkers(ctx, cfg, pr, base, top, epoch); err != nil {
		return epoch, err
	}
	for _, d := range joinDefs(cfg, pr, top) {
		ends, err := adm.ListEndOffsets(ctx, d.topic)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return epoch, fmt.Errorf("cdcjoin: handover: end offsets of %s: %w", d.topic, err)
		}
		if err := commitOffsets(ctx, adm, d.group, ends.Offsets()); err != nil {
			return epoch, err
		}
	}
	return epoch, commitOffsets(ctx, adm, cfg.Kafka.KeyingGroup(), positions)
}

// loadWriter produces a handover's records (partitions chosen by the
// caller), keeping the first error for flush.
type loadWriter struct {
	cl   *kgo.Client
	ctx  context.Context
	mu   sync.Mutex
	perr error
}

func newLoadWriter(ctx context.Context, cfg *config.Config, base []kgo.Opt) (*loadWriter, error) {
	cl, err := kgo.NewClient(producerOpts(&cfg.Kafka, base,
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))...)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: kafka client: %w", err)
	}
	return &loadWriter{cl: cl, ctx: ctx}, nil
}

// produce sends r (buffered; the client owns r).
func (w *loadWriter) produce(r *kgo.Record) {
	w.cl.Produce(w.ctx, r, func(_ *kgo.Record, err error) {
		if err != nil {
			w.mu.Lock()
			if w.perr == nil {
				w.perr = err
			}
			w.mu.Unlock()
		}
	})
}

// flush waits for every record produced and returns the first error.
func (w *loadWriter) flush(ctx context.Context) error {
	if err := w.cl.Flush(ctx); err != nil {
		return fmt.Errorf("cdcjoin: handover: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.perr != nil {
		return fmt.Errorf("cdcjoin: handover: produce: %w", w.perr)
	}
	return nil
}

func (w *loadWriter) close() { w.cl.Close() }

// loadState sends every parent and child of the join state to its keyed
// partition as a load record.
func loadState(t *joinstate.Txn, spec *keyed.Spec, topic string, parts int32, produce func(*kgo.Record), st *HandoverStats, progress func(int64)) error {
	var p keyed.ParentRecord
	var c keyed.ChildRecord
	var in keyed.Input
	send := func() {
		produce(&kgo.Record{Topic: topic, Partition: keyedlog.Partition(in.JoinKey, parts),
			Key: keyedlog.AppendInputKey(nil, &in), Value: keyedlog.AppendInputValue(nil, &in)})
	}
	err := t.Parents(func(jk, v []byte) error {
		if err := keyed.DecodeParent(v, &p); err != nil {
			return err
		}
		in = keyed.Input{Kind: keyed.ParentLoad, Side: row.Parent, JoinKey: jk, Row: p.Row, Version: p.Version, PadVersion: p.PadVersion}
		send()
		st.Parents++
		progress(st.Parents + st.Children)
		return nil
	})
	if err != nil {
		return fmt.Errorf("cdcjoin: handover: parents: %w", err)
	}
	err = t.AllChildren(func(key, v []byte) error {
		_, n, err := row.DecodeKey(nil, key, len(spec.ParentKey))
		if err != nil {
			return err
		}
		if err := keyed.DecodeChild(v, &c); err != nil {
			return err
		}
		in = keyed.Input{Kind: keyed.ChildLoad, Side: row.Child, JoinKey: key[:n], ChildKey: key[n:], Row: c.Row, Version: c.Version}
		send()
		st.Children++
		progress(st.Parents + st.Children)
		return nil
	})
	if err != nil {
		return fmt.Errorf("cdcjoin: handover: children: %w", err)
	}
	return nil
}

// loadIndexes sends the replay's index entries to the index changelogs, each
// on the source partition it records.
func loadIndexes(t *joinstate.Txn, kc *config.Kafka, top topology, produce func(*kgo.Record), st *HandoverStats, progress func(int64)) error {
	send := func(topic string, parts int32, key, entry []byte, partition int32) error {
		if partition < 0 {
			return errors.New("cdcjoin: handover: the replay state was made by a cdcjoin that did not record source partitions in its indexes: replay the input again with this version")
		}
		if partition >= parts {
			return fmt.Errorf("cdcjoin: handover: an index entry names source partition %d, but %s has %d partitions", partition, topic, parts)
		}
		produce(&kgo.Record{Topic: topic, Partition: partition, Key: append([]byte(nil), key...), Value: append([]byte(nil), entry...)})
		return nil
	}
	err := t.ChildIndexes(func(ck, e []byte) error {
		p, _, _, err := keyed.DecodeIndexEntry(e, nil)
		if err != nil {
			return err
		}
		st.ChildIndex++
		progress(st.Parents + st.Children + st.ChildIndex)
		return send(kc.ChildIndexTopic(), top.childParts, ck, e, p)
	})
	if err != nil {
		return err
	}
	// The engine keeps no parent index: its parent records are the last
	// complete rows, with their source partitions.
	var p keyed.ParentRecord
	var entry []byte
	return t.Parents(func(pk, v []byte) error {
		if err := keyed.DecodeParent(v, &p); err != nil {
			return err
		}
		entry = keyed.AppendParentIndexEntry(entry[:0], p.Partition, p.Row)
		st.ParentIndex++
		progress(st.Parents + st.Children + st.ChildIndex + st.ParentIndex)
		return send(kc.ParentIndexTopic(), top.parentParts, pk, entry, p.Partition)
	})
}

// hasCommitted reports whether group has any committed offset.
func hasCommitted(ctx context.Context, adm *kadm.Client, group string) (bool, error) {
	offs, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return false, nil // a group that never existed
	}
	if err != nil {
		return false, fmt.Errorf("cdcjoin: fetch offsets of group %s: %w", group, err)
	}
	if err := offs.Error(); err != nil {
		return false, fmt.Errorf("cdcjoin: fetch offsets of group %s: %w", group, err)
	}
	n := 0
	offs.Each(func(o kadm.OffsetResponse) {
		if o.At >= 0 {
			n++
		}
	})
	return n > 0, nil
}

// commitOffsets commits offs for group (which must have no live members).
func commitOffsets(ctx context.Context, adm *kadm.Client, group string, offs kadm.Offsets) error {
	resp, err := adm.CommitOffsets(ctx, group, offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("cdcjoin: commit offsets of group %s: %w", group, err)
	}
	return nil
}

// newProgress returns a function to call with a running count; it logs
// every 10 seconds.
func newProgress(log *slog.Logger, what string) func(int64) {
	start := time.Now()
	last := start
	return func(n int64) {
		if n&0xfff != 0 || time.Since(last) < 10*time.Second {
			return
		}
		last = time.Now()
		log.Info(what+" in progress", "records", n, "records_per_s", int64(float64(n)/time.Since(start).Seconds()))
	}
}

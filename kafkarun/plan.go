package kafkarun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/plan"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
	"github.com/cdcjoin/cdcjoin/stage"
)

// A multi-stage plan (config.Plan) on Kafka. The keying stage consumes
// every table's topic (group "<group>-keying", as for the regular join);
// each source partition has an index (primary key → last complete row:
// stage.Keyer's) mirrored to its partition of "<group>.t<i>.index" (i: the
// topic's place among the plan's distinct topics, from 1), and writes each
// table's inputs (stage.Source) to the keyed log of the stage the table
// feeds. Plan stage n is a join stage of its own: topic
// "<group>.s<n>.keyed" (compacted, kafka.keyed_partitions partitions),
// consumer group "<group>-s<n>", state under state.dir/s<n>-partition-<p>,
// forwarding transactions "<group>-s<n>-<p>"; its operator is
// stage.Operator (through Options.Operator's path: the worker runs
// whatever operator it is given), which sends its output to stage n+1's
// keyed log in the batch's forwarding transaction (keyedlog.Out.Next),
// committed after the sink flush and before the state commit. Only the
// last stage (the materializer, when the plan needs one) writes the sink.
// Versions are each stage's own (its partitions' clocks, raised by epoch
// markers written to every stage's log at start); a plan emits each output
// row key from one partition of its last stage (plan: tags and the
// materializer), so the sink's versions per row key come from one clock.
//
// A crash between a stage's forwarding commit and its state commit sends
// the same records again: the next stage sees a sequence of a row's
// changes twice and converges to its last value (an unchanged row is a
// no-op), re-emitting intermediate values with higher versions.
//
// Handover (handover.go, planhandover.go) loads a plan's replay state
// into these topics: every stage's rows as load records of its keyed
// topic, the tables' index entries on the partitions they record.
//
// A stage's partition without local state (moved, or the disk lost) is
// rebuilt in bulk from its log up to the group's committed offset, as the
// regular join's is (rebuild.go: the same operator on an in-memory state,
// ingested with the position), the rest row by row. A bulk rebuild does
// every fan-out at once (stage.Operator.StepOn): the committed offset is a
// position without fan-outs in progress, where the rows are the same.
//
// Hot keys: every join stage does fan-outs in chunks (stage.Operator with
// skew.chunk_rows, planOperator): an input whose fan-out over the other
// side's rows at its join key does not fit a chunk is continued between
// other keys' records, its key's later inputs waiting behind it, all kept
// in the stage's state. The worker paces the steps as the regular join's:
// by input (with step markers) at the last stage in changelog mode (a
// re-created batch writes the same changes), by time otherwise (stages
// before the last write no sink: their output, rows' states in the next
// stage's log, converges whatever the chunks). Counted per stage:
// cdcjoin_stage_chunked_total, cdcjoin_stage_waited_total.
//
// Not yet for plans: hot-key salting (a hot key's rows stay on its one
// partition of each stage; its fan-outs are chunked, not spread).

// planRun is what Run keeps of a plan (nil in deps for the regular join).
type planRun struct {
	p      *plan.Plan
	topics []string // the plan's distinct topics; side i+1 is topics[i]
	sideOf map[string]row.Side
	stages int // stage.Stages(p)
}

func newPlanRun(cfg *config.Config) *planRun {
	p := cfg.Plan()
	pr := &planRun{p: p, sideOf: map[string]row.Side{}, stages: stage.Stages(p)}
	for _, t := range p.Tables {
		topic := cfg.Tables[t.Name].Topic
		if _, ok := pr.sideOf[topic]; !ok {
			pr.topics = append(pr.topics, topic)
			pr.sideOf[topic] = row.Side(len(pr.topics))
		}
	}
	return pr
}

// stageTopic is plan stage n's keyed topic.
func stageTopic(kc *config.Kafka, n int) string { return kc.Group + ".s" + strconv.Itoa(n) + ".keyed" }

// indexTopic is the index changelog of a plan's source topic i (1-based).
func indexTopic(kc *config.Kafka, i int) string { return kc.Group + ".t" + strconv.Itoa(i) + ".index" }

// stageGroup is plan stage n's consumer group.
func stageGroup(kc *config.Kafka, n int) string { return kc.Group + "-s" + strconv.Itoa(n) }

// sourceTopics are the topics the keying stage consumes.
func sourceTopics(cfg *config.Config, pr *planRun) []string {
	if pr != nil {
		return pr.topics
	}
	return []string{cfg.Parent.Topic, cfg.Child.Topic}
}

// stageDef is what distinguishes one join stage of Run from another.
type stageDef struct {
	n     int    // plan stage (1-based); 0: the regular join
	topic string // its keyed topic
	group string
	txid  string // forwarding transactions' id prefix (+ partition)
	dir   string // state directory prefix (+ partition)
	id    string // the keyed topic's id
	next  string // the next stage's keyed topic ("": none)
	final bool   // writes the sink
}

// joinDefs returns the join stages of Run.
func joinDefs(cfg *config.Config, pr *planRun, top topology) []stageDef {
	kc := &cfg.Kafka
	if pr == nil {
		return []stageDef{{topic: kc.KeyedTopic(), group: kc.JoinGroup(), txid: kc.Group + "-join-", dir: "partition-", id: top.keyedID, final: true}}
	}
	var ds []stageDef
	for n := 1; n <= pr.stages; n++ {
		d := stageDef{n: n, topic: stageTopic(kc, n), group: stageGroup(kc, n), txid: stageGroup(kc, n) + "-",
			dir: "s" + strconv.Itoa(n) + "-partition-", id: top.stageIDs[n-1], final: n == pr.stages}
		if n < pr.stages {
			d.next = stageTopic(kc, n+1)
		}
		ds = append(ds, d)
	}
	return ds
}

// keyedTopics are the keyed topics of Run's join stages.
func keyedTopics(cfg *config.Config, pr *planRun) []string {
	if pr == nil {
		return []string{cfg.Kafka.KeyedTopic()}
	}
	var ts []string
	for n := 1; n <= pr.stages; n++ {
		ts = append(ts, stageTopic(&cfg.Kafka, n))
	}
	return ts
}

// setupPlan is setup for a plan: the source topics, every stage's keyed
// topic and every source topic's index topic.
func setupPlan(ctx context.Context, cfg *config.Config, pr *planRun, adm *kadm.Client, log *slog.Logger) (topology, error) {
	var top topology
	k := &cfg.Kafka
	src, err := adm.ListTopics(ctx, pr.topics...)
	if err != nil {
		return top, fmt.Errorf("cdcjoin: list source topics: %w", err)
	}
	top.sourceIDs = map[string]string{}
	var most int32
	parts := map[string]int32{}
	for _, t := range pr.topics {
		d, ok := src[t]
		if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			return top, fmt.Errorf("cdcjoin: source topic %q does not exist (is the Debezium connector running, and is the topic name right?)", t)
		}
		if d.Err != nil {
			return top, fmt.Errorf("cdcjoin: source topic %q: %w", t, d.Err)
		}
		parts[t] = int32(len(d.Partitions))
		most = max(most, parts[t])
		top.sourceIDs[t] = d.ID.String()
	}
	keyedParts := int32(k.KeyedPartitions)
	if keyedParts == 0 {
		keyedParts = most
	}
	lag := strconv.FormatInt(k.MinCompactionLag.Milliseconds(), 10)
	compact := "compact"
	var written []string
	for n := 1; n <= pr.stages; n++ {
		topic := stageTopic(k, n)
		got, err := ensureTopic(ctx, adm, topic, keyedParts, int16(k.ReplicationFactor),
			map[string]*string{"cleanup.policy": &compact, "min.compaction.lag.ms": &lag}, log)
		if err != nil {
			return top, err
		}
		if n == 1 {
			top.keyedParts = got
		} else if got != top.keyedParts {
			return top, fmt.Errorf("cdcjoin: topic %s has %d partitions but %s has %d: every stage's keyed topic needs the same count", topic, got, stageTopic(k, 1), top.keyedParts)
		}
		ds, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return top, fmt.Errorf("cdcjoin: describe topic %s: %w", topic, err)
		}
		top.stageIDs = append(top.stageIDs, ds[topic].ID.String())
		written = append(written, topic)
	}
	for i, t := range pr.topics {
		idx := indexTopic(k, i+1)
		n, err := ensureTopic(ctx, adm, idx, parts[t], int16(k.ReplicationFactor), map[string]*string{"cleanup.policy": &compact}, log)
		if err != nil {
			return top, err
		}
		if n < parts[t] {
			return top, fmt.Errorf("cdcjoin: topic %s has %d partitions but %s has %d: the index needs one per source partition (add partitions to it)", idx, n, t, parts[t])
		}
		written = append(written, idx)
	}
	return top, writtenLimits(ctx, cfg, adm, log, &top, written)
}

// planOperator makes plan stage n's operator for a keyed partition: fan-outs
// in chunks of skew.chunk_rows (stage.Operator.SetChunk; ByInput for a
// Positioned sink, which only the last stage has), counted per stage after
// each commit.
func (w *worker) planOperator(of OperatorFor) (Operator, error) {
	j := w.j
	op, err := stage.NewOperator(j.plan.p, j.def.n, of.Partitions)
	if err != nil {
		return Operator{}, err
	}
	chunk := j.cfg.Skew.ChunkRows
	op.SetChunk(chunk)
	n := strconv.Itoa(j.def.n)
	var last stage.Stats
	var sent int
	var chunked, waited uint64
	committed := func() {
		st := op.Stats()
		j.m.StageInputs.WithLabelValues(n).Add(float64(st.Inputs - last.Inputs))
		j.m.StageForwarded.WithLabelValues(n).Add(float64(op.Sent.Records - sent))
		last, sent = st, op.Sent.Records
		if c := op.Chunked(); c > chunked {
			pacing := "time"
			if w.byInput {
				pacing = "input"
			}
			j.m.StageChunked.WithLabelValues(n, pacing).Add(float64(c - chunked))
			chunked = c
		}
		j.m.StageWaited.WithLabelValues(n).Add(float64(op.Waited() - waited))
		waited = op.Waited()
	}
	quiet := keyedlog.Out{Emit: driver.Discard, Quiet: true} // a bulk rebuild sends and emits nothing
	step := func(st stage.State, m *keyedlog.Msg) error { return op.StepOn(st, m, quiet) }
	return Operator{Operator: op, ByInput: max(chunk, 0), Unchunk: func() { op.SetChunk(-1) }, StateStep: step, Committed: committed}, nil
}

// discardSink is the sink of a plan stage before the last: it never gets a
// change (the stage's output goes to the next stage's log).
type discardSink struct{}

func (discardSink) Write(context.Context, []row.Change) error { return nil }
func (discardSink) Flush(context.Context) error               { return nil }
func (discardSink) Close() error                              { return nil }

var _ sink.Sink = discardSink{}

// planIndex is a source partition's index for a plan's Keyer (stage.State
// on its joinstate.Txn), every row write mirrored to its changelog: key
// group+id (the Keyer's groups are 2 bytes: 'i' item), value the row or
// nil.
type planIndex struct {
	stage.State
	log func(key, value []byte) error
	buf []byte
}

func newPlanIndex(t *joinstate.Txn, log func(key, value []byte) error) (*planIndex, error) {
	st, err := stage.KeyedState(t)
	if err != nil {
		return nil, err
	}
	return &planIndex{State: st, log: log}, nil
}

func (x *planIndex) PutRow(group, id, value []byte) error {
	if err := x.State.PutRow(group, id, value); err != nil {
		return err
	}
	x.buf = append(append(x.buf[:0], group...), id...)
	return x.log(x.buf, value)
}

func (x *planIndex) DeleteRow(group, id []byte) error {
	if err := x.State.DeleteRow(group, id); err != nil {
		return err
	}
	x.buf = append(append(x.buf[:0], group...), id...)
	return x.log(x.buf, nil)
}

// restorePlanIndex applies one changelog record of a plan's index.
func restorePlanIndex(t *joinstate.Txn, key, value []byte) error {
	if len(key) < 2 {
		return fmt.Errorf("%w: plan index key of %d bytes", row.ErrCorrupt, len(key))
	}
	if value == nil {
		return t.DeleteChild(key[:2], key[2:])
	}
	return t.PutChild(key[:2], key[2:], value)
}

// planShape identifies a plan's index layout (driver.IndexShape for the
// regular join): the query and every table's key.
func planShape(cfg *config.Config, p *plan.Plan) []byte {
	b := []byte("plan-index1|")
	for _, t := range p.Tables {
		b = fmt.Appendf(b, "%s:%s:%v|", t.Alias, t.Name, t.Key)
	}
	return append(b, cfg.Query...)
}

// planRecord keys one source record of a plan inside the keying
// transaction: for every FROM item its topic feeds, decode, key on the
// source partition's index and send the stage records (a clear to every
// partition of the stage's log).
func (kt *keyingTxn) planRecord(ctx context.Context, r *kgo.Record) error {
	k := kt.k
	pr := k.plan
	side := pr.sideOf[r.Topic]
	items := k.pdec.Items(r.Topic)
	if side == 0 || len(items) == 0 {
		return kt.bad(r, &driver.Bad{Kind: "decode", Err: k.pdec.NotATopic(r.Topic, r.Partition, r.Offset)})
	}
	t, err := kt.index(ctx, sourcePart{side, r.Partition})
	if err != nil {
		return err
	}
	idx, err := newPlanIndex(t, func(key, value []byte) error { return kt.changelog(side, r.Partition, key, value) })
	if err != nil {
		return err
	}
	for _, it := range items {
		ok, err := k.pdec.Decode(it, r.Topic, r.Partition, r.Offset, r.Key, r.Value, &k.ev)
		if err != nil {
			b, isBad := driver.BadDecode(err)
			if !isBad {
				return err
			}
			return kt.bad(r, b)
		}
		if !ok {
			k.m.EventsConsumed.WithLabelValues(r.Topic, "tombstone").Inc()
			return nil
		}
		k.m.EventsConsumed.WithLabelValues(r.Topic, k.ev.Op.String()).Inc()
		n, _ := stage.Feeds(it)
		topic := stageTopic(&k.cfg.Kafka, n)
		err = k.src.Key(idx, it, &k.ev, k.top.keyedParts, func(p int32, key, value []byte) error {
			k.m.KeyedRecords.WithLabelValues("stage").Inc()
			mk := func(p int32) *kgo.Record {
				rec := &kgo.Record{Topic: topic, Partition: p, Key: append([]byte(nil), key...)}
				if value != nil {
					rec.Value = append([]byte(nil), value...)
				}
				return rec
			}
			if p >= 0 {
				return kt.send(mk(p))
			}
			for p := int32(0); p < k.top.keyedParts; p++ {
				if err := kt.send(mk(p)); err != nil {
					return err
				}
			}
			return nil
		})
		var ke *stage.KeyError
		var xe *stage.ExprError
		switch {
		case errors.As(err, &ke):
			return kt.bad(r, &driver.Bad{Kind: "key", Err: fmt.Errorf("cdcjoin: bad record at %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)})
		case errors.As(err, &xe):
			return kt.bad(r, &driver.Bad{Kind: "query", Err: fmt.Errorf("cdcjoin: bad record at %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)})
		case err != nil:
			return err
		}
	}
	return nil
}

// keyTypeCodec is the decoders' learned key types, saved in the index
// changelogs (job.Decoder and job.PlanDecoder).
type keyTypeCodec interface {
	KeyTypes() []byte
	KeyTypesLearned() int
	RestoreKeyTypes(b []byte) error
}

func (k *keying) keyTypes() keyTypeCodec {
	if k.plan != nil {
		return k.pdec
	}
	return k.dec
}

// sides are the keying stage's source sides (one per source topic).
func (k *keying) sides() []row.Side {
	if k.plan == nil {
		return []row.Side{row.Parent, row.Child}
	}
	out := make([]row.Side, len(k.plan.topics))
	for i := range out {
		out[i] = row.Side(i + 1)
	}
	return out
}

// sideOf returns topic's side (0: not a source topic).
func (k *keying) sideOf(topic string) row.Side {
	if k.plan != nil {
		return k.plan.sideOf[topic]
	}
	return k.dec.Side(topic)
}

// sideName names a side in logs, metrics and state directories.
func (k *keying) sideName(s row.Side) string {
	if k.plan != nil {
		return "t" + strconv.Itoa(int(s))
	}
	return s.String()
}

// indexSide returns the side whose index changelog topic is topic (0: none).
func (k *keying) indexSide(topic string) row.Side {
	for _, s := range k.sides() {
		if k.indexTopic(s) == topic {
			return s
		}
	}
	return 0
}

// indexShape identifies the layout of the keying stage's indexes.
func (k *keying) indexShape() []byte {
	if k.plan != nil {
		return planShape(k.cfg, k.plan.p)
	}
	if k.tk != nil {
		return temporalShape(k.cfg)
	}
	return driver.IndexShape(k.spec)
}

// PlanNames are the Kafka names a plan's job uses besides its source
// topics (for tools that reset or watch a job: e2e).
type PlanNames struct {
	Sources []string // the plan's distinct source topics
	Keyed   []string // every stage's keyed topic, stage 1 first
	Index   []string // the keying stage's index changelogs, one per source topic
	Groups  []string // the keying group, then every stage's group
}

// NamesOf returns the names of cfg's plan (cfg.Plan() must be set).
func NamesOf(cfg *config.Config) PlanNames {
	pr := newPlanRun(cfg)
	kc := &cfg.Kafka
	n := PlanNames{Sources: pr.topics, Keyed: keyedTopics(cfg, pr), Groups: []string{kc.KeyingGroup()}}
	for i := range pr.topics {
		n.Index = append(n.Index, indexTopic(kc, i+1))
	}
	for s := 1; s <= pr.stages; s++ {
		n.Groups = append(n.Groups, stageGroup(kc, s))
	}
	return n
}

package kafkarun

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/deadletter"
	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/metrics"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/timejoin"
	"github.com/cdcjoin/cdcjoin/timejoin/timeop"
)

// A time join (config.TimeJoin, package timejoin) on Kafka: the same
// stages, transactions and worker batches as the regular join, with
//
//   - keying: every source record decoded by job.TimeDecoder and keyed
//     as a keyedlog 'X' record to the partition of its join key (a
//     truncate to every partition; a temporal right side's changes through
//     its index, to every partition the row has been in: temporal.go); and
//     at each keying
//     transaction's boundary a watermark record ('W': a source
//     partition's largest event time and whether it is idle by
//     idle_timeout of wall time) for each owned source partition whose
//     watermark or idleness changed, to every keyed partition, in the same
//     transaction (timeKeying). So a keyed partition's log says everything
//     the join needs, at a position: the join is deterministic given it.
//   - join: the time join's operator (timeop) per keyed partition, which
//     knows every source partition from the start (the join's watermark
//     waits for a partition until it has records or is idle); late
//     records go to the bad-record policy through Out.Reject (worker.reject:
//     dead letters in the batch's forwarding transaction).
//   - the keyed topic is cleanup.policy delete with no retention limit:
//     a time join's keyed records are not a changelog (rows expire by
//     time, watermarks are positions), so a partition that moves is
//     rebuilt by applying its log through the operator without emitting
//     (up to the group's committed offset), which reproduces the state
//     exactly, seq numbers included, because the operator is a function
//     of the log. To keep the log bounded, each worker snapshots its
//     committed operator state to "<group>.tsnap" every
//     kafka.snapshot_records keyed records (or snapshot_interval) and
//     then deletes the keyed records below it (tsnap.go); a rebuild loads
//     the newest complete snapshot and applies the log from its position
//     (from the start when there is none). The emitted rows carry their
//     stream's seq (Version): an insert-mode sink drops what it has.

// timeSpec is the keyed.Spec that stands for a time join where the
// stages name join keys (busy keys, logs): its sides' keys; no operator
// uses it.
func timeSpec(cfg *config.Config) (*keyed.Spec, error) {
	tj := cfg.TimeJoin
	return keyed.NewSpec(keyed.Shape{ParentKey: tj.Left.Key, ChildKey: tj.Right.Key, ChildParentKey: tj.Right.Key,
		Select: []keyed.Column{{Side: row.Parent, Source: tj.Left.Key[0], Name: "key"}}})
}

// timeKeying is the keying stage's part of a time join: decoding and
// routing of the source records and the watermark records at transaction
// boundaries. Owned by the keying goroutine, but for the assignment
// callbacks (under mu).
type timeKeying struct {
	cfg    *config.Config
	ts     *job.TimeSpec
	dec    *job.TimeDecoder
	tm     *metrics.TimeJoin
	writer string // names this instance in watermark records
	parts  int32  // keyed partitions

	mu    sync.Mutex
	owned map[timejoin.Source]*sourceClock
	// txn is, per source partition, the largest event time keyed by the
	// transaction in progress (applied to owned when it commits).
	txn map[timejoin.Source]int64
	// sending: the watermark records of the transaction in progress.
	sending map[timejoin.Source]keyedlog.Watermark

	// router routes a temporal join's right changes (nil for the other
	// kinds: their sides are append-only, keyed by their join key).
	router *temporalRouter

	rec  timejoin.Record
	k, v []byte
}

// sourceClock is what the keying stage knows of an owned source
// partition since it was assigned.
type sourceClock struct {
	max  int64     // largest event time keyed and committed (MinTime: none)
	last time.Time // wall time of its latest committed record (or of the assignment)
	sent *keyedlog.Watermark
}

func newTimeKeying(cfg *config.Config, tm *metrics.TimeJoin, parts int32) (*timeKeying, error) {
	ts, err := job.TimeJoin(cfg)
	if err != nil {
		return nil, err
	}
	tk := &timeKeying{cfg: cfg, ts: ts, dec: job.NewTimeDecoder(cfg, ts), tm: tm, writer: cfg.Kafka.InstanceID, parts: parts,
		owned: map[timejoin.Source]*sourceClock{}, txn: map[timejoin.Source]int64{}, sending: map[timejoin.Source]keyedlog.Watermark{}}
	if ts.Spec.Kind == timejoin.Temporal {
		tk.router = &temporalRouter{parts: parts}
	}
	return tk, nil
}

// indexed reports whether the keying stage keeps an index of side's
// source partitions: a temporal join's right side (temporal.go).
func (tk *timeKeying) indexed(side row.Side) bool { return tk.router != nil && side == row.Child }

func (tk *timeKeying) side(topic string) timejoin.Side {
	if topic == tk.cfg.TimeJoin.Right.Topic {
		return timejoin.SideRight
	}
	return timejoin.SideLeft
}

func (tk *timeKeying) topicOf(s timejoin.Side) string {
	if s == timejoin.SideRight {
		return tk.cfg.TimeJoin.Right.Topic
	}
	return tk.cfg.TimeJoin.Left.Topic
}

// assigned starts the clocks of newly owned source partitions (their
// first watermark record goes out with the next transaction).
func (tk *timeKeying) assigned(added map[string][]int32) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	now := time.Now()
	for topic, ps := range added {
		for _, p := range ps {
			src := timejoin.Source{Side: tk.side(topic), Partition: p}
			if tk.owned[src] == nil {
				tk.owned[src] = &sourceClock{max: timejoin.MinTime, last: now}
			}
		}
	}
}

// reset forgets every owned partition (the stage's session closed).
func (tk *timeKeying) reset() {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	clear(tk.owned)
}

func (tk *timeKeying) dropped(lost map[string][]int32) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	for topic, ps := range lost {
		for _, p := range ps {
			delete(tk.owned, timejoin.Source{Side: tk.side(topic), Partition: p})
		}
	}
}

// record keys one source record into kt.
func (tk *timeKeying) record(ctx context.Context, kt *keyingTxn, r *kgo.Record) error {
	k := kt.k
	rec := &tk.rec
	ok, err := tk.dec.Decode(r.Topic, r.Partition, r.Offset, r.Key, r.Value, rec)
	if err != nil {
		kind := "decode"
		var br *job.BadRecord
		if errors.As(err, &br) {
			kind = br.Kind
		}
		return kt.bad(r, &driver.Bad{Kind: kind, Err: err})
	}
	if !ok {
		k.m.EventsConsumed.WithLabelValues(r.Topic, "tombstone").Inc()
		return nil
	}
	k.m.EventsConsumed.WithLabelValues(r.Topic, timeOps[rec.Op]).Inc()
	side := tk.side(r.Topic)
	src := timejoin.Source{Side: side, Partition: r.Partition}
	if m, ok := tk.txn[src]; !ok || rec.Time > m {
		tk.txn[src] = rec.Time
	}
	k.m.KeyedRecords.WithLabelValues("time").Inc()
	source := keyedlog.TimeSource{Partition: r.Partition, Offset: r.Offset, Key: r.Key}
	switch {
	case rec.Op == timejoin.Truncate:
		return tk.send(kt, -1, rec, source)
	case tk.router != nil && side == timejoin.SideRight:
		// A temporal right row's changes follow its join key (temporal.go).
		t, err := kt.index(ctx, sourcePart{row.Child, r.Partition})
		if err != nil {
			return err
		}
		others, err := tk.router.route(mirroredIndex{t: t, kt: kt, part: r.Partition}, rec, func(p int32, x *timejoin.Record) error {
			return tk.send(kt, p, x, source)
		})
		if others > 0 {
			// Copies for the other partitions the row has been in.
			k.m.KeyedRecords.WithLabelValues("time_other").Add(float64(others))
		}
		return err
	}
	return tk.send(kt, keyedlog.Partition(rec.Key, tk.parts), rec, source)
}

// send produces the keyed record of rec (from the source record at src) to
// keyed partition p (-1: every partition).
func (tk *timeKeying) send(kt *keyingTxn, p int32, rec *timejoin.Record, src keyedlog.TimeSource) error {
	tk.k, tk.v = keyedlog.AppendTime(tk.k[:0], tk.v[:0], rec, src)
	topic := tk.cfg.Kafka.KeyedTopic()
	for q := int32(0); q < tk.parts; q++ {
		if p >= 0 && q != p {
			continue
		}
		if err := kt.send(&kgo.Record{Topic: topic, Partition: q, Key: append([]byte(nil), tk.k...), Value: append([]byte(nil), tk.v...)}); err != nil {
			return err
		}
	}
	return nil
}

// timeOps names a time record's op for the consumed-events metric (as
// the regular join's Debezium ops are named).
var timeOps = [...]string{timejoin.Insert: "c", timejoin.Delete: "d", timejoin.Truncate: "t"}

// due reports whether a watermark record is due without any source
// record: a partition never announced, or whose idleness changed.
func (tk *timeKeying) due(now time.Time) bool {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	for src, c := range tk.owned {
		if w := tk.watermark(src, c, now); c.sent == nil || *c.sent != w {
			return true
		}
	}
	return false
}

// watermark is what src's watermark record says at now (under mu).
func (tk *timeKeying) watermark(src timejoin.Source, c *sourceClock, now time.Time) keyedlog.Watermark {
	w := keyedlog.Watermark{Source: src, Max: c.max}
	if m, ok := tk.txn[src]; ok {
		w.Max = max(w.Max, m)
	} else if to := tk.cfg.TimeJoin.IdleTimeout; to > 0 && now.Sub(c.last) >= to {
		w.Idle = true
	}
	return w
}

// boundary writes, at the end of the transaction kt, the watermark record
// of every owned source partition whose watermark or idleness changed to
// every keyed partition.
func (tk *timeKeying) boundary(kt *keyingTxn) error {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	now := time.Now()
	topic := tk.cfg.Kafka.KeyedTopic()
	for src, c := range tk.owned {
		w := tk.watermark(src, c, now)
		if c.sent != nil && *c.sent == w {
			continue
		}
		tk.sending[src] = w
		tk.k, tk.v = keyedlog.AppendWatermark(tk.k[:0], tk.v[:0], &w, tk.writer)
		for p := int32(0); p < tk.parts; p++ {
			if err := kt.send(&kgo.Record{Topic: topic, Partition: p, Key: append([]byte(nil), tk.k...), Value: append([]byte(nil), tk.v...)}); err != nil {
				return err
			}
		}
		kt.k.m.KeyedRecords.WithLabelValues("watermark").Add(float64(tk.parts))
	}
	return nil
}

// ended ends the transaction: committed, its records' times and its
// watermark records count; else they are dropped (the records are keyed
// again).
func (tk *timeKeying) ended(committed bool) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	now := time.Now()
	if committed {
		for src, m := range tk.txn {
			if c := tk.owned[src]; c != nil {
				c.max, c.last = max(c.max, m), now
			}
		}
		for src, w := range tk.sending {
			if c := tk.owned[src]; c != nil {
				c.sent = &w
			}
		}
		if tk.tm != nil {
			for src, c := range tk.owned {
				topic, part := tk.topicOf(src.Side), strconv.Itoa(int(src.Partition))
				if c.max > timejoin.MinTime {
					tk.tm.SourceWatermark.WithLabelValues(topic, part).Set(float64(c.max-tk.ts.Spec.OutOfOrderness) / 1e6)
				}
				idle := 0.0
				if c.sent != nil && c.sent.Idle {
					idle = 1
				}
				tk.tm.SourceIdle.WithLabelValues(topic, part).Set(idle)
			}
		}
	}
	clear(tk.txn)
	clear(tk.sending)
}

// newTimeOp makes a keyed partition's time-join operator: every source
// partition declared, late records counted, the watermark published after
// each commit.
func (w *worker) newTimeOp(of OperatorFor) (Operator, error) {
	j := w.j
	ts, err := job.TimeJoin(j.cfg)
	if err != nil {
		return Operator{}, err
	}
	op := timeop.New(ts.Spec, 0)
	for p := int32(0); p < j.top.parentParts; p++ {
		op.Declare(timejoin.Source{Side: timejoin.SideLeft, Partition: p})
	}
	for p := int32(0); p < j.top.childParts; p++ {
		op.Declare(timejoin.Source{Side: timejoin.SideRight, Partition: p})
	}
	part := strconv.Itoa(int(of.Partition))
	var last timejoin.Stats
	committed := func() {
		if j.tm == nil {
			return
		}
		if wm := op.Join().Watermark(); wm > timejoin.MinTime && wm < timejoin.MaxTime {
			j.tm.Watermark.WithLabelValues(part).Set(float64(wm) / 1e6)
			j.tm.WatermarkLag.WithLabelValues(part).Set(float64(time.Now().UnixMicro()-wm) / 1e6)
		}
		st := op.Join().Stats
		j.tm.Rows.WithLabelValues("joined").Add(float64(st.Pairs - last.Pairs))
		j.tm.Rows.WithLabelValues("padded").Add(float64(st.Outer - last.Outer))
		j.tm.Retired.Add(float64(st.Retired - last.Retired))
		last = st
	}
	return Operator{Operator: op, Committed: committed}, nil
}

// reject is the worker's bad-record step for a message its operator
// refuses (keyedlog.Out.Reject: a time join's late record): counted, and
// under errors.policy dlq a dead letter (the source position and key, no
// value: the keyed record holds only the projected row) in the batch's
// forwarding transaction; under stop the batch fails with its error.
func (w *worker) reject(m *keyedlog.Msg, reason string, t, watermark int64) error {
	j := w.j
	topic := j.cfg.Parent.Topic
	if m.Kind == keyedlog.KindTime && m.Time.Side == timejoin.SideRight {
		topic = j.cfg.Child.Topic
	}
	l := &deadletter.Letter{Topic: topic, Partition: m.Source.Partition, Offset: m.Source.Offset, Key: m.Source.Key,
		Stage: "join", Kind: reason, Late: &deadletter.Late{Time: t, Watermark: watermark},
		Err: fmt.Errorf("cdcjoin: late record at %s/%d@%d: its time %s is below the watermark %s - allowed_lateness %v",
			topic, m.Source.Partition, m.Source.Offset, deadletter.FormatTime(t), deadletter.FormatTime(watermark), j.cfg.TimeJoin.AllowedLateness)}
	if j.tm != nil {
		j.tm.LateRecords.WithLabelValues(topic).Inc()
	}
	j.m.Errors.WithLabelValues("join", reason).Inc()
	if j.cfg.Errors.Policy != config.PolicyDLQ {
		return l.Err
	}
	j.m.DeadLettered.WithLabelValues("join").Inc()
	return w.fwd.produce(DeadLetterRecord(l, j.cfg.Errors.DLQTopic))
}

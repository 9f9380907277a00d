package kafkarun

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/deadletter"
	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
)

// keyingTxn is one transaction of the keying stage, made by transact for
// one poll's records and dropped when it has committed or aborted:
// everything that lives as long as a transaction (the index transactions,
// the produce errors, the changelog offsets produced, the dead-letter
// writer) is its own, and the keyer's changelog hook is a closure over it.
// Owned by the keying goroutine; promise runs on franz-go's (under mu).
type keyingTxn struct {
	k      *keying
	ctx    context.Context // produce context: outlives a shutdown for the drain
	idx    map[sourcePart]*joinstate.Txn
	policy deadletter.Policy
	out    func(*keyed.Input) error // produce, made once
	// keyTypes is the decoder's KeyTypesLearned the transaction wrote to
	// the changelogs (0: none).
	keyTypes int

	mu  sync.Mutex
	err error // first produce error
	// logged is, per source partition, the changelog offset after the
	// last index record the transaction produced.
	logged map[sourcePart]int64
}

// newTxn starts the keying stage's side of a Kafka transaction (begun on
// the session) whose records are produced under ctx.
func (k *keying) newTxn(ctx context.Context) *keyingTxn {
	kt := &keyingTxn{k: k, ctx: ctx, idx: map[sourcePart]*joinstate.Txn{}, logged: map[sourcePart]int64{}}
	if k.cfg.Errors.Policy == config.PolicyDLQ {
		kt.policy.Writer = kt
	}
	// Every index write goes to the index's changelog topic, in this
	// transaction.
	if k.keyer != nil {
		k.keyer.Changelog = kt.changelog
	}
	kt.out = kt.produce
	return kt
}

// key keys every record of fs (under ctx: index restores) and the key
// types learned on the way.
func (kt *keyingTxn) key(ctx context.Context, fs kgo.Fetches) error {
	var err error
	fs.EachRecord(func(r *kgo.Record) {
		if err == nil {
			err = kt.record(ctx, r)
		}
	})
	if err == nil {
		kt.saveKeyTypes()
	}
	return err
}

// produceErr returns the first produce error of the transaction (begun at
// began), classified.
func (kt *keyingTxn) produceErr(began time.Time) error {
	kt.mu.Lock()
	defer kt.mu.Unlock()
	if kt.err == nil {
		return nil
	}
	return kt.k.kafkaFault(kt.err, began)
}

// record keys one source record. Bad records follow the error policy; other
// errors are fatal.
func (kt *keyingTxn) record(ctx context.Context, r *kgo.Record) error {
	k := kt.k
	if k.plan != nil {
		return kt.planRecord(ctx, r)
	}
	if k.tk != nil {
		return k.tk.record(ctx, kt, r)
	}
	// Restore the partition's index (and what the decoder learned) first,
	// so the record is decoded knowing it.
	var t *joinstate.Txn
	if side := k.dec.Side(r.Topic); side != 0 {
		var err error
		if t, err = kt.index(ctx, sourcePart{side, r.Partition}); err != nil {
			return err
		}
	}
	side, ok, err := k.dec.DecodeHeaders(r.Topic, r.Partition, r.Offset, r.Key, r.Value, k.headers(r), &k.ev)
	if err != nil {
		b, ok := driver.BadDecode(err)
		if !ok {
			return err // the schema registry failed, not the record
		}
		return kt.bad(r, b)
	}
	if !ok {
		k.m.EventsConsumed.WithLabelValues(r.Topic, "tombstone").Inc()
		return nil
	}
	k.m.EventsConsumed.WithLabelValues(r.Topic, k.ev.Op.String()).Inc()
	if k.ev.After.Present {
		// A record whose keyed record would not fit its topic is a bad
		// record, caught before keying it changes the index.
		var n int
		n, k.scratch = keyedSize(k.ev.After.Values, r.Key, k.scratch)
		if topic, limit := k.keyedLimit(side); n > limit {
			return kt.bad(r, &driver.Bad{Kind: "oversized", Err: fmt.Errorf("cdcjoin: bad record at %s/%d@%d: oversized: its keyed record would be about %d bytes, more than max.message.bytes (%d) of %s: raise the topic's max.message.bytes, or leave the large column out of the select list",
				r.Topic, r.Partition, r.Offset, n, limit, topic)})
		}
	}
	err = k.keyer.Key(t, side, r.Partition, &k.ev, kt.out)
	if b, ok := driver.BadKey(err, &driver.Source{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}); ok {
		return kt.bad(r, b)
	}
	var tl *tooLarge
	if errors.As(err, &tl) {
		return fmt.Errorf("cdcjoin: keying: record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	return err
}

// index returns the transaction of source partition p's index (restoring
// the index under ctx first if this instance was just assigned p).
func (kt *keyingTxn) index(ctx context.Context, p sourcePart) (*joinstate.Txn, error) {
	if t := kt.idx[p]; t != nil {
		return t, nil
	}
	s, err := kt.k.index(ctx, p)
	if err != nil {
		return nil, err
	}
	t := s.Begin()
	kt.idx[p] = t
	return t, nil
}

// produce sends the keyed record(s) of in (the keyer's output).
func (kt *keyingTxn) produce(in *keyed.Input) error {
	k := kt.k
	key := keyedlog.AppendInputKey(nil, in)
	val := keyedlog.AppendCompactValue(k.spec, nil, key, in)
	topic := k.cfg.Kafka.KeyedTopic()
	k.m.KeyedRecords.WithLabelValues(in.Kind.String()).Inc()
	if in.Kind == keyed.Truncate {
		for p := int32(0); p < k.top.keyedParts; p++ {
			if err := kt.send(&kgo.Record{Topic: topic, Partition: p, Key: key, Value: val}); err != nil {
				return err
			}
		}
		return nil
	}
	k.busy.add(in.JoinKey)
	return kt.send(&kgo.Record{Topic: topic, Partition: keyedlog.Partition(in.JoinKey, k.top.keyedParts), Key: key, Value: val})
}

// changelog mirrors one index write of the keyer to the index's changelog
// topic, on the event's source partition (keyed.Keyer.Changelog).
func (kt *keyingTxn) changelog(side row.Side, partition int32, key, entry []byte) error {
	r := &kgo.Record{Topic: kt.k.indexTopic(side), Partition: partition, Key: append([]byte(nil), key...)}
	if entry != nil {
		r.Value = append([]byte(nil), entry...)
	}
	return kt.send(r)
}

// tooLarge is a keyed or index record that does not fit its topic although
// the estimate before keying said it would (TOAST placeholders completed
// from the index can grow a row).
type tooLarge struct {
	topic       string
	size, limit int
}

func (e *tooLarge) Error() string {
	return fmt.Sprintf("its record for %s is %d bytes, more than the topic's max.message.bytes (%d): raise it (the index is already updated for this record, so it cannot be dead-lettered)", e.topic, e.size, e.limit)
}

// send produces rec in the transaction unless it is larger than its topic
// accepts.
func (kt *keyingTxn) send(rec *kgo.Record) error {
	if limit, ok := kt.k.top.limits[rec.Topic]; ok {
		if n := recordSize(rec) + recordOverhead; n > limit {
			return &tooLarge{topic: rec.Topic, size: n, limit: limit}
		}
	}
	kt.k.sess.Produce(kt.ctx, rec, kt.promise)
	return nil
}

func (kt *keyingTxn) promise(r *kgo.Record, err error) {
	kt.mu.Lock()
	defer kt.mu.Unlock()
	if err != nil {
		if kt.err == nil {
			kt.err = fmt.Errorf("cdcjoin: keying: produce: %w", err)
		}
		return
	}
	side := kt.k.indexSide(r.Topic)
	if side == 0 {
		return
	}
	sp := sourcePart{side, r.Partition}
	if r.Offset >= kt.logged[sp] {
		kt.logged[sp] = r.Offset + 1
	}
}

// keyTypesKey is the reserved index-changelog key under which the keying
// stage keeps what its decoder learned about key column types
// (job.Decoder.KeyTypes); index keys are encoded tuples, which never begin
// with 0xff.
const keyTypesKey = "\xffkey-types"

// saveKeyTypes writes the decoder's learned key types to the changelogs of
// every source partition this instance holds, when they changed since the
// last save.
func (kt *keyingTxn) saveKeyTypes() {
	k := kt.k
	learned := k.keyTypes().KeyTypesLearned()
	if learned == k.keyTypesSaved {
		return
	}
	b := k.keyTypes().KeyTypes()
	k.mu.Lock()
	parts := make([]sourcePart, 0, len(k.idx))
	for sp := range k.idx {
		parts = append(parts, sp)
	}
	k.mu.Unlock()
	for _, sp := range parts {
		k.sess.Produce(kt.ctx, &kgo.Record{Topic: k.indexTopic(sp.side), Partition: sp.part, Key: []byte(keyTypesKey), Value: b}, kt.promise)
	}
	kt.keyTypes = learned
}

// saveTopicIDs writes the source topic's id to the changelog of every
// partition the transaction touches whose changelog does not have it from
// this session yet (topics.go).
func (kt *keyingTxn) saveTopicIDs() {
	k := kt.k
	for sp := range kt.idx {
		if k.idSaved[sp] {
			continue
		}
		if id := k.top.sourceIDs[k.topicOf(sp.side)]; id != "" {
			k.sess.Produce(kt.ctx, &kgo.Record{Topic: k.indexTopic(sp.side), Partition: sp.part, Key: []byte(topicIDKey), Value: []byte(id)}, kt.promise)
			k.idPending = append(k.idPending, sp)
		}
	}
}

// bad applies the error policy to a record that cannot be decoded or
// keyed: stop returns its error (the transaction aborts, nothing past the
// record commits); dlq sends the original record with provenance headers
// to the dead-letter topic inside the transaction.
func (kt *keyingTxn) bad(r *kgo.Record, b *driver.Bad) error {
	kt.k.m.Errors.WithLabelValues("keying", b.Kind).Inc()
	src := driver.Source{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		src.Headers = append(src.Headers, deadletter.Header{Key: h.Key, Value: h.Value})
	}
	return driver.HandleBad(kt.ctx, kt.policy, "keying", &src, b)
}

// DeadLetter implements deadletter.Writer: the letter goes to the
// dead-letter topic in the transaction.
func (kt *keyingTxn) DeadLetter(ctx context.Context, l *deadletter.Letter) error {
	k := kt.k
	k.m.DeadLettered.WithLabelValues("keying").Inc()
	k.log.Warn("bad record sent to the dead-letter topic", "topic", l.Topic, "partition", l.Partition, "offset", l.Offset, "err", l.Err)
	dlq := k.cfg.Errors.DLQTopic
	limit, ok := k.top.limits[dlq]
	if !ok {
		limit = defaultMaxMessageBytes
	}
	d := deadLetterWithin(l, dlq, limit)
	if len(d.Value) < len(l.Value) {
		k.log.Warn("dead letter truncated to fit the dead-letter topic", "topic", l.Topic, "partition", l.Partition, "offset", l.Offset,
			"value_bytes", len(l.Value), "kept", len(d.Value), "max_message_bytes", limit)
	}
	k.sess.Produce(ctx, d, kt.promise)
	return nil
}

// DeadLetterRecord returns the dead-letter record of l: the original key,
// value and headers plus the provenance headers, for partition 0 of topic.
func DeadLetterRecord(l *deadletter.Letter, topic string) *kgo.Record {
	var hs []kgo.RecordHeader
	for _, h := range l.ProvenanceHeaders() {
		hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return &kgo.Record{Topic: topic, Partition: 0, Key: l.Key, Value: l.Value, Headers: hs}
}

// committed commits the local indexes after the Kafka transaction
// committed: each now reflects its changelog up to the records just
// committed (a restart reads only what comes after).
func (kt *keyingTxn) committed() error {
	k := kt.k
	k.keyTypesSaved = max(k.keyTypesSaved, kt.keyTypes)
	kt.mu.Lock()
	logged := maps.Clone(kt.logged)
	kt.mu.Unlock()
	// Partitions whose changelogs got records without an index change
	// (the learned key types) move their positions too, so that a restart
	// does not read those records again.
	for p := range logged {
		if kt.idx[p] == nil {
			k.mu.Lock()
			s := k.idx[p]
			k.mu.Unlock()
			if s != nil {
				kt.idx[p] = s.Begin()
			}
		}
	}
	k.busy.publish(time.Now())
	for p, t := range kt.idx {
		delete(kt.idx, p)
		if next, ok := logged[p]; ok {
			if err := driver.MetaChangelog.Put(t, next); err != nil {
				t.Abort()
				kt.abort()
				return fmt.Errorf("cdcjoin: keying: %s index partition %d: %w", p.side, p.part, err)
			}
		}
		if err := t.Commit(); err != nil {
			// The changelog is ahead of the local index: drop it, a
			// restore rebuilds it.
			kt.abort()
			return fmt.Errorf("cdcjoin: keying: %s index partition %d: %w", p.side, p.part, err)
		}
	}
	return nil
}

// abort drops the index writes of a transaction that did not commit.
func (kt *keyingTxn) abort() {
	for p, t := range kt.idx {
		t.Abort()
		delete(kt.idx, p)
	}
}

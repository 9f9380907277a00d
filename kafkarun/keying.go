package kafkarun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/deadletter"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/metrics"
	"github.com/cdcjoin/cdcjoin/row"
)

// keying is the keying stage: it consumes the Debezium topics in the group
// "<group>-keying", keys every event and produces the keyed records, all in
// one Kafka transaction per poll (GroupTransactSession): the consumed source
// offsets, the keyed records, the child-index changelog records and any
// dead-lettered records commit together or not at all.
//
// Indexes: the child index (child pk → current join key and last row) of
// the children on child-topic partition p lives in a local pebble store and
// is mirrored to partition p of the compacted "<group>.child-index" topic
// inside the same transactions; likewise the parent index (parent pk → last
// row, to complete TOAST placeholders before the row enters the compacted
// keyed topic) in "<group>.parent-index". When this instance is assigned p it brings the local store
// up to date from that partition (read_committed, to its end; between
// polls, as soon as p's committed offset is fetched: ready.go), so the index always
// matches the committed source offset of p: KIP-447 stable offset fetches
// make the new owner wait until the previous owner's transaction is
// resolved. Stale index entries (a child truncate only clears the index of
// the partition that carried the truncate) cost no-op tombstones, never
// wrong output.
//
// Concurrency: one goroutine (run) owns everything; the revoke/lost
// callbacks touch the index map under mu, and BlockRebalanceOnPoll keeps
// them out of a transaction in progress.
type keying struct {
	cfg  *config.Config
	spec *keyed.Spec
	log  *slog.Logger
	m    *metrics.Metrics
	base []kgo.Opt
	adm  *kadm.Client
	top  topology
	sess *kgo.GroupTransactSession
	txid string // the session's transactional id

	dec     *job.Decoder
	hdrs    []debezium.Header     // headers of the record being decoded
	schemas debezium.SchemaSource // resolves Avro schema ids (nil for JSON)
	keyer   *keyed.Keyer
	policy  deadletter.Policy
	ev      debezium.Event
	// keyTypesSaved is the decoder's KeyTypesLearned as last committed to
	// the changelogs; keyTypesPending what the transaction in progress
	// writes.
	keyTypesSaved, keyTypesPending int
	// idSaved: source partitions whose changelog got the topic's id in
	// this session; idPending: those the transaction in progress writes.
	idSaved   map[sourcePart]bool
	idPending []sourcePart

	busy   *busyKeys   // the busiest join keys (metrics)
	health stageHealth // progress and failures (fault.go)

	mu  sync.Mutex
	idx map[sourcePart]*joinstate.Store // source partition → its index
	// ending: a transaction's End runs with rebalances allowed (see
	// transact); indexes dropped meanwhile wait in dropped.
	ending  bool
	dropped []*joinstate.Store
	rd      keyingReady // the assignment, for readiness (ready.go)

	txns map[sourcePart]*joinstate.Txn // per transaction
	perr error                         // first produce error of the transaction
	pmu  sync.Mutex
	pctx context.Context // produce context of the transaction in progress
	// logged is, per source partition, the changelog offset after the last
	// index record the transaction in progress produced (under pmu).
	logged map[sourcePart]int64

	scratch []byte // for keyedSize

	// txnBegan is when the last transaction began (after the restores
	// before it; zero when it did not begin), txnKeyed how long keying its
	// records took (up to its End): its size adapts to them, failures log
	// them.
	txnBegan time.Time
	txnKeyed time.Duration
}

func newKeying(cfg *config.Config, spec *keyed.Spec, base []kgo.Opt, adm *kadm.Client, top topology, log *slog.Logger, m *metrics.Metrics, schemas debezium.SchemaSource) (*keying, error) {
	k := &keying{
		cfg: cfg, spec: spec, log: log.With("stage", "keying"), m: m, base: base, adm: adm, top: top,
		schemas: schemas,
		idx:     map[sourcePart]*joinstate.Store{},
		txns:    map[sourcePart]*joinstate.Txn{},
		logged:  map[sourcePart]int64{},
		busy:    newBusyKeys(spec, cfg.Skew.TopKeys),
	}
	if cfg.Errors.Policy == config.PolicyDLQ {
		k.policy.Writer = k
	}
	k.txid = cfg.Kafka.Group + "-keying-" + cfg.Kafka.InstanceID
	if err := k.open(); err != nil {
		return nil, err
	}
	return k, nil
}

// open makes the stage's session (a new Kafka client in the keying group)
// with a fresh decoder and keyer: what a start of the process would make.
// The indexes are restored when their partitions are assigned.
func (k *keying) open() error {
	cfg := k.cfg
	k.dec = job.NewDecoder(cfg, k.spec, k.schemas)
	k.keyer = keyed.NewKeyer(k.spec)
	// The keyed topic is compacted: parent rows must be complete in it.
	k.keyer.ResolveParents = true
	// Every index write goes to the index's changelog topic, in the same
	// transaction.
	k.keyer.Changelog = k.changelog
	k.keyTypesSaved, k.keyTypesPending = 0, 0
	k.idSaved = map[sourcePart]bool{}
	k.mu.Lock()
	k.rd = keyingReady{} // until the new session's assignment
	k.mu.Unlock()
	kc := &cfg.Kafka
	opts := producerOpts(kc, k.base,
		kgo.ConsumerGroup(kc.KeyingGroup()),
		kgo.ConsumeTopics(cfg.Parent.Topic, cfg.Child.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(kc.SessionTimeout),
		kgo.HeartbeatInterval(heartbeat(kc.SessionTimeout)),
		kgo.RebalanceTimeout(kc.RebalanceTimeout),
		kgo.TransactionalID(k.txid),
		kgo.TransactionTimeout(kc.TransactionTimeout),
		kgo.ProducerLinger(kc.Linger),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytesFn(batchLimit(k.top.limits)),
		kgo.OnPartitionsAssigned(k.assignPartitions),
		kgo.OnOffsetsFetched(k.offsetsFetched),
		kgo.OnPartitionsRevoked(k.dropPartitions),
		kgo.OnPartitionsLost(k.dropPartitions),
	)
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return fmt.Errorf("cdcjoin: keying: kafka client: %w", err)
	}
	k.sess = sess
	return nil
}

// sourcePart names a source partition: the side's topic and a partition.
type sourcePart struct {
	side row.Side
	part int32
}

// dropPartitions closes the indexes of revoked or lost partitions; a later
// assignment restores them from the changelog.
func (k *keying) dropPartitions(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, side := range []row.Side{row.Parent, row.Child} {
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
					k.log.Warn("closing index", "side", side, "partition", p, "err", err)
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

func (k *keying) topicOf(side row.Side) string {
	if side == row.Parent {
		return k.cfg.Parent.Topic
	}
	return k.cfg.Child.Topic
}

// indexTopic is the changelog of side's index.
func (k *keying) indexTopic(side row.Side) string {
	if side == row.Parent {
		return k.cfg.Kafka.ParentIndexTopic()
	}
	return k.cfg.Kafka.ChildIndexTopic()
}

// close ends the session (leaving the group) and closes the indexes.
func (k *keying) close() {
	closeGroupClient(k.sess.Client(), leaveTimeout(k.cfg))
	k.mu.Lock()
	all := map[string][]int32{}
	for sp := range k.idx {
		all[k.topicOf(sp.side)] = append(all[k.topicOf(sp.side)], sp.part)
	}
	k.mu.Unlock()
	k.dropPartitions(nil, nil, all)
}

// run polls, keys and commits until ctx is done (then it returns nil after
// finishing the transaction in progress) or a fatal error occurs. A Kafka
// failure (restartable: a broker restart, a lost group session, a
// transaction that ran into its deadline) restarts the stage from what it
// committed, with a new session, as a restart of the process would; a
// stage that has not made progress for persistentErrors stops Run.
func (k *keying) run(ctx context.Context) error {
	size := newTxnSize(k.cfg.Kafka.TransactionRecords, k.cfg.Kafka.TransactionTimeout)
	k.health.progressed(time.Now())
	var backoff time.Duration
	for {
		err := k.session(ctx, size)
		var re *restartable
		switch {
		case err == nil || !errors.As(err, &re):
			return err
		case ctx.Err() != nil:
			return nil // stopped: what the failure left uncommitted is redone by the next start
		}
		now := time.Now()
		k.health.failed(now, err)
		if d := now.Sub(k.health.lastProgress()); d > persistentErrors {
			return fmt.Errorf("cdcjoin: keying: no progress for %v: %w", d.Round(time.Second), re.err)
		}
		backoff = min(max(2*backoff, restartBackoff), maxRestartBackoff)
		k.m.Errors.WithLabelValues("keying", "restart").Inc()
		k.log.Warn("keying stage restarting after a Kafka failure (continuing from what was committed)",
			"err", re.err, "backoff", backoff, "without_progress", now.Sub(k.health.lastProgress()).Round(time.Millisecond))
		k.close()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		if err := k.open(); err != nil {
			return err
		}
	}
}

// session runs the stage on its current session until ctx is done or an
// error.
func (k *keying) session(ctx context.Context, size *txnSize) error {
	var errs errWindow
	for {
		// A bounded poll, so that indexes of newly assigned partitions are
		// restored without waiting for their input (ready.go).
		pctx, cancel := context.WithTimeout(ctx, keyingPollWait)
		fs := k.sess.PollRecords(pctx, size.next())
		cancel()
		if ctx.Err() != nil || fs.IsClientClosed() {
			k.sess.AllowRebalance()
			return nil
		}
		hadErr, err := errs.check(fs, "keying", k.m, k.log)
		if err != nil {
			k.sess.AllowRebalance()
			return err
		}
		if hadErr {
			k.health.failed(time.Now(), fetchErr(fs))
		}
		if err := k.restoreFetched(ctx); err != nil {
			k.sess.AllowRebalance()
			if ctx.Err() != nil && errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		if hadErr && fs.NumRecords() == 0 {
			k.sess.AllowRebalance()
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if fs.NumRecords() == 0 {
			k.sess.AllowRebalance()
			if !hadErr && k.notReady() == nil {
				k.health.progressed(time.Now()) // caught up: nothing to do
			}
			continue
		}
		began := time.Now()
		k.txnKeyed, k.txnBegan = 0, time.Time{}
		err = k.transact(ctx, fs)
		k.health.busy(time.Time{})
		took := time.Since(began)
		if !k.txnBegan.IsZero() {
			took = time.Since(k.txnBegan) // without the restores before it
		}
		if err != nil && k.txnKeyed > 0 {
			// A failed transaction counts with its keying time (End may
			// have waited for a broker that did not answer).
			took = max(k.txnKeyed, min(took, k.cfg.Kafka.TransactionTimeout))
		}
		size.observe(fs.NumRecords(), took)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				k.log.Info("keying transaction failed", "records", fs.NumRecords(), "keyed_in", k.txnKeyed.Round(time.Millisecond),
					"took", time.Since(began).Round(time.Millisecond), "next_size", size.next(), "err", err)
			}
			k.sess.AllowRebalance()
			if ctx.Err() != nil && errors.Is(err, context.Canceled) {
				return nil // shutdown during a restore: nothing was committed
			}
			return err
		}
		k.health.progressed(time.Now())
		k.sess.AllowRebalance()
	}
}

// transact keys one poll's records inside one transaction and commits it.
//
// Every Kafka call of the transaction runs under tctx, which survives the
// shutdown of ctx (so that the poll in progress commits as a whole) for at
// most kafka.drain_timeout, and ends in any case txnGrace after the
// transaction's timeout (the broker has aborted it by then). Without that
// bound End can wait forever: when the group session fails during the
// transaction, franz-go's End waits for a heartbeat of the failed session
// or for the lost callback, which BlockRebalanceOnPoll holds back until
// this goroutine returns (issue 24). A failure of a Kafka call is
// restartable: the transaction is not committed (or not known to be), and
// the stage starts over from what was.
func (k *keying) transact(ctx context.Context, fs kgo.Fetches) error {
	// Bring the indexes of newly assigned partitions up to date before the
	// transaction begins: a long rebuild must not run into the
	// transaction timeout.
	var rerr error
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if side := k.dec.Side(p.Topic); rerr == nil && side != 0 && len(p.Records) > 0 {
			_, rerr = k.index(ctx, sourcePart{side, p.Partition})
			last := p.Records[len(p.Records)-1].Offset
			k.m.KeyingLag.WithLabelValues(p.Topic, strconv.Itoa(int(p.Partition))).Set(float64(max(p.HighWatermark-last-1, 0)))
		}
	})
	if rerr != nil {
		return rerr
	}
	// Fetch the schemas of Avro/Protobuf records before the transaction
	// begins too: a registry outage is waited out here, not inside a
	// transaction that would time out.
	if k.schemas != nil {
		fs.EachRecord(func(r *kgo.Record) {
			if rerr == nil {
				rerr = k.dec.Prefetch(r.Topic, r.Key, r.Value, k.headers(r))
			}
		})
	}
	if rerr != nil {
		return rerr
	}
	// The broker times the transaction from its first record on (after
	// the restores and any wait for the registry).
	began := time.Now()
	k.txnBegan = began
	k.health.busy(began)
	kc := &k.cfg.Kafka
	if err := k.sess.Begin(); err != nil {
		return k.kafkaFault(fmt.Errorf("cdcjoin: keying: begin transaction: %w", err), began)
	}
	k.perr = nil
	clear(k.logged)
	k.idPending = k.idPending[:0]
	pctx, cancel := drainContext(ctx, began.Add(kc.TransactionTimeout+txnGrace), kc.DrainTimeout)
	defer cancel()
	var err error
	fs.EachRecord(func(r *kgo.Record) {
		if err == nil {
			err = k.record(ctx, pctx, r)
		}
	})
	if err == nil {
		k.saveKeyTypes(pctx)
		k.saveTopicIDs(pctx)
	}
	k.pmu.Lock()
	if err == nil && k.perr != nil {
		err = k.kafkaFault(k.perr, began)
	}
	k.pmu.Unlock()
	k.txnKeyed = time.Since(began) // from the transaction's begin
	// End with rebalances allowed, as GroupTransactSession is meant to
	// run: a revoke or a lost session during End makes it abort (and a
	// revoke waits for a commit in progress). Under BlockRebalanceOnPoll,
	// End would wait for a heartbeat of a session that failed, or for the
	// lost callback the block holds back: until its deadline (issue 24).
	k.mu.Lock()
	k.ending = true
	k.mu.Unlock()
	defer k.endRebalanceWindow()
	k.sess.AllowRebalance()
	if err != nil {
		_, aerr := k.sess.End(pctx, kgo.TryAbort)
		k.abortTxns()
		if aerr != nil {
			k.log.Warn("abort transaction", "err", aerr)
		}
		return err
	}
	committed, err := k.sess.End(pctx, kgo.TryCommit)
	if err != nil {
		k.abortTxns()
		if pctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("not ended within kafka.transaction_timeout (%v) and %v of its start (the broker or the group session does not answer): %w",
				kc.TransactionTimeout, txnGrace, err)
		}
		return k.kafkaFault(fmt.Errorf("cdcjoin: keying: end transaction: %w", err), began)
	}
	if !committed {
		// A rebalance intervened: the session rewound to the committed
		// offsets; the index changes are discarded with the transaction.
		k.abortTxns()
		k.log.Info("transaction aborted by a rebalance; records will be re-keyed")
		return nil
	}
	k.keyTypesSaved = max(k.keyTypesSaved, k.keyTypesPending)
	for _, sp := range k.idPending {
		k.idSaved[sp] = true
	}
	k.idPending = k.idPending[:0]
	k.pmu.Lock()
	logged := maps.Clone(k.logged)
	k.pmu.Unlock()
	// Partitions whose changelogs got records without an index change
	// (the learned key types) move their positions too, so that a restart
	// does not read those records again.
	for p := range logged {
		if k.txns[p] == nil {
			k.mu.Lock()
			s := k.idx[p]
			k.mu.Unlock()
			if s != nil {
				k.txns[p] = s.Begin()
			}
		}
	}
	k.busy.publish(time.Now())
	for p, t := range k.txns {
		delete(k.txns, p)
		// The local index now reflects its changelog up to the records
		// just committed: a restart reads only what comes after.
		if next, ok := logged[p]; ok {
			if err := driver.MetaChangelog.Put(t, next); err != nil {
				t.Abort()
				return fmt.Errorf("cdcjoin: keying: %s index partition %d: %w", p.side, p.part, err)
			}
		}
		if err := t.Commit(); err != nil {
			// The changelog is ahead of the local index: drop it, a
			// restore rebuilds it.
			return fmt.Errorf("cdcjoin: keying: child index partition %d: %w", p, err)
		}
	}
	return nil
}

func (k *keying) abortTxns() {
	for p, t := range k.txns {
		t.Abort()
		delete(k.txns, p)
	}
}

// record keys one source record. Bad records follow the error policy; other
// errors are fatal.
func (k *keying) record(ctx, pctx context.Context, r *kgo.Record) error {
	// Restore the partition's index (and what the decoder learned) first,
	// so the record is decoded knowing it.
	var t *joinstate.Txn
	if side := k.dec.Side(r.Topic); side != 0 {
		var err error
		if t, err = k.txn(ctx, sourcePart{side, r.Partition}); err != nil {
			return err
		}
	}
	side, ok, err := k.dec.DecodeHeaders(r.Topic, r.Partition, r.Offset, r.Key, r.Value, k.headers(r), &k.ev)
	if err != nil {
		b, ok := driver.BadDecode(err)
		if !ok {
			return err // the schema registry failed, not the record
		}
		return k.bad(pctx, r, b)
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
			return k.bad(pctx, r, &driver.Bad{Kind: "oversized", Err: fmt.Errorf("cdcjoin: bad record at %s/%d@%d: oversized: its keyed record would be about %d bytes, more than max.message.bytes (%d) of %s: raise the topic's max.message.bytes, or leave the large column out of the select list",
				r.Topic, r.Partition, r.Offset, n, limit, topic)})
		}
	}
	k.pctx = pctx
	err = k.keyer.Key(t, side, r.Partition, &k.ev, func(in *keyed.Input) error {
		return k.produce(pctx, in)
	})
	if b, ok := driver.BadKey(err, &driver.Source{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}); ok {
		return k.bad(pctx, r, b)
	}
	var tl *tooLarge
	if errors.As(err, &tl) {
		return fmt.Errorf("cdcjoin: keying: record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	return err
}

// headers returns r's headers for the decoder (nil without any), in a
// buffer reused by the next call.
func (k *keying) headers(r *kgo.Record) []debezium.Header {
	if len(r.Headers) == 0 || k.schemas == nil {
		return nil // JSON jobs read no headers
	}
	k.hdrs = k.hdrs[:0]
	for _, h := range r.Headers {
		k.hdrs = append(k.hdrs, debezium.Header{Key: h.Key, Value: h.Value})
	}
	return k.hdrs
}

// keyedLimit returns the smaller max.message.bytes of the keyed topic and
// side's index topic (both carry the projected row), and that topic.
func (k *keying) keyedLimit(side row.Side) (string, int) {
	topic, limit := k.cfg.Kafka.KeyedTopic(), defaultMaxMessageBytes
	if n, ok := k.top.limits[topic]; ok {
		limit = n
	}
	if n, ok := k.top.limits[k.indexTopic(side)]; ok && n < limit {
		topic, limit = k.indexTopic(side), n
	}
	return topic, limit
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

// send produces rec within the current transaction unless it is larger than
// its topic accepts.
func (k *keying) send(ctx context.Context, rec *kgo.Record) error {
	if limit, ok := k.top.limits[rec.Topic]; ok {
		if n := recordSize(rec) + recordOverhead; n > limit {
			return &tooLarge{topic: rec.Topic, size: n, limit: limit}
		}
	}
	k.sess.Produce(ctx, rec, k.promise)
	return nil
}

// keyTypesKey is the reserved index-changelog key under which the keying
// stage keeps what its decoder learned about key column types
// (job.Decoder.KeyTypes); index keys are encoded tuples, which never begin
// with 0xff.
const keyTypesKey = "\xffkey-types"

// saveKeyTypes writes the decoder's learned key types to the changelogs of
// every source partition this instance holds, in the transaction in
// progress, when they changed since the last save.
func (k *keying) saveKeyTypes(ctx context.Context) {
	learned := k.dec.KeyTypesLearned()
	if learned == k.keyTypesSaved {
		return
	}
	b := k.dec.KeyTypes()
	k.mu.Lock()
	parts := make([]sourcePart, 0, len(k.idx))
	for sp := range k.idx {
		parts = append(parts, sp)
	}
	k.mu.Unlock()
	for _, sp := range parts {
		k.sess.Produce(ctx, &kgo.Record{Topic: k.indexTopic(sp.side), Partition: sp.part, Key: []byte(keyTypesKey), Value: b}, k.promise)
	}
	k.keyTypesPending = learned
}

// saveTopicIDs writes the source topic's id to the changelog of every
// partition the transaction in progress touches whose changelog does not
// have it from this session yet (topics.go).
func (k *keying) saveTopicIDs(ctx context.Context) {
	for sp := range k.txns {
		if k.idSaved[sp] {
			continue
		}
		if id := k.top.sourceIDs[k.topicOf(sp.side)]; id != "" {
			k.sess.Produce(ctx, &kgo.Record{Topic: k.indexTopic(sp.side), Partition: sp.part, Key: []byte(topicIDKey), Value: []byte(id)}, k.promise)
			k.idPending = append(k.idPending, sp)
		}
	}
}

// txn returns the transaction of source partition p's index.
func (k *keying) txn(ctx context.Context, p sourcePart) (*joinstate.Txn, error) {
	if t := k.txns[p]; t != nil {
		return t, nil
	}
	s, err := k.index(ctx, p)
	if err != nil {
		return nil, err
	}
	t := s.Begin()
	k.txns[p] = t
	return t, nil
}

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
	dir := filepath.Join(k.cfg.State.Dir, "keying", sp.side.String()+"-"+strconv.Itoa(int(p)))
	topic := k.indexTopic(sp.side)
	so := job.StateOptions(k.cfg, dir)
	so.CacheBytes = 8 << 20
	shape := driver.IndexShape(k.spec)
	s, from, err := k.reusable(so, topic, p, shape)
	if err != nil {
		return nil, err
	}
	mode := "reuse"
	if s == nil {
		mode = "rebuild"
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("cdcjoin: keying: reset %s index: %w", sp.side, err)
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
	err = readPartition(ctx, k.base, k.adm, topic, p, from, func(r *kgo.Record) error {
		n++
		if string(r.Key) == topicIDKey {
			if r.Value != nil {
				builtFrom = string(r.Value)
			}
			return nil
		}
		next = r.Offset + 1
		if string(r.Key) == keyTypesKey {
			if r.Value != nil && k.dec.KeyTypesLearned() == 0 {
				return k.dec.RestoreKeyTypes(r.Value)
			}
			return nil
		}
		switch {
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
		return nil, fmt.Errorf("cdcjoin: keying: restore %s index of partition %d: %w", sp.side, p, err)
	}
	switch {
	case mode == "reuse" && n > 0:
		mode = "catch-up"
	case mode == "rebuild" && n == 0:
		mode = "fresh" // nothing committed yet: not a rebuild
	}
	elapsed := time.Since(start)
	k.m.IndexRestoreRecords.WithLabelValues(sp.side.String(), mode).Add(float64(n))
	if cm := restoreMode(mode, n); cm != "" {
		k.m.CatchUpSeconds.WithLabelValues("keying", cm).Observe(elapsed.Seconds())
		k.m.CatchUpRecords.WithLabelValues("keying", cm).Add(float64(n))
	}
	k.log.Info("index ready", "side", sp.side, "partition", p, "mode", mode, "records", n, "seconds", elapsed.Seconds())
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
	if from < st.Offset || from > end {
		// Compacted or deleted past the position, or another log: rebuild.
		s.Close()
		return nil, 0, nil
	}
	return s, from, nil
}

// produce sends the keyed record(s) of in within the current transaction.
func (k *keying) produce(ctx context.Context, in *keyed.Input) error {
	key := keyedlog.AppendInputKey(nil, in)
	val := keyedlog.AppendCompactValue(k.spec, nil, key, in)
	topic := k.cfg.Kafka.KeyedTopic()
	k.m.KeyedRecords.WithLabelValues(in.Kind.String()).Inc()
	if in.Kind == keyed.Truncate {
		for p := int32(0); p < k.top.keyedParts; p++ {
			if err := k.send(ctx, &kgo.Record{Topic: topic, Partition: p, Key: key, Value: val}); err != nil {
				return err
			}
		}
		return nil
	}
	k.busy.add(in.JoinKey)
	return k.send(ctx, &kgo.Record{Topic: topic, Partition: keyedlog.Partition(in.JoinKey, k.top.keyedParts), Key: key, Value: val})
}

// changelog mirrors one index write of the keyer to the index's changelog
// topic (partition = the source partition), within the current transaction.
func (k *keying) changelog(side row.Side, partition int32, key, entry []byte) error {
	r := &kgo.Record{Topic: k.indexTopic(side), Partition: partition, Key: append([]byte(nil), key...)}
	if entry != nil {
		r.Value = append([]byte(nil), entry...)
	}
	return k.send(k.pctx, r)
}

func (k *keying) promise(r *kgo.Record, err error) {
	k.pmu.Lock()
	defer k.pmu.Unlock()
	if err != nil {
		if k.perr == nil {
			k.perr = fmt.Errorf("cdcjoin: keying: produce: %w", err)
		}
		return
	}
	var side row.Side
	switch r.Topic {
	case k.cfg.Kafka.ChildIndexTopic():
		side = row.Child
	case k.cfg.Kafka.ParentIndexTopic():
		side = row.Parent
	default:
		return
	}
	sp := sourcePart{side, r.Partition}
	if r.Offset >= k.logged[sp] {
		k.logged[sp] = r.Offset + 1
	}
}

// bad applies the error policy to a record that cannot be decoded or
// keyed: stop returns err (the transaction aborts, nothing past the record
// commits); dlq sends the original record with provenance headers to the
// dead-letter topic inside the transaction.
func (k *keying) bad(ctx context.Context, r *kgo.Record, b *driver.Bad) error {
	k.m.Errors.WithLabelValues("keying", b.Kind).Inc()
	src := driver.Source{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		src.Headers = append(src.Headers, deadletter.Header{Key: h.Key, Value: h.Value})
	}
	return driver.HandleBad(ctx, k.policy, "keying", &src, b)
}

// DeadLetter implements deadletter.Writer: the letter goes to the
// dead-letter topic in the transaction in progress.
func (k *keying) DeadLetter(ctx context.Context, l *deadletter.Letter) error {
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
	k.sess.Produce(ctx, d, k.promise)
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

func keysOf[V any](m map[int32]V) []int32 {
	out := make([]int32, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	return out
}

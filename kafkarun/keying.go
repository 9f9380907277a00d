package kafkarun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/stage"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// keying is the keying stage: it consumes the Debezium topics in the group
// "<group>-keying", keys every event and produces the keyed records, all in
// one Kafka transaction per poll (GroupTransactSession, keyingTxn): the
// consumed source offsets, the keyed records, the child-index changelog
// records and any dead-lettered records commit together or not at all.
//
// Indexes (keyingindex.go): the child index (child pk → current join key
// and last row) of the children on child-topic partition p lives in a
// local pebble store and is mirrored to partition p of the compacted
// "<group>.child-index" topic inside the same transactions; likewise the
// parent index (parent pk → last row, to complete TOAST placeholders
// before the row enters the compacted keyed topic) in
// "<group>.parent-index"; a temporal time join's right side has a child
// index of its own (temporal.go), the other time joins none. When this
// instance is assigned p it brings the local store up to date from that
// partition (read_committed, to its end; between polls, as soon as p's
// committed offset is fetched), so the index
// always matches the committed source offset of p: KIP-447 stable offset
// fetches make the new owner wait until the previous owner's transaction
// is resolved. Stale index entries (a child truncate only clears the index
// of the partition that carried the truncate) cost no-op tombstones, never
// wrong output.
//
// Concurrency: one goroutine (run) owns everything; the revoke/lost
// callbacks touch the index map under mu, and BlockRebalanceOnPoll keeps
// them out of a transaction in progress.
type keying struct {
	*deps
	log  *slog.Logger
	sess *kgo.GroupTransactSession
	txid string // the session's transactional id

	dec *job.Decoder
	// tk keys a time join's records instead of keyer (timejoin.go); nil
	// otherwise.
	tk      *timeKeying
	hdrs    []debezium.Header     // headers of the record being decoded
	schemas debezium.SchemaSource // resolves Avro schema ids (nil for JSON)
	keyer   *keyed.Keyer
	// A plan's decoder and keying (dec and keyer are nil then).
	pdec    *job.PlanDecoder
	src     *stage.Source
	ev      debezium.Event
	scratch []byte // for keyedSize
	// keyTypesSaved is the decoder's KeyTypesLearned as last committed to
	// the changelogs.
	keyTypesSaved int
	// idSaved: source partitions whose changelog got the topic's id in
	// this session; idPending: those the transaction in progress writes.
	idSaved   map[sourcePart]bool
	idPending []sourcePart

	// txnBegan is when the last transaction began (after the restores
	// before it; zero when it did not begin), txnKeyed how long keying its
	// records took (up to its End): its size adapts to them, failures log
	// them.
	txnBegan time.Time
	txnKeyed time.Duration

	busy   *busyKeys   // the busiest join keys (metrics)
	health stageHealth // progress and failures (fault.go)

	mu  sync.Mutex
	idx map[sourcePart]*joinstate.Store // source partition → its index
	rd  keyingReady                     // the assignment, for readiness
	// ending: a transaction's End runs with rebalances allowed (see
	// transact); indexes dropped meanwhile wait in dropped.
	ending  bool
	dropped []*joinstate.Store
}

func newKeying(d *deps, schemas debezium.SchemaSource) (*keying, error) {
	k := &keying{
		deps: d, log: d.log.With("stage", "keying"), schemas: schemas,
		idx:  map[sourcePart]*joinstate.Store{},
		busy: newBusyKeys(d.spec, d.cfg.Skew.TopKeys),
	}
	k.txid = d.cfg.Kafka.Group + "-keying-" + d.cfg.Kafka.InstanceID
	if d.cfg.IsTimeJoin() {
		var err error
		if k.tk, err = newTimeKeying(d.cfg, d.tm, d.top.keyedParts); err != nil {
			return nil, err
		}
	}
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
	if k.plan != nil {
		k.pdec = job.NewPlanDecoder(cfg)
		k.src = stage.NewSource(k.plan.p)
	} else {
		k.dec = job.NewDecoder(cfg, k.spec, k.schemas)
		k.keyer = keyed.NewKeyer(k.spec)
		// The keyed topic is compacted: parent rows must be complete in it.
		k.keyer.ResolveParents = true
	}
	k.keyTypesSaved = 0
	k.idSaved = map[sourcePart]bool{}
	k.mu.Lock()
	k.rd = keyingReady{} // until the new session's assignment
	k.mu.Unlock()
	kc := &cfg.Kafka
	opts := producerOpts(kc, k.base,
		kgo.ConsumerGroup(kc.KeyingGroup()),
		kgo.ConsumeTopics(sourceTopics(cfg, k.plan)...),
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

func (k *keying) topicOf(side row.Side) string {
	if k.plan != nil {
		return k.plan.topics[side-1]
	}
	if side == row.Parent {
		return k.cfg.Parent.Topic
	}
	return k.cfg.Child.Topic
}

// indexTopic is the changelog of side's index.
func (k *keying) indexTopic(side row.Side) string {
	if k.plan != nil {
		return indexTopic(&k.cfg.Kafka, int(side))
	}
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
	if k.tk != nil {
		k.tk.reset()
	}
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
		// restored without waiting for their input (keyingindex.go).
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
		if fs.NumRecords() == 0 && (k.tk == nil || !k.tk.due(time.Now())) {
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

// transact keys one poll's records inside one transaction (keyingTxn) and
// commits it, then the local indexes.
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
		if side := k.sideOf(p.Topic); rerr == nil && side != 0 && len(p.Records) > 0 {
			if k.indexed(side) {
				_, rerr = k.index(ctx, sourcePart{side, p.Partition})
			}
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
			if rerr == nil && k.dec != nil {
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
	tctx, cancel := drainContext(ctx, began.Add(kc.TransactionTimeout+txnGrace), kc.DrainTimeout)
	defer cancel()
	kt := k.newTxn(tctx)
	k.idPending = k.idPending[:0]
	committed := false
	if k.tk != nil {
		defer func() { k.tk.ended(committed) }()
	}
	err := kt.key(ctx, fs)
	if err == nil && k.tk != nil {
		err = k.tk.boundary(kt)
	}
	if err == nil {
		kt.saveTopicIDs()
		err = kt.produceErr(began)
	}
	k.txnKeyed = time.Since(began) // from the transaction's begin
	carried := k.committedMarks()
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
		_, aerr := k.sess.End(tctx, kgo.TryAbort)
		kt.abort()
		if aerr != nil {
			k.log.Warn("abort transaction", "err", aerr)
		}
		return err
	}
	// The offsets carry the changelogs' ends (keyingmarks.go).
	mctx := kgo.PreTxnCommitFnContext(tctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		kt.markOffsets(req, carried)
		return nil
	})
	committed, err = k.sess.End(mctx, kgo.TryCommit)
	if err != nil {
		kt.abort()
		if tctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("not ended within kafka.transaction_timeout (%v) and %v of its start (the broker or the group session does not answer): %w",
				kc.TransactionTimeout, txnGrace, err)
		}
		return k.kafkaFault(fmt.Errorf("cdcjoin: keying: end transaction: %w", err), began)
	}
	if !committed {
		// A rebalance intervened: the session rewound to the committed
		// offsets; the index changes are discarded with the transaction.
		kt.abort()
		k.log.Info("transaction aborted by a rebalance; records will be re-keyed")
		return nil
	}
	for _, sp := range k.idPending {
		k.idSaved[sp] = true
	}
	k.idPending = k.idPending[:0]
	return kt.committed()
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

// keyingPollWait bounds a keying poll, so that indexes of partitions
// assigned without input are restored without waiting for any.
const keyingPollWait = 250 * time.Millisecond

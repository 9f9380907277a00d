package kafkarun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/metrics"
	"github.com/cdcjoin/cdcjoin/sink"
)

// joinStage consumes "<group>.keyed" in the group "<group>-join"
// (read_committed) and runs one worker per owned partition.
//
// Ownership: the dispatcher goroutine (run) polls and hands each
// partition's records to its worker over a bounded queue; a full queue
// pauses fetching of that partition until it drains. Workers are created in
// the AdjustFetchOffsetsFn hook (which also chooses where each partition
// starts) and stopped in the revoke/lost callbacks, which BlockRebalanceOnPoll
// runs only between polls; stopping waits for the worker's batch in
// progress, at most kafka.drain_timeout (then the batch is abandoned
// uncommitted). Kafka offset commits (for lag monitoring) are made only between
// poll and AllowRebalance, for owned partitions, and on revocation after the
// worker stopped -- never on loss.
type joinStage struct {
	*deps
	def     stageDef // which stage (the regular join, or a plan's stage)
	log     *slog.Logger
	topic   string // the keyed topic
	newSink func(context.Context, SinkFor) (sink.Sink, error)
	cl      *kgo.Client
	// snapCl writes and reads a time join's operator-state snapshots and
	// trims (tsnap.go); nil for other joins.
	snapCl *kgo.Client
	fatal  chan error // first worker error (cap 1)

	mu        sync.Mutex
	workers   map[int32]*worker
	committed map[int32]int64 // last offset committed to Kafka per owned partition
	rd        joinReady       // the assignment, for readiness

	// restarts: workers that failed with a restartable Kafka error
	// (their forwarding transactions), restarted by the dispatcher;
	// failing: since when a partition's workers fail without committing.
	restarts map[int32]error
	failing  map[int32]time.Time

	sinks  sinkTotals  // counters of the sinks of removed partitions
	health stageHealth // the consumer's polls (fault.go)
}

func newJoinStage(d *deps, newSink func(context.Context, SinkFor) (sink.Sink, error), def stageDef) (*joinStage, error) {
	log := d.log.With("stage", "join")
	if def.n > 0 {
		log = d.log.With("stage", "s"+strconv.Itoa(def.n))
	}
	if !def.final {
		newSink = func(context.Context, SinkFor) (sink.Sink, error) { return discardSink{}, nil }
	}
	j := &joinStage{
		deps: d, def: def, log: log, topic: def.topic,
		newSink: newSink, fatal: make(chan error, 1),
		workers: map[int32]*worker{}, committed: map[int32]int64{},
		restarts: map[int32]error{}, failing: map[int32]time.Time{},
	}
	kc := &d.cfg.Kafka
	opts := append(append([]kgo.Opt(nil), d.base...),
		kgo.ConsumerGroup(def.group),
		kgo.ConsumeTopics(j.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// The keyed topic is transactional: every transaction ends in a
		// control record (its commit or abort marker). Workers see them to
		// move their positions past them, so that a caught-up partition's
		// position is its end and the lag reaches 0.
		kgo.KeepControlRecords(),
		// A paused partition, once resumed, is fetched again only after the
		// fetch in flight for the other partitions returns; when those are
		// idle that takes the whole fetch wait (franz-go's default is 5 s),
		// and a backlog's tail drained at a trickle. Keep the wait short.
		kgo.FetchMaxWait(fetchMaxWait),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(kc.SessionTimeout),
		kgo.HeartbeatInterval(heartbeat(kc.SessionTimeout)),
		kgo.RebalanceTimeout(kc.RebalanceTimeout),
		kgo.AdjustFetchOffsetsFn(j.assign),
		kgo.OnPartitionsAssigned(j.assigned),
		kgo.OnPartitionsRevoked(j.revoke),
		kgo.OnPartitionsLost(j.lose),
	)
	if d.cfg.IsTimeJoin() && def.n == 0 {
		// Before the group client: its assignments (assign) use it.
		var err error
		if j.snapCl, err = kgo.NewClient(producerOpts(kc, d.base, kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.ManualPartitioner()))...); err != nil {
			return nil, fmt.Errorf("cdcjoin: join: kafka client: %w", err)
		}
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		if j.snapCl != nil {
			j.snapCl.Close()
		}
		return nil, fmt.Errorf("cdcjoin: join: kafka client: %w", err)
	}
	j.cl = cl
	return j, nil
}

// assign starts a worker for every newly assigned partition and decides
// where it starts: at the local state's position when that is current (at
// or past the group's committed offset), else at the local position (or the
// log start without local state), applying records below the committed
// offset without emitting them.
func (j *joinStage) assign(_ context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	parts := offsets[j.topic]
	for p, o := range parts {
		committed := o.EpochOffset().Offset
		if committed < 0 {
			committed = 0
		}
		j.mu.Lock()
		old := j.workers[p]
		j.mu.Unlock()
		if old != nil { // re-assigned without a revoke (should not happen)
			old.stopAndWait()
			j.remove(p)
		}
		w, err := j.startWorker(p, committed, committed)
		if err != nil {
			j.fail(err)
			return nil, err
		}
		local := w.pos.Load()
		if local >= 0 {
			parts[p] = kgo.NewOffset().At(local).WithEpoch(-1)
		} else {
			parts[p] = kgo.NewOffset().AtStart()
		}
		mode := "reuse"
		if local < committed {
			mode = "rebuild"
		}
		j.log.Info("partition assigned", "partition", p, "committed", committed, "local", local, "mode", mode)
	}
	return offsets, nil
}

// startWorker starts partition p's worker; committed is the group's
// committed offset (forwards below it were sent), emitFrom (at least
// committed) where it starts emitting.
func (j *joinStage) startWorker(p int32, committed, emitFrom int64) (*worker, error) {
	began := time.Now()
	dir := filepath.Join(j.cfg.State.Dir, j.def.dir+strconv.Itoa(int(p)))
	st, err := joinstate.Open(job.StateOptions(j.cfg, dir))
	if err != nil {
		return nil, err
	}
	pos, has, err := st.Position(j.topic, p)
	if err != nil {
		st.Close()
		return nil, err
	}
	fromSnap := false
	if j.snapCl != nil {
		var sp int64
		if sp, fromSnap, err = j.snapshotStart(st, p, committed, pos, has); err != nil {
			st.Close()
			return nil, err
		}
		if fromSnap {
			pos, has = sp, true
		}
	}
	clock, err := driver.ReadClock(st, uint64(j.cfg.Kafka.Epoch))
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("cdcjoin: join partition %d: %w", p, err)
	}
	sf := SinkFor{Partition: p, Stream: j.topic + "/" + strconv.Itoa(int(p)) + "@" + j.def.id}
	w := &worker{
		j: j, p: p, store: st,
		open:        func(ctx context.Context) (sink.Sink, error) { return j.newSink(ctx, sf) },
		forwardFrom: committed, emitFloor: emitFrom, clock: clock, dir: dir, hasState: has, fromSnap: fromSnap, began: began,
		pacer: driver.Pacer{Now: j.hooks.now()},
		in:    make(chan []*kgo.Record, 4), stop: make(chan struct{}), done: make(chan struct{}),
	}
	t := st.Begin()
	err = w.newOperator(t, !has)
	if err == nil {
		err = t.Commit()
	} else {
		t.Abort()
	}
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("cdcjoin: join partition %d: %w", p, err)
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	if !has {
		pos = -1
	}
	w.pos.Store(pos)
	w.status.emitFrom.Store(committed)
	w.status.forwardFrom.Store(committed)
	w.status.end.Store(-1)
	w.cuTarget.Store(-1)
	w.quiet.Store(-1)
	if !w.op.Busy() {
		w.quiet.Store(pos)
	}
	w.startSnapshots() // before the worker is published: the stage's commit reads w.snap
	j.mu.Lock()
	j.workers[p] = w
	j.committed[p] = committed
	delete(j.rd.awaiting, p)
	j.setOwned()
	j.mu.Unlock()
	go w.run()
	return w, nil
}

// revoke stops the revoked partitions' workers and commits their final
// positions while the partitions are still ours.
func (j *joinStage) revoke(ctx context.Context, cl *kgo.Client, rev map[string][]int32) {
	parts := rev[j.topic]
	j.stopWorkers(parts)
	j.commit(ctx, parts)
	for _, p := range parts {
		j.remove(p)
	}
	j.forgetFailures(parts)
}

// lose stops the lost partitions' workers without committing anything.
func (j *joinStage) lose(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	parts := lost[j.topic]
	j.stopWorkers(parts)
	for _, p := range parts {
		j.remove(p)
	}
	j.forgetFailures(parts)
}

// forgetFailures drops the failure history (workerFailed) of partitions
// that are no longer ours. A worker of a later assignment starts without
// one: else its first restartable failure would be judged by the clock of
// a failure before the revoke (a broker outage that also lost the
// session), and past persistentErrors it would stop the instance.
func (j *joinStage) forgetFailures(parts []int32) {
	j.mu.Lock()
	for _, p := range parts {
		delete(j.failing, p)
		delete(j.restarts, p)
	}
	j.mu.Unlock()
}

func (j *joinStage) stopWorkers(parts []int32) {
	j.mu.Lock()
	var ws []*worker
	for _, p := range parts {
		if w := j.workers[p]; w != nil {
			ws = append(ws, w)
		}
	}
	j.mu.Unlock()
	for _, w := range ws {
		w.requestStop()
	}
	for _, w := range ws {
		<-w.done
	}
}

// storeStats reports the owned partitions' state stores (for the metrics
// collector; safe on any goroutine: a store closed meanwhile is skipped).
func (j *joinStage) storeStats() []metrics.StoreStats {
	ws := j.owned()
	out := make([]metrics.StoreStats, 0, len(ws))
	stage := j.label()
	for _, w := range ws {
		if st, ok := w.store.Stats(); ok {
			out = append(out, metrics.StoreStats{Stage: stage, Partition: strconv.Itoa(int(w.p)), Stats: st})
		}
	}
	return out
}

// owned returns the workers of the owned partitions (safe on any
// goroutine: a worker removed meanwhile has its store closed, which its
// readers tolerate).
func (j *joinStage) owned() []*worker {
	j.mu.Lock()
	defer j.mu.Unlock()
	ws := make([]*worker, 0, len(j.workers))
	for _, w := range j.workers {
		ws = append(ws, w)
	}
	return ws
}

// remove forgets a stopped worker and releases its store and sink.
func (j *joinStage) remove(p int32) {
	j.mu.Lock()
	w := j.workers[p]
	delete(j.workers, p)
	delete(j.committed, p)
	delete(j.rd.awaiting, p)
	j.setOwned()
	j.mu.Unlock()
	if w == nil {
		return
	}
	w.fwd.close()
	j.sinks.closed(&w.stats)
	if w.sink != nil {
		if err := w.sink.Close(); err != nil {
			j.log.Warn("closing sink", "partition", p, "err", err)
		}
	}
	if err := w.store.Close(); err != nil {
		j.log.Warn("closing state", "partition", p, "err", err)
	}
}

// commit commits the durable positions of parts (all owned when nil) that
// advanced past what Kafka has. Errors are logged: these commits only feed
// lag monitoring and the emit threshold of a future owner, which a lagging
// commit keeps safe (it re-emits identical versions).
func (j *joinStage) commit(ctx context.Context, parts []int32) {
	j.mu.Lock()
	if parts == nil {
		parts = keysOf(j.workers)
	}
	offs := map[int32]kgo.EpochOffset{}
	for _, p := range parts {
		w := j.workers[p]
		if w == nil {
			continue
		}
		// Only positions without work in progress: a future owner
		// rebuilding up to it owes the sink nothing there.
		if pos := w.quiet.Load(); pos > j.committed[p] {
			offs[p] = kgo.EpochOffset{Epoch: -1, Offset: pos}
		}
	}
	j.mu.Unlock()
	if len(offs) == 0 {
		return
	}
	var cerr error
	j.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{j.topic: offs}, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerr.ErrorForCode(p.ErrorCode); e != nil && cerr == nil {
					cerr = e
				}
			}
		}
	})
	if cerr != nil {
		j.log.Warn("committing join positions to Kafka", "err", cerr)
		j.m.Errors.WithLabelValues("join", "commit").Inc()
		return
	}
	j.mu.Lock()
	for p, o := range offs {
		if _, owned := j.committed[p]; owned {
			j.committed[p] = o.Offset
			if w := j.workers[p]; w != nil {
				w.snap.requestTrim() // a time join's trim may go further now
			}
		}
	}
	j.mu.Unlock()
}

// workerFailed handles the error a worker stopped with: a restartable
// Kafka failure (fault.go) has the dispatcher restart the partition's
// worker; anything else stops Run.
func (j *joinStage) workerFailed(w *worker, err error) {
	var re *restartable
	if errors.As(err, &re) {
		j.mu.Lock()
		if j.workers[w.p] == w {
			j.restarts[w.p] = err
			if _, ok := j.failing[w.p]; !ok {
				j.failing[w.p] = time.Now()
			}
		}
		j.mu.Unlock()
		return
	}
	j.fail(fmt.Errorf("cdcjoin: join partition %d: %w", w.p, err))
}

// restartFailed restarts the workers that failed with a restartable
// error: each is removed, and a new one starts from the partition's
// durable state (as a new owner would: the sink's delivered position and
// the group's committed offset decide what it emits and forwards again),
// with the partition's fetch moved back to where the new worker starts.
// Called by the dispatcher while rebalances are blocked; it returns the
// partitions restarted (their records in the poll at hand are stale), or
// a fatal error once a partition has failed without committing for
// persistentErrors.
func (j *joinStage) restartFailed(ctx context.Context, pending map[int32]*held) (map[int32]bool, error) {
	j.mu.Lock()
	todo := j.restarts
	j.restarts = map[int32]error{}
	j.mu.Unlock()
	if len(todo) == 0 {
		return nil, nil
	}
	done := map[int32]bool{}
	for p, cause := range todo {
		j.mu.Lock()
		w, committed, since := j.workers[p], j.committed[p], j.failing[p]
		j.mu.Unlock()
		if w == nil {
			continue // revoked meanwhile
		}
		if d := time.Since(since); d > persistentErrors {
			return done, fmt.Errorf("cdcjoin: join partition %d: no progress for %v: %w", p, d.Round(time.Second), cause)
		}
		j.m.Errors.WithLabelValues("join", "restart").Inc()
		j.log.Warn("join partition restarting after a Kafka failure (continuing from its durable state)", "partition", p, "err", cause)
		w.stopAndWait()
		// The sink has the changes of the failed worker's last flush
		// (its state commit failed after it): the new worker applies the
		// records below without emitting them again, and forwards them
		// again (replicas drop duplicates), as after a crash.
		flushed := w.flushed.Load()
		j.remove(p)
		delete(pending, p)
		j.cl.ResumeFetchPartitions(map[string][]int32{j.topic: {p}})
		select {
		case <-ctx.Done():
			return done, nil
		case <-time.After(restartBackoff):
		}
		nw, err := j.startWorker(p, committed, flushed)
		if err != nil {
			return done, err
		}
		from := nw.pos.Load()
		if from < 0 {
			starts, err := kadm.NewClient(j.cl).ListStartOffsets(ctx, j.topic)
			if err == nil {
				err = starts.Error()
			}
			if err != nil {
				// The worker fails on its own if the broker is away; the
				// next restart tries again.
				j.workerFailed(nw, kafkaFault(fmt.Errorf("cdcjoin: join partition %d: log start: %w", p, err)))
				continue
			}
			o, _ := starts.Lookup(j.topic, p)
			from = o.Offset
		}
		j.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{j.topic: {p: {Epoch: -1, Offset: from}}})
		done[p] = true
	}
	return done, nil
}

// progressed clears a partition's failure history once its worker
// committed.
func (j *joinStage) progressed(p int32) {
	j.mu.Lock()
	delete(j.failing, p)
	j.mu.Unlock()
}

func (j *joinStage) fail(err error) {
	select {
	case j.fatal <- err:
	default:
	}
}

// run dispatches records to workers until ctx is done or a worker fails;
// then it stops every worker (finishing batches in progress), commits their
// positions and leaves the group.
func (j *joinStage) run(ctx context.Context) error {
	defer closeGroupClient(j.cl, leaveTimeout(j.cfg))
	if j.snapCl != nil {
		defer j.snapCl.Close() // after the workers (and their snapshot goroutines) stopped
	}
	err := j.dispatch(ctx)
	j.mu.Lock()
	parts := keysOf(j.workers)
	j.mu.Unlock()
	j.stopWorkers(parts)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	j.commit(cctx, parts)
	cancel()
	for _, p := range parts {
		j.remove(p)
	}
	if err == nil {
		select {
		case err = <-j.fatal:
		default:
		}
	}
	return err
}

func (j *joinStage) dispatch(ctx context.Context) error {
	pending := map[int32]*held{}
	lastCommit := time.Now()
	max := j.cfg.State.BatchEvents
	var errs errWindow
	j.health.progressed(time.Now())
	stuckLimit := stuckAfter(j.cfg)
	for {
		select {
		case err := <-j.fatal:
			j.fail(err) // keep it for run
			return nil
		default:
		}
		if p, d, ok := j.stuck(time.Now(), stuckLimit); ok {
			return fmt.Errorf("cdcjoin: join partition %d has been in one batch for %v: stuck (the sink or the state disk does not answer); stopping", p, d.Round(time.Second))
		}
		j.deliverPending(pending)
		// Poll with a deadline so that positions reach Kafka (lag
		// monitoring) even while no new input arrives.
		wait := j.cfg.Kafka.CommitInterval
		if len(pending) > 0 {
			wait = 50 * time.Millisecond
		}
		pctx, cancel := context.WithTimeout(ctx, wait)
		fs := j.cl.PollRecords(pctx, max)
		cancel()
		if ctx.Err() != nil || fs.IsClientClosed() {
			j.cl.AllowRebalance()
			return nil
		}
		hadErr, err := errs.check(fs, "join", j.m, j.log)
		if err != nil {
			j.cl.AllowRebalance()
			return err
		}
		if hadErr {
			j.health.failed(time.Now(), fetchErr(fs))
		} else {
			j.health.progressed(time.Now())
		}
		restarted, err := j.restartFailed(ctx, pending)
		if err != nil {
			j.cl.AllowRebalance()
			return err
		}
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			if len(fp.Records) == 0 || restarted[fp.Partition] {
				return
			}
			last := fp.Records[len(fp.Records)-1].Offset
			j.setLag(fp.Partition, max64(fp.HighWatermark-last-1, 0))
			j.mu.Lock()
			w := j.workers[fp.Partition]
			j.mu.Unlock()
			if h, ok := pending[fp.Partition]; ok {
				if h.w == w {
					h.q = append(h.q, fp.Records)
					return
				}
				j.dropPending(pending, fp.Partition) // held for a worker that is gone
			}
			if w == nil {
				return // not ours (any more); the owner reads it from its position
			}
			if h := j.hooks.deliver; h != nil {
				h(j.def.n, fp.Partition)
			}
			w.status.end.Store(fp.HighWatermark)
			select {
			case w.in <- fp.Records:
			default:
				pending[fp.Partition] = &held{w: w, q: [][]*kgo.Record{fp.Records}}
				j.cl.PauseFetchPartitions(map[string][]int32{j.topic: {fp.Partition}})
			}
		})
		if time.Since(lastCommit) >= j.cfg.Kafka.CommitInterval {
			j.commit(ctx, nil)
			lastCommit = time.Now()
		}
		// Queued batches of partitions about to be revoked are dropped
		// by their stopped workers; the next owner starts from the
		// committed position. Drop our held ones too (deliverPending
		// drops those whose worker went while this ran).
		j.cl.AllowRebalance()
		j.dropStale(pending)
	}
}

// held is a partition's fetched batches that did not fit its worker's
// queue (the partition's fetching is paused meanwhile), kept for that worker
// only. A worker started since — the partition lost and assigned again by
// one rebalance, a restart after a failure — begins at its own position
// (the fetch is moved there): the held batches, fetched after the old
// worker's records, must never reach it (it would apply them past a gap,
// then skip the records of the gap as already applied).
type held struct {
	w *worker
	q [][]*kgo.Record
}

// dropPending forgets partition p's held batches and resumes its fetching.
func (j *joinStage) dropPending(pending map[int32]*held, p int32) {
	delete(pending, p)
	j.cl.ResumeFetchPartitions(map[string][]int32{j.topic: {p}})
}

// dropStale drops the held batches whose worker is no longer the
// partition's.
func (j *joinStage) dropStale(pending map[int32]*held) {
	for p, h := range pending {
		j.mu.Lock()
		w := j.workers[p]
		j.mu.Unlock()
		if w != h.w {
			j.dropPending(pending, p)
		}
	}
}

// deliverPending hands held batches to their workers while the queues
// have room, resumes fetching for partitions that caught up, and drops
// those whose worker is gone (dropStale).
func (j *joinStage) deliverPending(pending map[int32]*held) {
	j.dropStale(pending)
	for p, h := range pending {
		w, q := h.w, h.q
		for len(q) > 0 {
			select {
			case w.in <- q[0]:
				q = q[1:]
				continue
			default:
			}
			break
		}
		if len(q) == 0 {
			j.dropPending(pending, p)
		} else {
			h.q = q
		}
	}
}

// fetchMaxWait is the join consumer's fetch wait (see newJoinStage).
const fetchMaxWait = 250 * time.Millisecond

// SinkFor describes the keyed partition a sink is opened for
// (Options.NewSink).
type SinkFor struct {
	Partition int32
	// Stream names the partition's input for sinks that store delivered
	// positions with the data (clickhouse.Options.Stream): the keyed
	// topic, the partition and the topic's id, so that a recreated keyed
	// topic, whose offsets start over, is another stream.
	Stream string
}

// stuck returns a worker whose batch in progress has run for longer than
// limit, and for how long.
func (j *joinStage) stuck(now time.Time, limit time.Duration) (int32, time.Duration, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for p, w := range j.workers {
		if d := w.busyFor(now); d > limit {
			return p, d, true
		}
	}
	return 0, 0, false
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
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

func keysOf[V any](m map[int32]V) []int32 {
	out := make([]int32, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	return out
}

// setOwned publishes how many partitions the stage owns (under j.mu).
func (j *joinStage) setOwned() {
	if j.def.n > 0 {
		j.m.StageOwned.WithLabelValues(strconv.Itoa(j.def.n)).Set(float64(len(j.workers)))
		return
	}
	j.m.OwnedPartitions.Set(float64(len(j.workers)))
}

// setLag publishes partition p's consumer lag.
func (j *joinStage) setLag(p int32, lag int64) {
	if j.def.n > 0 {
		j.m.StageLag.WithLabelValues(strconv.Itoa(j.def.n), strconv.Itoa(int(p))).Set(float64(lag))
		return
	}
	j.m.ConsumerLag.WithLabelValues(strconv.Itoa(int(p))).Set(float64(lag))
}

// label is the stage's value of the metrics' stage label: "join", or a
// plan stage's number (as the state, lag and cdcjoin_stage_* series).
func (j *joinStage) label() string {
	if j.def.n > 0 {
		return strconv.Itoa(j.def.n)
	}
	return "join"
}

// name names the stage in health checks and errors: "join", or "stage n"
// of a plan.
func (j *joinStage) name() string {
	if j.def.n > 0 {
		return "stage " + strconv.Itoa(j.def.n)
	}
	return "join"
}

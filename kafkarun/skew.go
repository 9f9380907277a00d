package kafkarun

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/metrics"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/skew"
	"github.com/cdcjoin/cdcjoin/version"
)

// Hot keys in the join stage (package skew): every worker joins its
// partition through a skew.Router, which does fan-outs in chunks between
// other keys' records (paced: about half of the worker's time while both
// have work) and salts hot keys across keyed partitions. The router's
// records (forwards to replicas, layout proposals, release confirmations)
// go through the worker's forwarder in one Kafka transaction per batch,
// committed after the sink flush and before the state commit. How steps
// fit the worker's batches: see worker.
//
// Kafka offset commits (the emit threshold of a future owner of the
// partition) are made only at positions where the worker had no work in
// progress: a future owner rebuilding below that offset applies everything
// at once without emitting and, reaching it, is exactly where the previous
// owner was, with nothing owed to the sink.

// idleQuantum is how long a worker steps its work in progress per batch
// when no input is waiting.
const idleQuantum = 20 * time.Millisecond

// forwarder sends a worker's router records in a Kafka transaction per
// batch. Its transactional id is per keyed partition, so the partition's
// next owner fences a previous owner's open transaction. The client is
// made on first use. Owned by the worker goroutine (the produce promise
// runs on franz-go's).
type forwarder struct {
	opts    []kgo.Opt
	topic   string
	cl      *kgo.Client
	open    bool
	ctx     context.Context // the open transaction's: ends at its deadline
	cancel  context.CancelFunc
	timeout time.Duration // kafka.transaction_timeout
	n       int           // records in the open transaction

	mu  sync.Mutex
	err error // first produce error of the open transaction
}

func newForwarder(j *joinStage, p int32) *forwarder {
	kc := &j.cfg.Kafka
	opts := producerOpts(kc, j.base,
		kgo.TransactionalID(kc.Group+"-join-"+strconv.Itoa(int(p))),
		kgo.TransactionTimeout(kc.TransactionTimeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	)
	return &forwarder{opts: opts, topic: j.topic, ctx: context.Background(), timeout: kc.TransactionTimeout}
}

// Send implements keyedlog.Sender.
func (f *forwarder) Send(p int32, key, value, header []byte) error {
	if f.cl == nil {
		cl, err := kgo.NewClient(f.opts...)
		if err != nil {
			return kafkaFault(fmt.Errorf("cdcjoin: join: forwarding client: %w", err))
		}
		f.cl = cl
	}
	if !f.open {
		if err := f.cl.BeginTransaction(); err != nil {
			return kafkaFault(fmt.Errorf("cdcjoin: join: begin forwarding transaction: %w", err))
		}
		f.open, f.n = true, 0
		// Produce, flush and end within the transaction's deadline: a
		// broker that does not answer must not hold the worker forever.
		f.ctx, f.cancel = context.WithTimeout(context.Background(), f.timeout+txnGrace)
	}
	r := &kgo.Record{Topic: f.topic, Partition: p, Key: append([]byte(nil), key...)}
	if value != nil {
		r.Value = append([]byte(nil), value...)
	}
	if header != nil {
		r.Headers = []kgo.RecordHeader{{Key: keyedlog.ForwardHeader, Value: append([]byte(nil), header...)}}
	}
	f.n++
	f.cl.Produce(f.ctx, r, f.promise)
	return nil
}

func (f *forwarder) promise(_ *kgo.Record, err error) {
	if err == nil {
		return
	}
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
}

// commit commits the open transaction (if any) and reports how many
// records it held.
func (f *forwarder) commit(ctx context.Context) (int, error) {
	if !f.open {
		return 0, nil
	}
	f.open = false
	defer f.cancel()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(f.ctx, cancel) // the transaction's deadline
	defer stop()
	ferr := f.cl.Flush(ctx)
	f.mu.Lock()
	perr := f.err
	f.err = nil
	f.mu.Unlock()
	if ferr == nil {
		ferr = perr
	}
	if ferr != nil {
		f.cl.EndTransaction(ctx, kgo.TryAbort)
		return 0, kafkaFault(fmt.Errorf("cdcjoin: join: forward: %w", ferr))
	}
	if err := f.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		if f.ctx.Err() != nil {
			err = fmt.Errorf("not ended within kafka.transaction_timeout (%v) and %v of its start (the broker does not answer): %w", f.timeout, txnGrace, err)
		}
		return 0, kafkaFault(fmt.Errorf("cdcjoin: join: commit forwarding transaction: %w", err))
	}
	return f.n, nil
}

// abort aborts the open transaction (a failed batch).
func (f *forwarder) abort() {
	if !f.open {
		return
	}
	f.open = false
	f.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f.cl.AbortBufferedRecords(ctx)
	f.cl.EndTransaction(ctx, kgo.TryAbort)
	f.mu.Lock()
	f.err = nil
	f.mu.Unlock()
}

func (f *forwarder) close() {
	if f.cl != nil {
		f.abort()
		f.cl.Close()
	}
}

// newRouter makes the worker's router (its forwarder too) and loads what
// its state holds. fresh: the state is new (child counts are exact).
func (w *worker) newRouter(t keyed.State, fresh bool) error {
	j := w.j
	sk := &j.cfg.Skew
	cfg := skew.RouterConfig{Partition: w.p, Partitions: j.keyedParts, Hot: int64(sk.Hot()), Cool: int64(sk.Cool()),
		Salts: sk.SaltsFor(int(j.keyedParts)), Chunk: sk.ChunkRows}
	w.fwd = newForwarder(j, w.p)
	w.router = skew.NewRouter(j.spec, cfg)
	w.router.OnLayout = func(jk []byte, hot bool, children int64, salts int) {
		k := keyText(j.spec, jk)
		if hot {
			j.log.Info("hot key: salted", "partition", w.p, "key", k, "children", children, "salts", salts)
			j.sm.LayoutChanges.WithLabelValues("salted").Inc()
		} else {
			j.log.Info("hot key: cooled", "partition", w.p, "key", k, "children", children)
			j.sm.LayoutChanges.WithLabelValues("cooled").Inc()
		}
	}
	if fresh {
		if err := w.router.MarkFresh(t); err != nil {
			return err
		}
	}
	if err := w.router.Load(t); err != nil {
		return err
	}
	w.publishHot()
	return nil
}

// route applies one record of the partition (a keyed record, or one of the
// router's) through the router with out; clock is the batch's version
// clock, which epoch markers raise.
func (w *worker) route(t keyed.State, clock *version.Clock, r *kgo.Record, out keyedlog.Out) error {
	var h []byte
	for _, hd := range r.Headers {
		if hd.Key == keyedlog.ForwardHeader {
			h = hd.Value
		}
	}
	m := &w.msg
	if err := keyedlog.Decode(w.j.spec, r.Key, r.Value, h, m); err != nil {
		return fmt.Errorf("keyed record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	if m.Kind == keyedlog.KindEpoch {
		clock.Raise(r.Offset, m.Epoch)
		return nil
	}
	m.Pos, m.Version = r.Offset, clock.At(r.Offset)
	return w.router.Step(t, m, out)
}

// step advances the work in progress, in steps of skew.chunk_rows, for
// the time the pacer allows (quantum: at least that long, when no input
// waits); pos is the batch's position.
func (w *worker) step(t keyed.State, pos int64, quantum time.Duration, emit keyed.Emit) error {
	return w.pacer.Work(w.router, t, w.j.cfg.Skew.ChunkRows, quantum, w.routerOut(emit, pos))
}

// skewSnapshot gathers the owned partitions' hot keys and backlogs (safe on
// any goroutine).
func (j *joinStage) skewSnapshot() (hot []metrics.HotKeyStat, fanout int, waiting uint64) {
	j.mu.Lock()
	ws := make([]*worker, 0, len(j.workers))
	for _, w := range j.workers {
		ws = append(ws, w)
	}
	j.mu.Unlock()
	for _, w := range ws {
		s := w.hot.Load()
		if s == nil {
			continue
		}
		fanout += s.busy
		waiting += s.waiting
		for _, h := range s.keys {
			hot = append(hot, metrics.HotKeyStat{Key: keyText(j.spec, h.JoinKey), Partition: strconv.Itoa(int(w.p)),
				Children: h.Children, Salts: h.Salts, Cooling: h.Cooling})
		}
	}
	return hot, fanout, waiting
}

// busyKeys tracks the keying stage's busiest join keys (a Space-Saving
// sketch of its keyed inputs, halved every minute) and publishes the
// heaviest for the metrics collector. Add and publish run on the keying
// goroutine; snapshot on any.
type busyKeys struct {
	spec   *keyed.Spec
	top    int
	sketch *skew.SpaceSaving
	decay  time.Time
	snap   atomic.Pointer[[]metrics.BusyKeyStat]
}

func newBusyKeys(spec *keyed.Spec, top int) *busyKeys {
	return &busyKeys{spec: spec, top: top, sketch: skew.NewSpaceSaving(max(4*top, 32)), decay: time.Now()}
}

func (b *busyKeys) add(jk []byte) { b.sketch.Add(jk, 1) }

// publish ages the counts once a minute and publishes the heaviest keys.
func (b *busyKeys) publish(now time.Time) {
	for now.Sub(b.decay) >= time.Minute {
		b.sketch.Decay(0.5)
		b.decay = b.decay.Add(time.Minute)
	}
	top := b.sketch.Top(b.top)
	out := make([]metrics.BusyKeyStat, len(top))
	for i, h := range top {
		out[i] = metrics.BusyKeyStat{Key: keyText(b.spec, []byte(h.Key)), Events: h.Count}
	}
	b.snap.Store(&out)
}

func (b *busyKeys) snapshot() []metrics.BusyKeyStat {
	if s := b.snap.Load(); s != nil {
		return *s
	}
	return nil
}

// publishHot publishes the router's hot keys and backlog for the metrics
// collector.
func (w *worker) publishHot() {
	keys, waiting := w.router.Backlog()
	w.hot.Store(&hotSnapshot{keys: w.router.HotKeys(), busy: keys, waiting: waiting})
}

// hotSnapshot is what a worker last published about its hot keys.
type hotSnapshot struct {
	keys    []skew.HotKey
	busy    int
	waiting uint64
}

// keyText renders an encoded join key for logs and metrics.
func keyText(spec *keyed.Spec, jk []byte) string {
	vals, _, err := row.DecodeKey(nil, jk, len(spec.ParentKey))
	if err != nil {
		return fmt.Sprintf("%x", jk)
	}
	var b []byte
	for i, v := range vals {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, v.Text()...)
	}
	return string(b)
}

package kafkarun

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The router's records (forwards to replicas, layout proposals, release
// confirmations) go through the worker's forwarder in one Kafka
// transaction per batch, committed after the sink flush and before the
// state commit (driver.Commit's AfterEnd).

// forwarder sends a worker's router records in a Kafka transaction per
// batch. Its transactional id is per keyed partition, so the partition's
// next owner fences a previous owner's open transaction. The client is
// made on first use. Owned by the worker goroutine (the produce promise
// runs on franz-go's).
type forwarder struct {
	opts    []kgo.Opt
	topic   string
	next    string // the next stage's keyed topic ("": none)
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
		kgo.TransactionalID(j.def.txid+strconv.Itoa(int(p))),
		kgo.TransactionTimeout(kc.TransactionTimeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	)
	return &forwarder{opts: opts, topic: j.topic, next: j.def.next, ctx: context.Background(), timeout: kc.TransactionTimeout}
}

// Send implements keyedlog.Sender: to the stage's own keyed topic.
func (f *forwarder) Send(p int32, key, value, header []byte) error {
	return f.send(f.topic, p, key, value, header)
}

// nextStage sends to the next stage's keyed topic in the forwarder's
// transaction (keyedlog.Out.Next).
type nextStage struct{ f *forwarder }

func (n nextStage) Send(p int32, key, value, header []byte) error {
	return n.f.send(n.f.next, p, key, value, header)
}

// Next returns the sender to the next stage's keyed topic (nil: none).
func (f *forwarder) Next() keyedlog.Sender {
	if f.next == "" {
		return nil
	}
	return nextStage{f}
}

func (f *forwarder) send(topic string, p int32, key, value, header []byte) error {
	r := &kgo.Record{Topic: topic, Partition: p, Key: append([]byte(nil), key...)}
	if value != nil {
		r.Value = append([]byte(nil), value...)
	}
	if header != nil {
		r.Headers = []kgo.RecordHeader{{Key: keyedlog.ForwardHeader, Value: append([]byte(nil), header...)}}
	}
	return f.produce(r)
}

// produce sends r in the batch's transaction: a record of a keyed log, or
// a dead letter (worker.reject).
func (f *forwarder) produce(r *kgo.Record) error {
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

package kafkarun

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// plainSink is a sink that is neither a sink.Batcher nor a
// sink.Positioned (the JSON-lines sink's kind).
type plainSink struct{}

func (plainSink) Write(context.Context, []row.Change) error { return nil }
func (plainSink) Flush(context.Context) error               { return nil }
func (plainSink) Close() error                              { return nil }

// positionedSink is a plainSink that is a sink.Positioned.
type positionedSink struct{ plainSink }

func (positionedSink) Delivered(context.Context) (sink.Delivery, error) { return sink.Delivery{}, nil }
func (positionedSink) Begin(int64) error                                { return nil }
func (positionedSink) Replaying() bool                                  { return false }
func (positionedSink) End(context.Context, int64) error                 { return nil }

// TestQueuedDeliveries: a batch of a sink without sink.Batcher takes the
// deliveries already queued for its worker while it holds fewer than
// state.batch_events records, without waiting, and none for a Positioned
// sink or a worker asked to stop.
func TestQueuedDeliveries(t *testing.T) {
	cfg := &config.Config{}
	cfg.State.BatchEvents = 100
	newWorker := func(s sink.Sink) *worker {
		w := &worker{j: &joinStage{deps: &deps{cfg: cfg}}, in: make(chan []*kgo.Record, 4), stop: make(chan struct{})}
		w.out = driver.NewOutput(s, writeChunk)
		w.ctx, w.cancel = context.WithCancel(context.Background())
		t.Cleanup(w.cancel)
		w.caught.Store(true)
		return w
	}
	d := []*kgo.Record{{Offset: 7}}
	w := newWorker(plainSink{})
	b := &batch{w: w, applied: 99}
	if got := w.queued(b); got != nil {
		t.Fatalf("nothing queued: got %v", got)
	}
	w.in <- d
	if got := w.queued(b); len(got) != 1 || got[0] != d[0] {
		t.Fatalf("99 of 100 records applied, a delivery queued: got %v", got)
	}
	w.in <- d
	b.applied = 100
	if got := w.queued(b); got != nil || len(w.in) != 1 {
		t.Fatalf("at state.batch_events: took %v (queue %d)", got, len(w.in))
	}
	b.applied = 0
	w.requestStop()
	if got := w.queued(b); got != nil || len(w.in) != 1 {
		t.Fatalf("stopping: took %v (queue %d)", got, len(w.in))
	}
	w = newWorker(positionedSink{})
	w.in <- d
	if got := w.queued(&batch{w: w}); got != nil {
		t.Fatalf("Positioned sink: took %v", got)
	}
}

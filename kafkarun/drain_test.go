package kafkarun_test

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// outageSink is a partition's sink during a ClickHouse outage: writes are
// accepted, flushes wait (as the ClickHouse sink retries) until their
// context ends.
type outageSink struct {
	flushing *atomic.Int32
}

func (s outageSink) Write(context.Context, []row.Change) error { return nil }
func (s outageSink) Close() error                              { return nil }
func (s outageSink) Flush(ctx context.Context) error {
	s.flushing.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// TestDrainDeadline: SIGTERM while the sink is down. Every partition's
// batch waits on its flush; Run returns within kafka.drain_timeout (1 s
// here), the batches left uncommitted for the next run (before: workers
// drained with context.Background(), so a shutdown or a revoke waited for
// the sink's whole retry window).
func TestDrainDeadline(t *testing.T) {
	h := smallHistory(t, 61, 1000)
	c := newCluster(t, 3)
	produce(t, c.ListenAddrs(), h.Records)
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir()})
	cfg.Kafka.DrainTimeout = time.Second
	var flushing atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- kafkarun.Run(ctx, cfg, kafkarun.Options{
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			NewSink: func(context.Context, kafkarun.SinkFor) (sink.Sink, error) {
				return outageSink{&flushing}, nil
			}})
	}()
	waitFor(t, 60*time.Second, "a flush waiting on the sink", func() bool { return flushing.Load() > 0 })
	stopped := time.Now()
	cancel()
	select {
	case err := <-done:
		t.Logf("Run returned %v after %v", err, time.Since(stopped).Round(time.Millisecond))
	case <-time.After(45 * time.Second):
		t.Fatal("Run did not return within 45 s of the stop with the sink down (drain timeout 1 s)")
	}
}

// concurrencySink counts how many partitions' flushes run at once.
type concurrencySink struct {
	mu           *sync.Mutex
	active, peak *int
}

func (s concurrencySink) Write(context.Context, []row.Change) error { return nil }
func (s concurrencySink) Close() error                              { return nil }
func (s concurrencySink) Flush(context.Context) error {
	s.mu.Lock()
	*s.active++
	*s.peak = max(*s.peak, *s.active)
	s.mu.Unlock()
	time.Sleep(100 * time.Millisecond) // a slow INSERT
	s.mu.Lock()
	*s.active--
	s.mu.Unlock()
	return nil
}

// TestParallelFlushes: with a sink per keyed partition (Options.NewSink,
// what run uses for ClickHouse) partitions flush at the same time (before,
// run shared one sink behind a mutex held across every partition's
// flush).
func TestParallelFlushes(t *testing.T) {
	h := smallHistory(t, 62, 2000)
	c := newCluster(t, 3)
	produce(t, c.ListenAddrs(), h.Records)
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir(), batch: 50})
	var mu sync.Mutex
	var active, peak int
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- kafkarun.Run(ctx, cfg, kafkarun.Options{
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			NewSink: func(context.Context, kafkarun.SinkFor) (sink.Sink, error) {
				return concurrencySink{&mu, &active, &peak}, nil
			}})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor(t, 60*time.Second, "two partitions flushing at once", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return peak >= 2
	})
}

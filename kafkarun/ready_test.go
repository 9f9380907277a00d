package kafkarun_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/metrics"
)

// TestReadiness: /readyz (metrics.Readiness) answers ready only once every
// owned partition caught up. A fresh first start reports no rebuild or
// catch-up; a restart with its state intact is ready without one; a restart
// that lost one join partition's state and one keying index is ready only
// after both were rebuilt (the rebuilds' metrics are already there at the
// first ready answer), and the output still equals the oracle without
// re-emitting committed input.
func TestReadiness(t *testing.T) {
	seed := clusterSeed(t)
	h := smallHistory(t, seed, 3000)
	c := newCluster(t, 3)
	produce(t, c.ListenAddrs(), h.Records)
	m := newModel()
	dir := t.TempDir()
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: dir})
	want := oracle(h, false)

	// run starts an instance and returns the catch-up counts (by
	// stage/mode) seen at its first ready answer, and how long that took.
	run := func(name string) (map[string]float64, time.Duration) {
		t.Helper()
		reg := prometheus.NewRegistry()
		var ready metrics.Readiness
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		if testing.Verbose() {
			log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		}
		began := time.Now()
		go func() {
			done <- kafkarun.Run(ctx, cfg, kafkarun.Options{Sink: m.sink(), Registry: reg, Ready: &ready, Logger: log})
		}()
		var at map[string]float64
		var took time.Duration
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(2 * time.Millisecond) {
			if ready.Ready() {
				took = time.Since(began)
				at = catchUps(t, reg)
				break
			}
			if time.Now().After(deadline) {
				cancel()
				<-done
				t.Fatalf("seed %d: %s: not ready after 60s: %v", seed, name, ready.NotReady())
			}
		}
		diff, err := m.waitEqual(want, stallLimit, nil)
		cancel()
		if rerr := <-done; rerr != nil || err != nil || diff != "" {
			t.Fatalf("seed %d: %s: run %v, wait %v\n%s", seed, name, rerr, err, diff)
		}
		if ready.Ready() {
			t.Errorf("seed %d: %s: still ready after Run returned", seed, name)
		}
		t.Logf("%s: ready after %v; catch-ups at that moment %v; all %v", name, took.Round(time.Millisecond), at, catchUps(t, reg))
		return at, took
	}

	if got, _ := run("fresh"); len(got) != 0 {
		t.Errorf("seed %d: a fresh first start reported catch-ups %v", seed, got)
	}
	if got, _ := run("intact"); len(got) != 0 {
		t.Errorf("seed %d: a restart with intact state reported catch-ups %v", seed, got)
	}
	// Lose join partition 0's state and the child index of partition 0.
	for _, d := range []string{"partition-0", filepath.Join("keying", "child-0")} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := run("lost state")
	if got["join/rebuild"] != 1 || got["keying/rebuild"] != 1 {
		t.Errorf("seed %d: ready before the lost state was rebuilt: catch-ups at the first ready answer %v (want join/rebuild and keying/rebuild 1)", seed, got)
	}
	if m.rmt.Stale+m.rmt.Repeats != 0 {
		t.Errorf("seed %d: the rebuild re-emitted changes for committed input (stale %d, repeats %d)", seed, m.rmt.Stale, m.rmt.Repeats)
	}
}

// catchUps returns cdcjoin_catchup_seconds' observation counts by
// "stage/mode" (series with none left out).
func catchUps(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "cdcjoin_catchup_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			if n := mt.GetHistogram().GetSampleCount(); n > 0 {
				out[label(mt, "stage")+"/"+label(mt, "mode")] += float64(n)
			}
		}
	}
	return out
}

// TestReadinessSlowFetch: an instance restarted on a state that lost join
// partition 0 (rebuilt in bulk, or row by row with state.bulk_load_mb -1),
// whose fetches are slow (the first delivery of every partition's records
// held for longer than the rebuild's and the catch-up's idle waits), ends
// each partition's catch-up only at or past its committed position: idle
// with records still to read below it is not caught up. (Before, a
// partition that had waited catchUpIdle for input was declared caught up
// wherever it was, and /readyz said ready with the state behind; a bulk
// rebuild idle for rebuildStartIdle ended with nothing and went row by
// row.) The output equals the oracle without re-emitting committed input.
func TestReadinessSlowFetch(t *testing.T) {
	for _, tc := range []struct {
		name string
		bulk bool
		hold time.Duration
	}{
		{"row-by-row", false, 5 * time.Second}, // > catchUpIdle (2 s)
		{"bulk", true, 13 * time.Second},       // > rebuildStartIdle (10 s)
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := clusterSeed(t)
			h := smallHistory(t, seed, 2000)
			c := newCluster(t, 3)
			produce(t, c.ListenAddrs(), h.Records)
			m := newModel()
			dir := t.TempDir()
			cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: dir})
			if !tc.bulk {
				cfg.State.BulkLoadMB = -1
			}
			want := oracle(h, false)
			start := func(o kafkarun.Options) (*instance, func()) {
				ctx, cancel := context.WithCancel(context.Background())
				in := newInstance(cfg, cancel)
				o.Sink, o.Ready = m.sink(), in.ready
				o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
				go func() {
					defer close(in.done)
					in.err = kafkarun.Run(ctx, cfg, o)
				}()
				return in, func() {
					if err := in.stop(t); err != nil {
						t.Fatalf("seed %d: stop: %v", seed, err)
					}
				}
			}
			in, stop := start(kafkarun.Options{})
			if diff, err := m.waitEqual(want, stallLimit, in); err != nil || diff != "" {
				t.Fatalf("seed %d: first run (%v):\n%s", seed, err, diff)
			}
			stop()
			if err := os.RemoveAll(filepath.Join(dir, "partition-0")); err != nil {
				t.Fatal(err)
			}

			var mu sync.Mutex
			held := map[int32]bool{}
			var caught []string
			var early []string
			o := kafkarun.Options{Registry: prometheus.NewRegistry()}
			kafkarun.SetRebuildHooks(&o, kafkarun.RebuildHooks{
				Deliver: func(_ int, p int32) {
					mu.Lock()
					first := !held[p]
					held[p] = true
					mu.Unlock()
					if first {
						time.Sleep(tc.hold) // the fault: a slow fetch
					}
				},
				Caught: func(_ int, p int32, pos, target int64) {
					mu.Lock()
					defer mu.Unlock()
					caught = append(caught, fmt.Sprintf("%d@%d/%d", p, pos, target))
					if pos < target {
						early = append(early, fmt.Sprintf("partition %d at %d of %d", p, pos, target))
					}
				},
			})
			in, stop = start(o)
			waitFor(t, 3*time.Minute, "partition 0's catch-up to end", func() bool {
				mu.Lock()
				defer mu.Unlock()
				for _, c := range caught {
					if strings.HasPrefix(c, "0@") {
						return true
					}
				}
				return false
			})
			mu.Lock()
			if !held[0] {
				t.Errorf("seed %d: partition 0's fetch was never held: the fault did not fire", seed)
			}
			if len(early) > 0 {
				t.Errorf("seed %d: caught up below the committed position while records were still to read: %v", seed, early)
			}
			t.Logf("seed %d: catch-ups ended (partition@position/target): %v; fetches held %v for %v", seed, caught, held, tc.hold)
			mu.Unlock()
			if diff, err := m.waitEqual(want, stallLimit, in); err != nil || diff != "" {
				t.Fatalf("seed %d: after the restart (%v):\n%s", seed, err, diff)
			}
			stop()
			if m.rmt.Stale+m.rmt.Repeats != 0 {
				t.Errorf("seed %d: the catch-up re-emitted changes for committed input (stale %d, repeats %d)", seed, m.rmt.Stale, m.rmt.Repeats)
			}
		})
	}
}

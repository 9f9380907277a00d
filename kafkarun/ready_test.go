package kafkarun_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
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

package kafkarun_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cdcjoin/cdcjoin/kafkarun"
)

// TestRestartReusesIndexes: an instance restarted with its state intact
// reads only the index changelog records written after its local indexes'
// positions (none rebuilt from the log start), and the output stays equal
// to the oracle; a fresh state rebuilds them.
func TestRestartReusesIndexes(t *testing.T) {
	seed := clusterSeed(t)
	h := smallHistory(t, seed, 3000)
	c := newCluster(t, 3)
	half := len(h.Records) / 2
	produce(t, c.ListenAddrs(), h.Records[:half])
	m := newModel()
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir()})
	runOnce := func(wantCaughtUp int) map[string]float64 {
		t.Helper()
		reg := prometheus.NewRegistry()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- kafkarun.Run(ctx, cfg, kafkarun.Options{Sink: m.sink(), Registry: reg}) }()
		deadline := time.Now().Add(60 * time.Second)
		for {
			m.mu.Lock()
			n := m.changes
			m.mu.Unlock()
			if n >= wantCaughtUp {
				break
			}
			if time.Now().After(deadline) {
				cancel()
				<-done
				t.Fatalf("seed %d: no progress: %d changes", seed, n)
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(time.Second) // let the keying stage finish its transactions
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("seed %d: Run: %v", seed, err)
		}
		return restoreCounts(t, reg)
	}
	first := runOnce(1)
	if first["rebuild"] == 0 && first["reuse"] == 0 {
		t.Fatalf("seed %d: first start restored nothing: %v", seed, first)
	}
	produce(t, c.ListenAddrs(), h.Records[half:])
	second := runOnce(m.changes + 1)
	if second["rebuild"] != 0 {
		t.Fatalf("seed %d: a restart with intact state rebuilt indexes from the log start (%v)", seed, second)
	}
	if diff, err := m.waitEqual(oracle(h, false), time.Second, nil); err != nil || diff != "" {
		// The second run may have stopped before the end: finish.
		in := start(t, cfg, m.sink())
		diff, err = m.waitEqual(oracle(h, false), 60*time.Second, in)
		in.stop(t)
		if err != nil || diff != "" {
			t.Fatalf("seed %d: %v\n%s", seed, err, diff)
		}
	}
}

// restoreCounts sums cdcjoin_keying_index_restore_records_total by mode,
// counting a restore that read nothing as one.
func restoreCounts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "cdcjoin_keying_index_restore_records_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			mode := label(mt, "mode")
			out[mode] += mt.GetCounter().GetValue() + 1
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

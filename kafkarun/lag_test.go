package kafkarun_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/cdcjoin/cdcjoin/kafkarun"
)

// gaugeValues returns the values of the gauge name in reg, by the value of
// its label.
func gaugeValues(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					key = l.GetValue()
				}
			}
			out[key] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestLagReachesZero: once the join caught up, its committed offsets equal
// the keyed topic's end offsets and cdcjoin_join_consumer_lag_records is 0
// for every partition. The keyed topic is transactional, so every
// partition ends in a commit marker (before: positions stopped at the last
// data record + 1 and the lag stayed at 1 forever).
func TestLagReachesZero(t *testing.T) {
	h := smallHistory(t, 41, 1500)
	c := newCluster(t, 3)
	produce(t, c.ListenAddrs(), h.Records)
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir()})
	m := newModel()
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- kafkarun.Run(ctx, cfg, kafkarun.Options{Sink: m.sink(), Registry: reg,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	want := oracle(h, false)
	if diff, err := m.waitEqual(want, stallLimit, nil); err != nil || diff != "" {
		t.Fatalf("%v\n%s", err, diff)
	}
	adm := kadm.NewClient(mustClient(t, c))
	topic := cfg.Kafka.KeyedTopic()
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for {
		ends, err := adm.ListEndOffsets(context.Background(), topic)
		if err != nil {
			t.Fatal(err)
		}
		offs, err := adm.FetchOffsets(context.Background(), cfg.Kafka.JoinGroup())
		if err != nil {
			t.Fatal(err)
		}
		lags := gaugeValues(t, reg, "cdcjoin_join_consumer_lag_records", "partition")
		ok := len(lags) > 0
		last = ""
		ends.Each(func(e kadm.ListedOffset) {
			o, has := offs.Lookup(topic, e.Partition)
			if !has || o.At != e.Offset {
				ok = false
				last += " partition " + itoa(int64(e.Partition)) + ": committed " + itoa(o.At) + " of end " + itoa(e.Offset) + ";"
			}
		})
		for p, l := range lags {
			if l != 0 {
				ok = false
				last += " lag gauge of partition " + p + " is " + itoa(int64(l)) + ";"
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("caught up, but after 30s:%s", last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package kafkarun_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/timejoin"
	"github.com/cdcjoin/cdcjoin/timejoin/timegen"
)

// TestTimeSQLRun: Run accepts a time join written as SQL (tables with
// time + query + watermark) — it is the same job object as the time_join
// form — and its output on kfake converges to the SQL over the records
// that are not late, LEFT (padded rows included).
func TestTimeSQLRun(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 19))
	const ms = 1000
	s := &timejoin.Spec{Kind: timejoin.Interval, Join: timejoin.LeftOuter, Lower: -2 * ms, Upper: 5 * ms,
		OutOfOrderness: 3 * ms, AllowedLateness: 1 * ms, IdleTimeout: 2e6, LeftWidth: 1, RightWidth: 1,
		Out: []timejoin.Column{{From: timejoin.FromLeft}, {From: timejoin.FromRight}}}
	const parts = 3
	events := timegen.Generate(rng, timegen.Options{Kind: s.Kind, N: 800, OutOfOrderness: 3, Scale: ms, Partitions: parts, Keys: 20})
	events, flushAt := timegen.WithFlush(events, parts, 1000*(abs(s.Upper)+abs(s.Lower)+ms))
	recs := timegen.Encode(events, timegen.EncodeOptions{Seed: rng.Uint64()})
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, timegen.LeftTopic), kfake.SeedTopics(parts+1, timegen.RightTopic),
		kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	y := timegen.SQLConfig(timegen.ConfigOptions{Name: "tj", Spec: s, StateDir: t.TempDir(), DLQ: true,
		Extra: fmt.Sprintf("kafka:\n  keyed_partitions: 3\n  brokers: [%s]\n  instance_id: i0\n  session_timeout: 6s\n  commit_interval: 100ms\n  transaction_timeout: 10s\n",
			strings.Join(brokers, ", "))}, "")
	cfg, err := config.Parse([]byte(y), "tj.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	if !cfg.TimeSQL() || !cfg.IsTimeJoin() {
		t.Fatal("not a time join written as SQL")
	}
	m := &seqModel{spec: s, rows: map[string]map[uint64]string{}}
	dlq := newTopicReader(t, brokers, "tj.dlq")
	defer dlq.close()
	produceTime(t, brokers, recs)
	a := runTime(t, cfg, m, false)
	defer a.cancel()
	eFinal := flushAt - s.OutOfOrderness - s.AllowedLateness
	var got, want []string
	waitFor(t, convergeLimit, "the output to equal the SQL over the records that are not late", func() bool {
		late := m.lateEvents(t, dlq.records(), recs, events, s)
		want, got = timegen.SQL(s, events, late, eFinal), m.sorted()
		return slices.Equal(got, want) || a.stopped()
	})
	if !slices.Equal(got, want) {
		t.Fatalf("seed %d: run stopped (%v) with %d rows, want %d:\n%s", seed, a.err, len(got), len(want), strings.Join(testkit.SortedDiff(got, want, 20), "\n"))
	}
	if !slices.ContainsFunc(got, func(r string) bool { return strings.Contains(r, "null") }) {
		t.Fatalf("seed %d: no padded row among %d", seed, len(got))
	}
	if err := m.failure(); err != nil {
		t.Fatal(err)
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("run: %v", err)
	}
}

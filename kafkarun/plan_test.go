package kafkarun_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
	"github.com/cdcjoin/cdcjoin/stage"
)

// The run oracle of multi-stage plans: a seeded cdcgen four-table history
// (every hard case at every table) on kfake, run by `run` as one join
// stage per plan stage (own keyed topic and consumer group, intermediate
// results keyed through Kafka), with a crash of the process (a sink that
// fails after the insert, before the commit: Run stops, its state is what
// it committed), a restart, and a second instance joining (the stages'
// partitions rebalance, moved ones are rebuilt from their logs) while the
// first stops. The sink's final rows must equal, as a multiset keyed by
// the output row key, what `replay` (engine) emits for the same records,
// which TestMultiOracle proves equal to PostgreSQL's answer.

// planRunConfig is the Kafka job of sql over the Schema4 tables it names.
func planRunConfig(t testing.TB, sql, brokers, stateDir, instance string, batch int) *config.Config {
	t.Helper()
	var b strings.Builder
	b.WriteString(testkit.SQLJob("multi", sql))
	fmt.Fprintf(&b, "state: {dir: %s, sync: false, batch_events: %d}\n", stateDir, batch)
	fmt.Fprintf(&b, `kafka:
  keyed_partitions: 4
  brokers: [%s]
  instance_id: %s
  session_timeout: 6s
  commit_interval: 100ms
  transaction_timeout: 10s
`, brokers, instance)
	cfg, err := config.Parse([]byte(b.String()), "multi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Plan() == nil {
		t.Fatal("not a multi-stage plan")
	}
	return cfg
}

// replayLive is what `replay` emits for the records of cfg's topics, as the
// live rows of an upsert table.
func replayLive(t testing.TB, cfg *config.Config, recs []cdcgen.Record) []cdcgen.JoinedRow {
	t.Helper()
	rmt := cdcgen.NewReplacingMergeTree()
	c := *cfg
	c.State.Dir = "/replay"
	e, err := engine.Open(&c, engine.Options{FS: vfs.NewMem(), Sink: sink.Func(func(ch *row.Change) error {
		_, err := rmt.ApplyChange(ch)
		return err
	})})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	replayInto(t, e, recs, planTopics(cfg))
	return rmt.Live()
}

// planHistory generates opts' history for the query sql and returns it
// with replay's answer over it. A history whose answer has too few rows
// compares little: the next seed's is taken (seed+1000, logged; at most
// tries; replay's answer does not depend on the brokers or the batch
// size); opts.Seed is the one taken.
func planHistory(t *testing.T, opts *cdcgen.MultiOptions, sql string, tries int) (*cdcgen.MultiHistory, []cdcgen.JoinedRow) {
	t.Helper()
	probe := planRunConfig(t, sql, "127.0.0.1:9", t.TempDir(), "probe", 100)
	seed := opts.Seed
	for try := 0; ; try++ {
		opts.Seed = seed + int64(try)*1000
		h, err := cdcgen.GenerateMulti(*opts)
		if err != nil {
			t.Fatal(err)
		}
		want := replayLive(t, probe, h.Records)
		if len(want) >= 20 {
			return h, want
		}
		if try == tries-1 {
			t.Fatalf("seed %d: replay gives %d rows: too few for a meaningful comparison", opts.Seed, len(want))
		}
		t.Logf("seed %d: replay gives %d rows; taking seed %d's history", opts.Seed, len(want), opts.Seed+1000)
	}
}

// schema4Cluster is a kfake cluster of 3 brokers with the Schema4 tables'
// topics of parts partitions each, closed when the test ends.
func schema4Cluster(t testing.TB, parts int) *kfake.Cluster {
	t.Helper()
	var topics []string
	for _, tb := range cdcgen.Schema4() {
		topics = append(topics, tb.Topic())
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(int32(parts), topics...), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// replayInto applies the records of tables' topics to eng and commits.
func replayInto(t testing.TB, eng *engine.Engine, recs []cdcgen.Record, tables map[string]bool) {
	t.Helper()
	ctx := context.Background()
	for _, r := range recs {
		if !tables[r.Topic] {
			continue
		}
		rec := engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
		if err := eng.Process(ctx, &rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func planTopics(cfg *config.Config) map[string]bool {
	topics := map[string]bool{}
	for _, n := range cfg.TableNames() {
		topics[cfg.Tables[n].Topic] = true
	}
	return topics
}

func TestPlanRunOracle(t *testing.T) {
	seed := clusterSeed(t)
	// Chains and stars of three and four tables, INNER/LEFT/RIGHT/FULL,
	// conditions in ON and WHERE, materializers (FULL and RIGHT joins pad
	// rows at keys that move).
	names := []string{"chain-full-full", "chain-left-right", "star-left-full", "star-right-inner", "chain4-outer", "many-to-many"}
	if testing.Short() {
		names = []string{"chain-full-full", "star-left-full"}
	}
	for i, name := range names {
		t.Run(name, func(t *testing.T) {
			// One source partition with truncates (their order against
			// the other records is then the history's), three without.
			runPlanOracle(t, seed+int64(i), testkit.MultiQueries[name], i%2 == 0, false)
		})
	}
}

// TestPlanRunNegativeControl: the oracle comparison catches a run that
// misses the tail of one table's topic.
func TestPlanRunNegativeControl(t *testing.T) {
	runPlanOracle(t, clusterSeed(t), testkit.MultiQueries["chain-full-full"], true, true)
}

func runPlanOracle(t *testing.T, seed int64, sql string, truncates, control bool) {
	opts := cdcgen.DefaultMultiOptions(seed)
	opts.Ops = 1500
	if testing.Short() {
		opts.Ops = 600
	}
	opts.Truncates = truncates
	if truncates {
		opts.Partitions = 1
	}
	h, want := planHistory(t, &opts, sql, 5)
	seed = opts.Seed
	t.Logf("seed %d: %s", seed, h.Stats)
	rng := rand.New(rand.NewSource(seed))
	c := schema4Cluster(t, opts.Partitions)
	recs := h.Records
	cfg0 := planRunConfig(t, sql, brokersOf(c), t.TempDir(), "i0", 1+rng.Intn(300))
	if control {
		// The run never sees the last records of the first table (enough
		// of them that replay's own answer changes).
		first := cfg0.Tables[cfg0.Plan().Tables[0].Name].Topic
		for cdcgen.Diff(want, replayLive(t, cfg0, recs), 1) == "" {
			n := 0
			for i := len(recs) - 1; i >= 0 && n < 40; i-- {
				if recs[i].Topic == first {
					recs = append(recs[:i:i], recs[i+1:]...)
					n++
				}
			}
			if n == 0 {
				t.Fatalf("seed %d: negative control: no records of %s left to cut", seed, first)
			}
		}
	}
	half := len(recs) / 2
	produce(t, c.ListenAddrs(), recs[:half])
	m := newModel()
	// First instance; its sink fails after the insert of its 3rd-8th
	// flush (a crash before the state commit): Run stops.
	crash := m.sink()
	crash.failAt, crash.failApplied = 1+rng.Intn(3), true
	in := start(t, cfg0, crash)
	select {
	case <-in.done:
		if in.err == nil {
			t.Fatalf("seed %d: Run returned nil after the injected sink failure", seed)
		}
		t.Logf("seed %d: crashed as injected: %v", seed, in.err)
	case <-time.After(time.Minute):
		// Fewer flushes than failAt (a selective query): a clean stop.
		if err := in.stop(t); err != nil {
			t.Fatalf("seed %d: Run: %v", seed, err)
		}
		t.Logf("seed %d: no crash (fewer than %d flushes in the first half)", seed, crash.failAt)
	}
	// Restart on the same state, the rest of the history arrives, and a
	// second instance joins.
	in = start(t, cfg0, m.sink())
	produce(t, c.ListenAddrs(), recs[half:])
	cfg1 := planRunConfig(t, sql, brokersOf(c), t.TempDir(), "i1", cfg0.State.BatchEvents)
	in1 := start(t, cfg1, m.sink())
	stopped := false
	var once sync.Once
	defer once.Do(func() { in1.stop(t) })
	if !control {
		// Let both share the stages for a while, then the first stops:
		// its partitions move to the second.
		waitFor(t, 2*time.Minute, "the second instance to own partitions", func() bool { return in1.ready.Ready() })
		if err := in.stop(t); err != nil {
			t.Fatalf("seed %d: Run (first instance): %v", seed, err)
		}
		stopped = true
	}
	stall := 90 * time.Second
	if control {
		stall = 30 * time.Second // it never converges: the wait ends at the stall
	}
	diff, err := m.waitEqual(want, stall, in1)
	if !control {
		// The second instance owns every stage's partitions now (the
		// first stopped), and its status names their stages.
		st, _ := in1.ready.Status().(kafkarun.Status)
		stages := map[int]int{}
		for _, p := range st.Join {
			stages[p.Stage]++
		}
		if n := stage.Stages(cfg0.Plan()); len(stages) != n || stages[0] > 0 {
			t.Errorf("seed %d: the status names partitions of stages %v; want every stage 1..%d", seed, stages, n)
		}
	}
	if !stopped {
		in.stop(t)
	}
	once.Do(func() {
		if err := in1.stop(t); err != nil {
			t.Errorf("seed %d: Run (second instance): %v", seed, err)
		}
	})
	if !judge(t, seed, control, err, diff, "a run missing records gave replay's rows", "run's rows differ from replay's") {
		return
	}
	got, _ := m.live()
	t.Logf("seed %d: %d records, %d rows equal replay's; %d changes", seed, len(recs), len(got), m.changesNow())
}

// judge fails the test unless a wait for the oracle (its error err and
// last difference diff) ended as it must: a negative control (control)
// differing (else it fails with blind), any other run equal (else with
// differs). It reports whether the run was not a control.
func judge(t *testing.T, seed int64, control bool, err error, diff, blind, differs string) bool {
	t.Helper()
	if control {
		if err == nil && diff == "" {
			t.Fatalf("seed %d: negative control: %s", seed, blind)
		}
		t.Logf("seed %d: negative control failed as it must:\n%s", seed, firstLines(diff, 6))
		return false
	}
	if err != nil {
		t.Fatalf("seed %d: %v\n%s", seed, err, diff)
	}
	if diff != "" {
		t.Fatalf("seed %d: %s:\n%s", seed, differs, diff)
	}
	return true
}

func (m *model) changesNow() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changes
}

func firstLines(s string, n int) string {
	ls := strings.SplitN(s, "\n", n+1)
	if len(ls) > n {
		ls = ls[:n]
	}
	return strings.Join(ls, "\n")
}

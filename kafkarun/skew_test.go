package kafkarun_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
	chsink "github.com/cdcjoin/cdcjoin/sink/clickhouse"
)

// Hot keys on the Kafka runtime: histories whose few hot parents (Zipf over
// user ids) cross a small hot_children threshold up and down while
// children move in and out of them, parents are deleted and re-created and
// primary keys change, on 4 keyed partitions shared by several instances
// that crash (sink failures before and after the insert, lost state dirs)
// at random points, also in the middle of salting moves. The upsert and the
// changelog tables equal the SQL join, and the distinct changes of every
// row key reach the sinks in increasing version order.

const skewYAML = "skew: {hot_children: %d, salts: %d, chunk_rows: %d}\n"

func skewHistory(t *testing.T, seed int64, ops int, partitions int, truncates bool) *cdcgen.History {
	t.Helper()
	o := oracleOptions(seed)
	o.Ops, o.Users, o.Domains = ops, 40, 120
	o.ParentSkew = 1.15
	o.Partitions = partitions
	if truncates {
		// One partition per topic: a truncate's order against the other
		// records is then the database's.
		o.Mix.TruncateUsers, o.Mix.TruncateDomains = 2, 2
	}
	return generate(t, o)
}

// skewInstance is a Run with its own metrics registry.
type skewInstance struct {
	*instance
	reg *prometheus.Registry
}

func startSkew(t *testing.T, cfg *config.Config, s *modelSink) *skewInstance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	in := &skewInstance{instance: newInstance(cfg, cancel), reg: prometheus.NewRegistry()}
	lvl := slog.LevelWarn
	if testing.Verbose() {
		lvl = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("instance", cfg.Kafka.InstanceID)
	go func() {
		defer close(in.done)
		in.err = kafkarun.Run(ctx, cfg, kafkarun.Options{Sink: s, Logger: log, Registry: in.reg, Ready: in.ready})
	}()
	return in
}

// salted returns how many keys the instance salted and cooled.
func (in *skewInstance) salted(t *testing.T) (salted, cooled float64) {
	mfs, err := in.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "cdcjoin_skew_layout_changes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelOf(m, "change") == "salted" {
				salted += m.GetCounter().GetValue()
			} else {
				cooled += m.GetCounter().GetValue()
			}
		}
	}
	return salted, cooled
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// finishSkew waits until the sinks show the oracle join (watching in, if
// set), stops the instances, compares both sink models with the oracle and
// fails unless some key was salted (salted counts earlier instances').
func finishSkew(t *testing.T, seed int64, m *model, want []cdcgen.JoinedRow, in *instance, salted float64, ins ...*skewInstance) {
	t.Helper()
	diff, err := m.waitEqual(want, stallLimit, in)
	for _, in := range ins {
		if serr := in.stop(t); serr != nil {
			t.Errorf("seed %d: Run: %v", seed, serr)
		}
	}
	if err != nil || diff != "" {
		t.Fatalf("seed %d: %v\n%s", seed, err, diff)
	}
	checkFinal(t, seed, m, want)
	got, err := m.changelog()
	if err != nil {
		t.Fatalf("seed %d: changelog: %v", seed, err)
	}
	if d := cdcgen.Diff(want, got, 10); d != "" {
		t.Fatalf("seed %d: changelog table differs from the oracle:\n%s", seed, d)
	}
	for _, in := range ins {
		s, _ := in.salted(t)
		salted += s
	}
	if salted == 0 {
		t.Fatalf("seed %d: no key was salted: the test proves nothing", seed)
	}
	t.Logf("seed %d: %v keys salted", seed, salted)
}

// TestSkewInstances: two instances share the job, one dies mid-stream
// (its sink fails after inserting: a crash before the state commit) and
// comes back without its state dir; the other is stopped and restarted.
func TestSkewInstances(t *testing.T) {
	for _, join := range []string{"inner", "left"} {
		t.Run(join, func(t *testing.T) {
			seed := time.Now().UnixNano() % 1000
			rng := rand.New(rand.NewPCG(uint64(seed), 11))
			h := skewHistory(t, seed, 3000, 3, false)
			c := newCluster(t, 3)
			m := newModel()
			m.ordered = true
			root := t.TempDir()
			hot, salts, chunk := 4+rng.IntN(6), 2+rng.IntN(3), 1+rng.IntN(3)
			inst := func(name, dir string) (*skewInstance, *modelSink) {
				cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), instance: name, keyedParts: 4, join: join,
					batch: 20 + rng.IntN(100), stateDir: filepath.Join(root, dir), extra: fmt.Sprintf(skewYAML, hot, salts, chunk)})
				s := m.sink()
				return startSkew(t, cfg, s), s
			}
			n := len(h.Records)
			produce(t, c.ListenAddrs(), h.Records[:n/3])
			a, _ := inst("a", "a")
			b, sb := inst("b", "b")
			time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
			m.mu.Lock()
			sb.failAt, sb.failApplied = sb.flushes+1+rng.IntN(4), true
			m.mu.Unlock()
			produce(t, c.ListenAddrs(), h.Records[n/3:2*n/3])
			select {
			case <-b.done:
				t.Logf("seed %d: instance b stopped: %v", seed, b.err)
			case <-time.After(30 * time.Second):
				t.Logf("seed %d: instance b did not fail; stopping it", seed)
				b.stop(t)
			}
			s1, _ := b.salted(t)
			b2, _ := inst("b", "b-lost") // the disk is lost: rebuild from the keyed topic
			if err := a.stop(t); err != nil {
				t.Fatalf("seed %d: stop a: %v", seed, err)
			}
			s2, _ := a.salted(t)
			a2, _ := inst("a", "a")
			produce(t, c.ListenAddrs(), h.Records[2*n/3:])
			t.Logf("seed %d: hot_children %d, salts %d, chunk %d", seed, hot, salts, chunk)
			finishSkew(t, seed, m, oracle(h, join == "left"), nil, s1+s2, a2, b2)
		})
	}
}

// TestSkewCrashes: one instance crashes again and again (sink failures
// before or after the insert, lost state dirs, graceful stops) while hot
// keys are salted and cooled, also in the middle of moves.
func TestSkewCrashes(t *testing.T) {
	for _, join := range []string{"inner", "left"} {
		t.Run(join, func(t *testing.T) {
			seed := time.Now().UnixNano() % 1000
			rng := rand.New(rand.NewPCG(uint64(seed), 13))
			h := skewHistory(t, seed, 3000, 3, false)
			c := newCluster(t, 3)
			produce(t, c.ListenAddrs(), h.Records)
			m := newModel()
			m.ordered = true
			dir := t.TempDir()
			hot, salts := 4+rng.IntN(6), 2+rng.IntN(3)
			var salted float64
			cfgFor := func(state string) *config.Config {
				return jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: state, keyedParts: 4, join: join,
					batch: 20 + rng.IntN(150), extra: fmt.Sprintf(skewYAML, hot, salts, 1+rng.IntN(3))})
			}
			for i := 0; i < 8; i++ {
				state := dir
				if rng.IntN(4) == 0 {
					state = filepath.Join(dir, fmt.Sprint("lost-", i))
				}
				s := m.sink()
				if i%3 == 2 {
					in := startSkew(t, cfgFor(state), s)
					time.Sleep(time.Duration(rng.IntN(600)) * time.Millisecond)
					if err := in.stop(t); err != nil {
						t.Fatalf("seed %d: graceful stop %d: %v", seed, i, err)
					}
					n, _ := in.salted(t)
					salted += n
					continue
				}
				s.failAt, s.failApplied = 1+rng.IntN(10), rng.IntN(2) == 0
				in := startSkew(t, cfgFor(state), s)
				select {
				case <-in.done:
					t.Logf("seed %d: crash %d (flush %d, applied %v): %v", seed, i, s.failAt, s.failApplied, in.err)
				case <-time.After(5 * time.Second):
					// The injected failure may fire in the stop's last
					// flush (a slow machine, -race): a crash all the same.
					if err := in.stop(t); err != nil && !errors.Is(err, errInjected) {
						t.Fatalf("seed %d: stop %d: %v", seed, i, err)
					} else if err != nil {
						t.Logf("seed %d: crash %d at the stop (flush %d, applied %v): %v", seed, i, s.failAt, s.failApplied, err)
					}
				}
				n, _ := in.salted(t)
				salted += n
			}
			in := startSkew(t, cfgFor(dir), m.sink())
			finishSkew(t, seed, m, oracle(h, join == "left"), in.instance, salted, in)
		})
	}
}

// TestSkewTruncates: truncates of both tables hit salted keys (single
// source partitions, so that their order against other records is the
// database's); both join kinds.
func TestSkewTruncates(t *testing.T) {
	for _, join := range []string{"inner", "left"} {
		t.Run(join, func(t *testing.T) {
			seed := time.Now().UnixNano() % 1000
			h := skewHistory(t, seed, 3000, 1, true)
			c := newCluster(t, 1)
			produce(t, c.ListenAddrs(), h.Records)
			m := newModel()
			m.ordered = true
			cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir(), keyedParts: 4, join: join, batch: 50,
				extra: fmt.Sprintf(skewYAML, 5, 3, 2)})
			in := startSkew(t, cfg, m.sink())
			finishSkew(t, seed, m, oracle(h, join == "left"), in.instance, 0, in)
		})
	}
}

// hotKeys returns the instance's salted keys (metric).
func (in *skewInstance) hotKeys(t *testing.T) float64 {
	mfs, err := in.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "cdcjoin_skew_hot_keys" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// TestSkewTurnedOff: salted keys cool back (through the release round)
// after a restart with hot_children 0, at their next change.
func TestSkewTurnedOff(t *testing.T) {
	seed := time.Now().UnixNano() % 1000
	h := skewHistory(t, seed, 2000, 3, false)
	c := newCluster(t, 3)
	n := len(h.Records)
	produce(t, c.ListenAddrs(), h.Records[:n/2])
	m := newModel()
	m.ordered = true
	dir := t.TempDir()
	cfg := func(hot int) *config.Config {
		return jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: dir, keyedParts: 4, batch: 50, extra: fmt.Sprintf(skewYAML, hot, 3, 2)})
	}
	a := startSkew(t, cfg(5), m.sink())
	deadline := time.Now().Add(60 * time.Second)
	for a.hotKeys(t) < 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	salted, _ := a.salted(t)
	b := startSkew(t, cfg(0), m.sink())
	produce(t, c.ListenAddrs(), h.Records[n/2:])
	finishSkew(t, seed, m, oracle(h, false), b.instance, salted)
}

// TestSkewClickHouse: salted hot keys into a real ClickHouse, both sink
// modes, with one sink per keyed partition as `run` makes them (driven
// batches; in changelog mode with delivery markers, sink.Positioned): the
// live view (upsert) and the rows whose _sign sums to 1 (changelog) equal
// the SQL join, after a restart halfway that lost its state dir (every
// partition is rebuilt from the keyed topic; the changelog sink's markers
// keep what landed from being inserted again).
func TestSkewClickHouse(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	for _, tc := range []struct{ mode, join string }{{config.ModeUpsert, "left"}, {config.ModeChangelog, "inner"}, {config.ModeChangelog, "left"}} {
		t.Run(tc.mode+"-"+tc.join, func(t *testing.T) {
			seed := testSeed()
			t.Logf("seed %d (rerun with CDCJOIN_SEED=%d)", seed, seed)
			h := skewHistory(t, seed, 3000, 3, false)
			c := newCluster(t, 3)
			n := len(h.Records)
			produce(t, c.ListenAddrs(), h.Records[:n/2])
			root := t.TempDir()
			cfgFor := func(dir string) *config.Config {
				cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), join: tc.join, keyedParts: 4, batch: 100,
					stateDir: filepath.Join(root, dir), extra: fmt.Sprintf(skewYAML, 5, 3, 2)})
				cfg, err := cfg.WithClickHouse(addr)
				if err != nil {
					t.Fatal(err)
				}
				cfg.ClickHouse.Database = "cdcjoin_test"
				cfg.ClickHouse.Mode = tc.mode
				cfg.ClickHouse.Table = fmt.Sprintf("skew_%s_%s_%d", tc.mode, tc.join, time.Now().UnixNano()%1e9)
				return cfg
			}
			cfg := cfgFor("a")
			run := func(cfg *config.Config) (stop func() error, done chan error) {
				ctx := context.Background()
				types := sampleTypes(t, cfg)
				newSink := func(ctx context.Context, p kafkarun.SinkFor) (sink.Sink, error) {
					o := chsink.Options{Driven: true, Types: types}
					if cfg.ClickHouse.Mode == config.ModeChangelog {
						o.Stream = p.Stream
						return chsink.OpenExact(ctx, cfg, o)
					}
					return chsink.Open(ctx, cfg, o)
				}
				rctx, cancel := context.WithCancel(ctx)
				done = make(chan error, 1)
				go func() { done <- kafkarun.Run(rctx, cfg, kafkarun.Options{NewSink: newSink}) }()
				return func() error {
					cancel()
					return <-done
				}, done
			}
			stop, _ := run(cfg)
			time.Sleep(2 * time.Second)
			if err := stop(); err != nil {
				t.Fatalf("seed %d: run: %v", seed, err)
			}
			cfg2 := cfgFor("lost") // the state dir is lost: every partition is rebuilt
			cfg2.ClickHouse.Table = cfg.ClickHouse.Table
			produce(t, c.ListenAddrs(), h.Records[n/2:])
			stop, done := run(cfg2)
			want := cdcgen.Join(h.Final.Users, h.Final.Domains, tc.join == "left")
			diff := waitClickHouse(t, addr, cfg2, want, 90*time.Second, done)
			if err := stop(); err != nil {
				t.Fatalf("seed %d: run: %v", seed, err)
			}
			if diff != "" {
				t.Fatalf("seed %d: %s differs from the join of the final tables:\n%s", seed, cfg.ClickHouse.Table, diff)
			}
		})
	}
}

// sampleTypes samples cfg's source topics for the output's column types,
// as `cdcjoin run` does before it opens its sinks: the partitions' sinks
// then create the table with them (a LEFT join's first batch may hold only
// padded rows, whose NULLs do not decide a type: the sink refuses to
// guess).
func sampleTypes(t *testing.T, cfg *config.Config) []row.ColumnType {
	t.Helper()
	s, err := kafkarun.NewSampler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		types := s.Sample(ctx, 100000) // on from where the last call stopped
		cancel()
		known := true
		for _, ct := range types {
			known = known && ct.Known()
		}
		if known || time.Now().After(deadline) {
			return types
		}
	}
}

// testSeed is CDCJOIN_SEED if set (to reproduce a failure), else random.
func testSeed() int64 {
	if s, err := strconv.ParseInt(os.Getenv("CDCJOIN_SEED"), 10, 64); err == nil {
		return s
	}
	return time.Now().UnixNano() % 1000
}

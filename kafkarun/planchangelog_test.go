package kafkarun_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/metrics"
	"github.com/cdcjoin/cdcjoin/sink"
	chsink "github.com/cdcjoin/cdcjoin/sink/clickhouse"
	"github.com/cdcjoin/cdcjoin/stage"
)

// errCrash is the injected failure of crashingExact.
var errCrash = errors.New("injected crash after the batch landed")

// crashingExact is a changelog sink with delivery markers whose End fails
// after the at-th batch landed (data and marker in ClickHouse): the worker
// does not commit its state, and Run stops, as a process killed between
// its INSERT and its state commit would.
type crashingExact struct {
	chsink.Exact
	ends  *atomic.Int32
	at    int32
	fired *atomic.Bool
}

func (s crashingExact) End(ctx context.Context, to int64) error {
	if err := s.Exact.End(ctx, to); err != nil {
		return err
	}
	if s.ends.Add(1) == s.at {
		s.fired.Store(true)
		return errCrash
	}
	return nil
}

var _ sink.Positioned = crashingExact{}

// TestPlanRunChangelog: a multi-stage plan (three tables, a LEFT join and
// filters) in the ClickHouse changelog mode with delivery markers, as
// `cdcjoin run` opens it (one exact sink per partition of the last stage,
// driven batches), on a seeded cdcgen history on kfake. The first
// instance crashes after an INSERT of its last stage landed and before its
// state commit; a restart on the same state replays that batch, and the
// markers keep it from landing twice. Then a second process starts on a
// lost state directory (every stage's partitions rebuilt from their keyed
// topics, the sinks' markers saying what landed). In the table, the rows
// whose _sign sums to non-zero must be, as a multiset with every sum 1,
// exactly what `replay` emits for the same records (TestMultiOracle proves
// replay equal to PostgreSQL's answer). Negative controls: the comparison
// against replay's answer for the history without its last records of
// dns_records must fail; and TestPlanRunChangelogNoMarkers.
func TestPlanRunChangelog(t *testing.T) {
	runPlanChangelog(t, true, false)
}

// TestPlanRunChangelogHotKeys is TestPlanRunChangelog (the same crash,
// restart and lost state dir, into a real ClickHouse with delivery
// markers) over a history with hot keys at both stages of a chain
// (cdcgen.MultiOptions.Hot; planHotQueries' chain, no WHERE) and
// skew.chunk_rows 1-3: the ClickHouse table equals replay's answer, and it
// fails unless fan-outs were chunked at stage 1 and at stage 2, stage 2's
// (the last) by input. Negative controls: those of TestPlanRunChangelog
// (replay's answer without 30 dns_records records must differ here too),
// and TestPlanHotKeysChangelogTimePaced for the chunks.
func TestPlanRunChangelogHotKeys(t *testing.T) {
	runPlanChangelog(t, true, true)
}

// TestPlanRunChangelogNoMarkers is the markers' negative control: the same
// crash with a changelog sink without delivery markers (chsink.Open, whose
// Flush fails after the INSERT landed) must leave the table different from
// replay's answer after the restart (the replayed batch lands twice).
func TestPlanRunChangelogNoMarkers(t *testing.T) {
	runPlanChangelog(t, false, false)
}

// crashingPlain is crashingExact for a sink without markers: Flush fails
// after the at-th flush landed.
type crashingPlain struct {
	*chsink.Sink
	flushes *atomic.Int32
	at      int32
	fired   *atomic.Bool
}

func (s crashingPlain) Flush(ctx context.Context) error {
	if err := s.Sink.Flush(ctx); err != nil {
		return err
	}
	if s.flushes.Add(1) == s.at {
		s.fired.Store(true)
		return errCrash
	}
	return nil
}

func runPlanChangelog(t *testing.T, markers, hot bool) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	seed := clusterSeed(t)
	t.Logf("seed %d (rerun with CDCJOIN_SEED=%d)", seed, seed)
	sql := testkit.MultiQueries["chain-inner-left"]
	if hot {
		sql = planHotQueries["chain"]
	}
	// A history whose join has too few rows compares nothing: such a seed
	// (seen under -short: 15 rows) gives way to the next one, logged.
	var (
		opts  cdcgen.MultiOptions
		h     *cdcgen.MultiHistory
		probe *config.Config
		want  []string
	)
	for try := 0; ; try++ {
		opts = cdcgen.DefaultMultiOptions(seed)
		opts.Ops, opts.Truncates = 1500, false
		if hot {
			opts.Hot = 0.35
		}
		if testing.Short() {
			opts.Ops = 800
		}
		var err error
		h, err = cdcgen.GenerateMulti(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("seed %d: %s", seed, h.Stats)
		probe = planRunConfig(t, sql, "127.0.0.1:9", t.TempDir(), "probe", 100)
		want = replayValues(t, probe, h.Records)
		if len(want) >= 20 {
			break
		}
		if try == 10 {
			t.Fatalf("seed %d: replay gives %d rows: too few for a meaningful comparison (after %d seeds)", seed, len(want), try+1)
		}
		t.Logf("seed %d: replay gives %d rows, too few for a meaningful comparison: seed %d instead", seed, len(want), seed+1)
		seed++
	}
	// Hot keys: the history ends with touches of each stage's hottest
	// parent (planhot_test.go's hotTouches), produced once the table shows
	// the answer for the rest, so that each fans out past a chunk at its
	// stage whatever the order the source topics are read in.
	tail := len(h.Records)
	wantBefore := want
	fan := 0
	if hot {
		var touches []hotTouch
		touches, fan = hotTouches(t, h, hotParentsOf(t, sql))
		if fan < 2 {
			t.Fatalf("seed %d: no hot parent with 2 children at every stage (touches %v): the touches cannot force a chunk", seed, touches)
		}
		for _, tc := range touches {
			if err := h.AppendUpdate(tc.table, tc.id, tc.col, cdcgen.MultiValue{Str: true, Text: "Hot touch"}); err != nil {
				t.Fatal(err)
			}
		}
		want = replayValues(t, probe, h.Records)
		if slices.Equal(want, wantBefore) {
			t.Fatalf("seed %d: the touches %v do not change replay's answer", seed, touches)
		}
		t.Logf("seed %d: touches %v, each fanning out to at least %d rows at its stage", seed, touches, fan)
	}
	// The negative control's answer: replay without the last k records of
	// dns_records (30, doubled until the answer differs: the last 30 may
	// all be rows the query leaves out, seed 654) must differ, or the
	// control proves nothing.
	var control []string
	cutN := 0
	for k := 30; ; k *= 2 {
		var cut []cdcgen.Record
		n := 0
		for i := len(h.Records) - 1; i >= 0; i-- {
			if n < k && h.Records[i].Topic == "dbserver1.public.dns_records" {
				n++
				continue
			}
			cut = append(cut, h.Records[i])
		}
		slices.Reverse(cut)
		control, cutN = replayValues(t, probe, cut), n
		if !slices.Equal(control, want) {
			break
		}
		if n < k {
			t.Fatalf("seed %d: negative control: cutting all %d dns_records records changes nothing", seed, n)
		}
	}

	c := schema4Cluster(t, opts.Partitions)
	rng := rand.New(rand.NewSource(seed))
	chunk := 0 // the default
	if hot {
		chunk = 1 + rng.Intn(min(3, fan-1)) // every touch fans out past a chunk
		t.Logf("seed %d: skew.chunk_rows %d", seed, chunk)
	}
	var regs []*prometheus.Registry // every run's metrics
	table := fmt.Sprintf("plan_changelog_%d_%d", seed, time.Now().UnixNano()%1e9)
	cfgFor := func(stateDir, instance string) *config.Config {
		cfg := planRunConfig(t, sql, brokersOf(c), stateDir, instance, 1+rng.Intn(200))
		cfg, err := cfg.WithClickHouse(addr)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ClickHouse.Database, cfg.ClickHouse.Table, cfg.ClickHouse.Mode = "cdcjoin_test", table, config.ModeChangelog
		if chunk > 0 {
			cfg.Skew.ChunkRows = chunk
		}
		return cfg
	}
	var ends atomic.Int32
	var fired atomic.Bool
	run := func(cfg *config.Config, crashAt int32) (stop func() error, done chan error, ready *metrics.Readiness) {
		types := sampleTypes(t, cfg)
		newSink := func(ctx context.Context, p kafkarun.SinkFor) (sink.Sink, error) {
			if !markers {
				s, err := chsink.Open(ctx, cfg, chsink.Options{Driven: true, Types: types})
				if err != nil || crashAt == 0 {
					return s, err
				}
				return crashingPlain{Sink: s, flushes: &ends, at: crashAt, fired: &fired}, nil
			}
			s, err := chsink.OpenExact(ctx, cfg, chsink.Options{Driven: true, Types: types, Stream: p.Stream})
			if err != nil || crashAt == 0 {
				return s, err
			}
			return crashingExact{Exact: s, ends: &ends, at: crashAt, fired: &fired}, nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done, ready = make(chan error, 1), &metrics.Readiness{}
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		go func() {
			done <- kafkarun.Run(ctx, cfg, kafkarun.Options{NewSink: newSink, Ready: ready, Registry: reg})
		}()
		return func() error {
			cancel()
			select {
			case err := <-done:
				return err
			case <-time.After(2 * time.Minute):
				return errors.New("Run did not stop within 2 minutes")
			}
		}, done, ready
	}

	half := len(h.Records) / 2
	produce(t, c.ListenAddrs(), h.Records[:half])
	cfg0 := cfgFor(t.TempDir(), "i0")
	crashAt := int32(1 + rng.Intn(3))
	_, done, _ := run(cfg0, crashAt)
	select {
	case err := <-done:
		if !errors.Is(err, errCrash) {
			t.Fatalf("seed %d: Run returned %v, want the injected crash", seed, err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("seed %d: no crash within 3 minutes (%d batches ended, the crash is at %d)", seed, ends.Load(), crashAt)
	}
	if !fired.Load() {
		t.Fatalf("seed %d: Run stopped, but not by the injected crash", seed)
	}
	t.Logf("seed %d: crashed as injected after batch %d landed", seed, crashAt)
	// Restart on the same state: the crashed batch is replayed, and
	// the rest of the history arrives.
	stop, done, ready0 := run(cfg0, 0)
	produce(t, c.ListenAddrs(), h.Records[half:tail])
	if !markers {
		// It never converges: wait until the restart applied everything,
		// then the table must differ.
		waitCaughtUp(t, cfg0, ready0, done)
		diff := diffValues(want, readPlanClickHouse(t, addr, cfg0))
		if err := stop(); err != nil {
			t.Fatalf("seed %d: Run (restart): %v", seed, err)
		}
		if diff == "" {
			t.Fatalf("seed %d: negative control: without delivery markers the crashed batch did not land twice", seed)
		}
		t.Logf("seed %d: negative control failed as it must:\n%s", seed, firstLines(diff, 6))
		return
	}
	diff := waitPlanClickHouse(t, addr, cfg0, wantBefore, 2*time.Minute, done)
	if diff == "" && tail < len(h.Records) {
		// Every stage holds what the table shows: the touched parents'
		// children among it.
		produce(t, c.ListenAddrs(), h.Records[tail:])
		diff = waitPlanClickHouse(t, addr, cfg0, want, 2*time.Minute, done)
	}
	if err := stop(); err != nil {
		t.Fatalf("seed %d: Run (restart): %v", seed, err)
	}
	if diff != "" {
		t.Fatalf("seed %d: after the crash and restart, %s differs from replay's rows:\n%s", seed, table, diff)
	}
	// A process on a lost state directory: every stage rebuilds from its
	// keyed topic, and nothing that landed lands again.
	cfg1 := cfgFor(t.TempDir(), "i1")
	stop, done, ready := run(cfg1, 0)
	waitCaughtUp(t, cfg1, ready, done)
	diff = waitPlanClickHouse(t, addr, cfg1, want, 30*time.Second, done)
	if err := stop(); err != nil {
		t.Fatalf("seed %d: Run (lost state): %v", seed, err)
	}
	if diff != "" {
		t.Fatalf("seed %d: after a restart on a lost state dir, %s differs from replay's rows:\n%s", seed, table, diff)
	}
	if d := diffValues(control, readPlanClickHouse(t, addr, cfg1)); d == "" {
		t.Fatalf("seed %d: negative control: the table equals replay's answer without the last %d dns_records records", seed, cutN)
	}
	t.Logf("seed %d: %d rows equal replay's (each sum(_sign) = 1), after a crash, a restart and a lost state", seed, len(want))
	if hot {
		var s1, s2, s2input float64
		for _, reg := range regs {
			s1 += counter(t, reg, "cdcjoin_stage_chunked_total", "stage", "1")
			s2 += counter(t, reg, "cdcjoin_stage_chunked_total", "stage", "2")
			s2input += counter(t, reg, "cdcjoin_stage_chunked_total", "stage", "2", "steps", "input")
		}
		t.Logf("seed %d: fan-outs chunked: stage 1 %g, stage 2 %g (%g by input)", seed, s1, s2, s2input)
		if s1 == 0 || s2input == 0 {
			t.Fatalf("seed %d: fan-outs chunked: stage 1 %g, stage 2 %g (%g by input): the test proves nothing", seed, s1, s2, s2input)
		}
	}
}

// waitCaughtUp waits until the instance owns every partition of every
// stage and each has applied its keyed partition to the end, failing if Run
// stops first.
func waitCaughtUp(t *testing.T, cfg *config.Config, ready *metrics.Readiness, done <-chan error) {
	t.Helper()
	want := stage.Stages(cfg.Plan()) * cfg.Kafka.KeyedPartitions
	deadline := time.Now().Add(3 * time.Minute)
	var st kafkarun.Status
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("Run stopped early: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		st, _ = ready.Status().(kafkarun.Status)
		n := 0
		for _, p := range st.Join {
			if p.CaughtUp && p.End >= 0 && (p.Position == p.End || p.End == 0 && p.Position <= 0) {
				n++
			}
		}
		if n == want {
			return
		}
	}
	t.Fatalf("the instance did not catch up on all %d stage partitions within 3m:\n%s", want, st)
}

// replayValues is what `replay` emits for recs as live rows' values,
// sorted (one string per row, columns joined by tabs).
func replayValues(t *testing.T, cfg *config.Config, recs []cdcgen.Record) []string {
	t.Helper()
	var out []string
	for _, r := range replayLive(t, cfg, recs) {
		out = append(out, strings.Join(r.Values, "\t"))
	}
	slices.Sort(out)
	return out
}

// readPlanClickHouse returns the rows of cfg's changelog table whose _sign
// sums to non-zero, as values joined by tabs, each repeated by its sum (a
// negative sum is rendered with its value so that it shows as a
// difference), sorted; nil before the table exists.
func readPlanClickHouse(t *testing.T, addr string, cfg *config.Config) []string {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cols := cfg.OutputNames()
	var sel []string
	for _, c := range cols {
		sel = append(sel, fmt.Sprintf(`ifNull(toString(%s), '\\N')`, c))
	}
	q := fmt.Sprintf("SELECT %s, toInt64(sum(_sign)) FROM %s.%s GROUP BY %s HAVING sum(_sign) != 0",
		strings.Join(sel, ", "), cfg.ClickHouse.Database, cfg.ClickHouse.Table, strings.Join(sel, ", "))
	rows, err := conn.Query(context.Background(), q)
	var ex *clickhouse.Exception
	if errors.As(err, &ex) && ex.Code == 60 {
		return nil // UNKNOWN_TABLE: the sinks create it with their first rows
	}
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals := make([]string, len(cols))
		ptrs := make([]any, 0, len(cols)+1)
		for i := range vals {
			ptrs = append(ptrs, &vals[i])
		}
		var sum int64
		ptrs = append(ptrs, &sum)
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		line := strings.Join(vals, "\t")
		if sum < 0 {
			out = append(out, fmt.Sprintf("%s (sum(_sign) = %d)", line, sum))
			continue
		}
		for range sum {
			out = append(out, line)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// waitPlanClickHouse polls the table until it equals want, or timeout
// passed (returning the last difference), failing if Run stops.
func waitPlanClickHouse(t *testing.T, addr string, cfg *config.Config, want []string, timeout time.Duration, stopped <-chan error) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	diff := "(not compared)"
	for time.Now().Before(deadline) {
		select {
		case err := <-stopped:
			t.Fatalf("Run stopped early: %v", err)
		case <-time.After(500 * time.Millisecond):
		}
		if diff = diffValues(want, readPlanClickHouse(t, addr, cfg)); diff == "" {
			return ""
		}
	}
	return diff
}

// diffValues describes how got differs from want as multisets (up to 10
// lines); "" when equal.
func diffValues(want, got []string) string {
	d := testkit.MultisetDiff(want, got, 10)
	if d == "" {
		return ""
	}
	return fmt.Sprintf("%d rows, want %d\n%s", len(got), len(want), d)
}

package kafkarun_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/metrics"
	"github.com/cdcjoin/cdcjoin/sink"
	"github.com/cdcjoin/cdcjoin/sink/clickhouse"
)

// sinkCounter keeps the per-partition ClickHouse sinks a run opened and
// what each of their flushes sent, to check how batches were cut.
type sinkCounter struct {
	mu     sync.Mutex
	sinks  []*flushRecorder
	opened time.Time
}

func (c *sinkCounter) add(s *clickhouse.Sink) *flushRecorder {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &flushRecorder{Sink: s, c: c, last: time.Now()}
	c.sinks = append(c.sinks, r)
	return r
}

// flushRecorder is a ClickHouse sink (every method of it promoted, so the
// runtime sees a sink.Batcher as before) that records each flush which
// sent INSERTs: when it was asked for, how long after the previous flush
// of the sink (or its opening) ended, and the rows it sent.
type flushRecorder struct {
	*clickhouse.Sink
	c       *sinkCounter
	last    time.Time // the previous flush returned (or the sink opened)
	flushes []flushRecord
}

type flushRecord struct {
	open    time.Duration // since the previous flush returned: at least how long the batch was open
	inserts uint64
	rows    uint64
}

func (r *flushRecorder) Flush(ctx context.Context) error {
	before := r.Stats()
	asked := time.Now()
	err := r.Sink.Flush(ctx)
	after := r.Stats()
	r.c.mu.Lock()
	if after.Batches > before.Batches {
		r.flushes = append(r.flushes, flushRecord{open: asked.Sub(r.last), inserts: after.Batches - before.Batches, rows: after.Rows - before.Rows})
	}
	r.last = time.Now()
	r.c.mu.Unlock()
	return err
}

func (c *sinkCounter) totals() (inserts, rows uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.sinks {
		st := s.Stats()
		inserts += st.Batches
		rows += st.Rows
	}
	return inserts, rows
}

// cuts checks how the sinks' batches were cut: every flush that sent
// fewer than batchRows rows must have come at least interval after the
// previous flush of its sink (the batch's MaxDelay), except a sink's last
// (a stop, a revoke). It returns the full flushes, the ones cut by the
// interval and a description of each that broke the rule.
func (c *sinkCounter) cuts(batchRows uint64, interval time.Duration) (full, timed int, bad []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.sinks {
		for j, f := range s.flushes {
			switch {
			case f.rows >= batchRows:
				full++
			case f.open >= interval:
				timed++
			case j == len(s.flushes)-1:
			default:
				bad = append(bad, fmt.Sprintf("sink %d flush %d: %d rows in %d INSERTs after a batch open %v", i, j, f.rows, f.inserts, f.open))
			}
		}
	}
	return full, timed, bad
}

// logLevel is the level of a test's Run logs: info with CDCJOIN_TEST_LOG=info.
func logLevel() slog.Level {
	if os.Getenv("CDCJOIN_TEST_LOG") == "info" {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

// committedTotal is the sum of the groups' committed offsets (false on an
// error: the caller polls again).
func committedTotal(adm *kadm.Client, groups ...string) (int64, bool) {
	var n int64
	for _, g := range groups {
		offs, err := adm.FetchOffsets(context.Background(), g)
		if err == nil {
			err = offs.Error()
		}
		if err != nil {
			return 0, false
		}
		offs.Each(func(o kadm.OffsetResponse) { n += o.At })
	}
	return n, true
}

// caughtUp reports whether group has committed every keyed partition's end
// offset (the join commits only what the sink acknowledged).
// Errors (a fresh broker's coordinator still loading, say) mean "not yet":
// the caller's wait bounds them.
func caughtUp(t *testing.T, adm *kadm.Client, topic, group string) bool {
	t.Helper()
	ends, err := adm.ListEndOffsets(context.Background(), topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Logf("end offsets of %s: %v (retrying)", topic, err)
		return false
	}
	offs, err := adm.FetchOffsets(context.Background(), group)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		t.Logf("offsets of group %s: %v (retrying)", group, err)
		return false
	}
	ok := true
	ends.Each(func(e kadm.ListedOffset) {
		if o, has := offs.Lookup(topic, e.Partition); !has || o.At < e.Offset {
			ok = false
		}
	})
	return ok
}

// TestBacklogDrain: a backlog on a real broker drains into real ClickHouse
// in INSERTs cut only by batch.rows or batch.interval, not one per fetched
// batch (before: each flush was one INSERT of about one delivery, ~700 rows
// although batch.rows was 50,000), and the join does not idle on the fetch
// wait of caught-up partitions (before: franz-go's 5 s, so a backlog's tail
// drained at a trickle). The drain rate and how many INSERTs were full are
// logged, not asserted: both depend on the machine's speed (on a shared CI
// machine at load 20, 180-411 records/s, INSERTs held 97-356 rows with a
// 1 s interval). What is asserted does not: every INSERT of fewer than
// batch.rows rows ended a batch that had been open for batch.interval.
func TestBacklogDrain(t *testing.T) {
	brokers := testenv.Require(t, testenv.KafkaEnv, "Kafka")
	chAddr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	seed := clusterSeed(t)
	run := fmt.Sprintf("cdcjoin-backlog-%d-%d", time.Now().Unix(), seed)
	o := oracleOptions(seed)
	o.Ops, o.Users, o.Domains = 12000, 2000, 5000
	o.ParentTopic, o.ChildTopic = run+".public.users", run+".public.domains"
	h := generate(t, o)
	addrs := strings.Split(brokers, ",")
	adm := brokerAdmin(t, addrs)
	ctx := context.Background()
	if _, err := adm.CreateTopics(ctx, int32(o.Partitions), -1, nil, o.ParentTopic, o.ChildTopic); err != nil {
		t.Fatal(err)
	}
	produce(t, addrs, h.Records)
	cfg := jobConfig(t, jobOpts{name: run, brokers: brokers, stateDir: t.TempDir(), batch: 1000,
		parentTopic: o.ParentTopic, childTopic: o.ChildTopic})
	const batchRows, interval = 1000, 3 * time.Second
	chc, err := config.Parse([]byte(fmt.Sprintf(`name: x
parent: {topic: a, key: id}
child: {topic: b, key: id, parent_key: user_id}
select: parent.id
state: {dir: /unused}
clickhouse: {addr: [%q], database: cdcjoin_test, table: %s, batch: {rows: %d, interval: %v}}
`, chAddr, strings.ReplaceAll(run, "-", "_"), batchRows, interval)), "ch.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClickHouse = chc.ClickHouse
	types := sampleTypes(t, cfg)
	var counter sinkCounter
	ready := &metrics.Readiness{}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- kafkarun.Run(rctx, cfg, kafkarun.Options{
			Ready:  ready,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()})),
			NewSink: func(ctx context.Context, p kafkarun.SinkFor) (sink.Sink, error) {
				s, err := clickhouse.Open(ctx, cfg, clickhouse.Options{Driven: true, Types: types})
				if err != nil {
					return nil, err
				}
				return counter.add(s), nil
			}})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// Done when the keying stage (else a join that drained what the keyed
	// topic holds so far would look done) and then the join committed
	// everything; failed when neither moved for stallLimit (or after
	// drainLimit in all): a wait on progress, not on a speed.
	const stallLimit, drainLimit = 3 * time.Minute, 10 * time.Minute
	moved, last := time.Now(), int64(-1)
	for {
		select {
		case err := <-done:
			done <- nil // for the deferred stop
			t.Fatalf("Run stopped early: %v", err)
		default:
		}
		if caughtUp(t, adm, o.ParentTopic, cfg.Kafka.KeyingGroup()) &&
			caughtUp(t, adm, o.ChildTopic, cfg.Kafka.KeyingGroup()) &&
			caughtUp(t, adm, cfg.Kafka.KeyedTopic(), cfg.Kafka.JoinGroup()) {
			break
		}
		// Progress: committed offsets, or records produced (the keyed
		// and index topics' ends move inside a keying transaction too: at
		// load 30 a real broker took minutes to acknowledge the first
		// transactions' produces, with nothing committed meanwhile).
		n, ok := committedTotal(adm, cfg.Kafka.KeyingGroup(), cfg.Kafka.JoinGroup())
		if ends, err := adm.ListEndOffsets(ctx, cfg.Kafka.KeyedTopic(), cfg.Kafka.ChildIndexTopic(), cfg.Kafka.ParentIndexTopic()); ok && err == nil {
			ends.Each(func(e kadm.ListedOffset) { n += e.Offset })
		}
		if ok && n != last {
			moved, last = time.Now(), n
		}
		if since := time.Since(moved); since > stallLimit || time.Since(start) > drainLimit {
			inserts, rows := counter.totals()
			dump := filepath.Join(os.TempDir(), fmt.Sprintf("cdcjoin-%s-goroutines-%d.txt", t.Name(), time.Now().Unix()))
			if f, err := os.Create(dump); err == nil {
				pprof.Lookup("goroutine").WriteTo(f, 2)
				f.Close()
			}
			t.Fatalf("the backlog did not drain: committed offsets (both groups) and produced records %d, unchanged for %v, %v after the start; %d INSERTs of %d rows so far; goroutines in %s; status:\n%v",
				n, since.Round(time.Second), time.Since(start).Round(time.Second), inserts, rows, dump, ready.Status())
		}
		time.Sleep(200 * time.Millisecond)
	}
	elapsed := time.Since(start)
	inserts, rows := counter.totals()
	ends, err := adm.ListEndOffsets(ctx, cfg.Kafka.KeyedTopic())
	if err != nil {
		t.Fatal(err)
	}
	var keyed int64
	ends.Each(func(e kadm.ListedOffset) { keyed += e.Offset })
	t.Logf("%d source records, %d keyed records drained in %v (%.0f keyed records/s); %d INSERTs of %.0f rows on average (batch.rows %d)",
		len(h.Records), keyed, elapsed.Round(time.Millisecond), float64(keyed)/elapsed.Seconds(), inserts, float64(rows)/float64(max(inserts, 1)), batchRows)
	full, timed, bad := counter.cuts(batchRows, interval)
	t.Logf("%d INSERTs cut by batch.rows, %d by batch.interval (%v)", full, timed, interval)
	if inserts == 0 || rows == 0 {
		t.Errorf("%d rows in %d INSERTs: nothing written", rows, inserts)
	}
	for _, b := range bad {
		t.Errorf("a batch cut before batch.rows (%d) or batch.interval (%v): %s", batchRows, interval, b)
	}
	adm.DeleteTopics(ctx, o.ParentTopic, o.ChildTopic, cfg.Kafka.KeyedTopic(), cfg.Kafka.ChildIndexTopic(), cfg.Kafka.ParentIndexTopic())
}

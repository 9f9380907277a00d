package kafkarun_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/sink"
	"github.com/cdcjoin/cdcjoin/sink/clickhouse"
)

// sinkCounter keeps the per-partition ClickHouse sinks a run opened, to
// read their counters at the end.
type sinkCounter struct {
	mu    sync.Mutex
	sinks []sink.StatsReporter
}

func (c *sinkCounter) add(s sink.StatsReporter) {
	c.mu.Lock()
	c.sinks = append(c.sinks, s)
	c.mu.Unlock()
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
// in INSERTs near batch.rows, not one per fetched batch (before: each flush
// was one INSERT of about one delivery, ~700 rows although batch.rows was
// 50,000), and the join does not idle on the fetch wait of caught-up
// partitions (before: franz-go's 5 s, so a backlog's tail drained at a
// trickle). The drain rate is logged (no timing assertion: the CI machine is
// shared); the rows per INSERT are checked.
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
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	if _, err := adm.CreateTopics(ctx, int32(o.Partitions), -1, nil, o.ParentTopic, o.ChildTopic); err != nil {
		t.Fatal(err)
	}
	produce(t, addrs, h.Records)
	cfg := jobConfig(t, jobOpts{name: run, brokers: brokers, stateDir: t.TempDir(), batch: 1000,
		parentTopic: o.ParentTopic, childTopic: o.ChildTopic})
	const batchRows = 1000
	chc, err := config.Parse([]byte(fmt.Sprintf(`name: x
parent: {topic: a, key: id}
child: {topic: b, key: id, parent_key: user_id}
select: parent.id
state: {dir: /unused}
clickhouse: {addr: [%q], database: cdcjoin_test, table: %s, batch: {rows: %d, interval: 1s}}
`, chAddr, strings.ReplaceAll(run, "-", "_"), batchRows)), "ch.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClickHouse = chc.ClickHouse
	var counter sinkCounter
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- kafkarun.Run(rctx, cfg, kafkarun.Options{
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			NewSink: func(ctx context.Context, p kafkarun.SinkFor) (sink.Sink, error) {
				s, err := clickhouse.Open(ctx, cfg, clickhouse.Options{Driven: true})
				if err == nil {
					counter.add(s)
				}
				return s, err
			}})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor(t, 3*time.Minute, "the join to commit the whole backlog", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run stopped early: %v", err)
		default:
		}
		// The keying stage first (else a join that drained what the keyed
		// topic holds so far would look done), then the join.
		return caughtUp(t, adm, o.ParentTopic, cfg.Kafka.KeyingGroup()) &&
			caughtUp(t, adm, o.ChildTopic, cfg.Kafka.KeyingGroup()) &&
			caughtUp(t, adm, cfg.Kafka.KeyedTopic(), cfg.Kafka.JoinGroup())
	})
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
	if inserts == 0 || rows/inserts < batchRows/2 {
		t.Errorf("%d rows in %d INSERTs: fewer than half of batch.rows (%d) per INSERT", rows, inserts, batchRows)
	}
	adm.DeleteTopics(ctx, o.ParentTopic, o.ChildTopic, cfg.Kafka.KeyedTopic(), cfg.Kafka.ChildIndexTopic(), cfg.Kafka.ParentIndexTopic())
}

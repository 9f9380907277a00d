// Package kafkarun runs a cdcjoin job on Kafka: the keying stage (Debezium
// topics → the compacted "<group>.keyed" topic, transactionally) and the
// join stage (one worker per owned keyed partition, pebble state, a sink),
// coordinated by Kafka consumer groups. Any number of processes may run the
// same job; partitions spread over them.
//
// Progress and exactly-once effects:
//   - keying: the consumed source offsets, the keyed records, the child
//     index changelog and dead-lettered records commit in one Kafka
//     transaction (franz-go GroupTransactSession, KIP-447).
//   - join: per batch, changes are written to the sink and flushed, then the
//     state and the keyed position commit in one pebble batch, then (every
//     kafka.commit_interval) the position is committed to Kafka for lag
//     monitoring and as the emit threshold of a future owner. A crash at any
//     point re-emits identical (row, version) pairs, which
//     "highest version wins" sinks absorb; a sink.Positioned (the
//     changelog ClickHouse sink) stores the positions it delivered with the
//     data, and a restarted worker writes nothing below them (worker.go).
//     A batch gathers deliveries up to the size of a sink.Batcher's batch,
//     and a stopping worker has kafka.drain_timeout to commit it.
//
// Versions: each keyed partition's worker numbers its records with a
// version.Clock (version = epoch<<24 | offset-based seq, see package
// version). Run writes an epoch marker to every keyed partition before it
// keys anything, so everything keyed after a start gets versions above
// everything emitted before it — by an earlier keyed topic of the same
// name, a different partition layout, or a replay into the same table.
// Markers have unique keys, so compaction keeps them and a partition rebuilt
// from the topic reproduces every version. Records read before any marker
// (keyed topics of cdcjoin ≤ wave 1) keep the legacy kafka.epoch<<48 |
// offset+1.
//
// Rebalancing: a newly assigned keyed partition reuses its local state when
// the state's position is at or past the group's committed offset;
// otherwise it continues from the local position (or rebuilds from the log
// start without local state), applying records below the committed offset
// without emitting. Compaction keeps this exact as long as the join group
// lags the log end by less than kafka.min_compaction_lag.
//
// Truncates: a truncate is broadcast to every keyed partition in the order
// the keying stage consumed it; on multi-partition source topics its order
// against records of the table's other partitions is whatever the consumer
// saw (Kafka gives no order across partitions). A truncate marker is
// compacted like other records, so a state rebuilt from a compacted topic
// can miss a truncate whose marker was superseded by a later truncate.
package kafkarun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/metrics"
	"github.com/cdcjoin/cdcjoin/registry"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
	"github.com/cdcjoin/cdcjoin/version"
)

// Options are what the caller supplies besides the configuration.
type Options struct {
	// Sink receives every change. It is shared by the partition workers;
	// the runtime serializes calls to it (Write and Flush under one lock),
	// so it need not be safe for concurrent use. The runtime does not close
	// it. Exactly one of Sink and NewSink must be set.
	Sink sink.Sink
	// NewSink, if set, makes one sink per owned keyed partition (the
	// production path: partitions flush in parallel); the runtime calls it
	// on the partition's worker goroutine with a context cancelled when the
	// partition stops, and closes the sink when the worker stopped. A sink
	// that is a sink.Batcher gets batches near its size; a
	// sink.Positioned gets each change exactly once (see worker).
	NewSink func(ctx context.Context, p SinkFor) (sink.Sink, error)
	// Logger receives structured logs (default: discard).
	Logger *slog.Logger
	// Registry registers the Prometheus collectors (default: none, unless
	// kafka.metrics_addr is set, then a fresh registry served there).
	Registry prometheus.Registerer
	// Gatherer is served on kafka.metrics_addr (default: Registry if it is
	// a Gatherer).
	Gatherer prometheus.Gatherer
	// Ready, if set, is ready once both stages run, each has its group's
	// assignment and every owned partition's state (keying indexes, join
	// state) has caught up to the committed positions (see watch);
	// cleared on return.
	Ready *metrics.Readiness
	// ClientOpts are appended to every Kafka client's options (tests:
	// shorter timeouts, fault injection hooks).
	ClientOpts []kgo.Opt
	// Operator, if set, makes each owned keyed partition's operator (a
	// stage of another kind: package driver's contract) when the partition
	// is assigned; default: the regular join's skew.Router. It must be
	// safe for concurrent use.
	Operator func(OperatorFor) (Operator, error)

	// paceByTime (tests: PaceByTime) steps work in progress by time even
	// with a sink.Positioned: the negative control of stepping by input.
	paceByTime bool
	// hooks: the tests' probes and faults (export_test.go); nil otherwise.
	hooks *testHooks
}

// testHooks are probes and faults for the tests (export_test.go), shared
// by every stage of a Run.
type testHooks struct {
	// bulkLimit, if > 0, ends a plan stage's bulk rebuild once its state
	// takes this many bytes (instead of state.bulk_load_mb).
	bulkLimit int
	// bulkDrop, if set, makes a plan stage's bulk rebuild leave out the
	// rows whose group starts with it, counted in bulkDropped (the
	// negative control of the rebuild's equivalence).
	bulkDrop    []byte
	bulkDropped atomic.Uint64
	// bulkSkip, if set, makes a plan stage's bulk rebuild skip the stage
	// records it returns true for (the negative control: a rebuild that
	// loses records).
	bulkSkip func(stage int, partition int32, offset int64) bool
	// bulkKill, if set, is called when a plan stage's bulk rebuild has
	// written its tables, before they are ingested with the position: an
	// error fails the rebuild there (a crash mid-rebuild).
	bulkKill func(stage int, partition int32) error
	// caughtUp, if set, is called on a join worker's goroutine when its
	// partition's state reached the committed position (stage 0: the
	// regular join), with the state as of then.
	caughtUp func(stage int, partition int32, st *joinstate.Store)
	// deliver, if set, is called on a join stage's fetch goroutine before
	// a fetch's records go to the partition's worker (a delay there is a
	// slow fetch).
	deliver func(stage int, partition int32)
	// caught, if set, is called on a join worker's goroutine when its
	// partition's catch-up ends (readiness), with its durable position
	// and the catch-up's target then.
	caught func(stage int, partition int32, position, target int64)
	// pacerNow, if set, is the clock of the workers' pacers (time.Now
	// otherwise): the negative controls of stepping by input give it
	// jitter, so that steps paced by time cut other chunks when a batch is
	// re-created whatever the machine's speed.
	pacerNow func() time.Time
}

// now is the clock of the workers' pacers.
func (h *testHooks) now() func() time.Time {
	if h.pacerNow != nil {
		return h.pacerNow
	}
	return time.Now
}

// deps is what the stages of Run are made with (one value instead of a
// list of parameters), shared read-only by them.
type deps struct {
	cfg  *config.Config
	spec *keyed.Spec
	base []kgo.Opt // the options every client of the job starts with
	adm  *kadm.Client
	top  topology
	log  *slog.Logger
	m    *metrics.Metrics
	sm   *metrics.Skew
	tm   *metrics.TimeJoin // a time join's (nil otherwise)
	// newOp is Options.Operator (nil: the regular join's, newRouter).
	newOp func(OperatorFor) (Operator, error)
	// plan is a multi-stage plan's part (nil: the regular join).
	plan *planRun
	// paceByTime: Options.paceByTime.
	paceByTime bool
	// hooks: Options.hooks (never nil: empty without tests).
	hooks *testHooks
}

// Run runs the job until ctx is done, then drains: the batch in progress
// of each stage finishes and commits, the groups are left, and Run returns
// nil. Any fatal error (an unreachable cluster, a missing source topic, a
// bad record under policy stop, a sink failure) stops both stages and is
// returned; what was committed before stays committed, nothing after it.
//
// Goroutines: Run owns the metrics server, the keying stage's goroutine and
// the join stage's dispatcher (which owns one worker per owned keyed
// partition); it waits for all of them before it returns.
func Run(ctx context.Context, cfg *config.Config, opts Options) error {
	if err := cfg.ValidateForKafka(); err != nil {
		return err
	}
	if (opts.Sink == nil) == (opts.NewSink == nil) {
		return errors.New("cdcjoin: kafkarun: set exactly one of Options.Sink and Options.NewSink")
	}
	unlock, err := lockStateDir(cfg.State.Dir)
	if err != nil {
		return err
	}
	defer unlock()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	log = log.With("job", cfg.Name)
	reg, gat := opts.Registry, opts.Gatherer
	if reg == nil && cfg.Kafka.MetricsAddr != "" {
		r := prometheus.NewRegistry()
		// The process's CPU, memory and file descriptors, and the Go runtime's.
		r.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
		reg, gat = r, r
	}
	if gat == nil {
		gat, _ = reg.(prometheus.Gatherer)
	}
	m, err := metrics.New(reg)
	if err != nil {
		return err
	}
	sm, err := metrics.NewSkew(reg)
	if err != nil {
		return err
	}
	newSink := opts.NewSink
	if newSink == nil {
		shared := &lockedSink{s: opts.Sink}
		newSink = func(context.Context, SinkFor) (sink.Sink, error) { return shared, nil }
	}

	base, err := clientOpts(&cfg.Kafka, log)
	if err != nil {
		return err
	}
	base = append(base, opts.ClientOpts...)
	admCl, err := kgo.NewClient(append(base, kgo.MetadataMinAge(100*time.Millisecond))...)
	if err != nil {
		return fmt.Errorf("cdcjoin: kafka client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	var pr *planRun
	var spec *keyed.Spec
	var tm *metrics.TimeJoin
	switch {
	case cfg.Plan() != nil:
		pr = newPlanRun(cfg)
	case cfg.IsTimeJoin():
		if spec, err = timeSpec(cfg); err == nil {
			tm, err = metrics.NewTimeJoin(reg)
		}
	default:
		spec, err = job.Spec(cfg)
	}
	if err != nil {
		return err
	}
	top, err := setup(ctx, cfg, pr, adm, admCl, log)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting: nothing to drain
		}
		return err
	}
	if err := writeEpochMarkers(ctx, cfg, pr, base, top, version.Propose(time.Now())); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	d := &deps{cfg: cfg, spec: spec, base: base, adm: adm, top: top, log: log, m: m, sm: sm, tm: tm, newOp: opts.Operator, plan: pr, paceByTime: opts.paceByTime, hooks: opts.hooks}
	if d.hooks == nil {
		d.hooks = &testHooks{}
	}

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	errs := make(chan error, 4+len(joinDefs(cfg, pr, top)))
	if cfg.Kafka.MetricsAddr != "" && gat != nil {
		srv, err := metrics.Listen(cfg.Kafka.MetricsAddr, gat, opts.Ready)
		if err != nil {
			return err
		}
		log.Info("serving metrics", "addr", srv.Addr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ctx); err != nil {
				errs <- err
				cancel()
			}
		}()
	}
	schemas, err := job.OpenSchemas(cfg, registry.Options{Log: log.With("stage", "registry"), Registerer: reg})
	if err != nil {
		return err
	}
	defer schemas.Close()
	stopSchemas := context.AfterFunc(ctx, schemas.Close) // a fetch waiting for the registry ends at shutdown
	defer stopSchemas()
	var src debezium.SchemaSource // nil for a JSON job (a nil *registry.Client is not a nil interface)
	if schemas != nil {
		src = schemas
	}
	k, err := newKeying(d, src)
	if err != nil {
		return err
	}
	var js []*joinStage
	closeJoins := func() {
		for _, j := range js {
			j.cl.Close()
		}
	}
	for _, def := range joinDefs(cfg, pr, top) {
		j, err := newJoinStage(d, newSink, def)
		if err != nil {
			k.close()
			closeJoins()
			return err
		}
		js = append(js, j)
	}
	unregister, err := registerCollectors(reg, k, js)
	if err != nil {
		k.close()
		closeJoins()
		return err
	}
	defer unregister()
	var brokers stageHealth // the probe's (fault.go)
	brokers.progressed(time.Now())
	if opts.Ready != nil {
		watch(opts.Ready, cfg, k, js, schemas, &brokers)
		defer opts.Ready.SetLiveness(nil)
		defer opts.Ready.SetCheck(nil)
		defer opts.Ready.SetStatus(nil)
		defer opts.Ready.Set(false)
	}
	wg.Add(3 + len(js))
	go func() {
		defer wg.Done()
		probe(ctx, admCl.Ping, &brokers)
	}()
	go func() {
		defer wg.Done()
		if err := watchTopicIDs(ctx, cfg, adm, top.sourceIDs); err != nil {
			errs <- err
			cancel()
		}
	}()
	go func() {
		defer wg.Done()
		defer k.close()
		if err := k.run(ctx); err != nil {
			errs <- err
			cancel()
		}
	}()
	for _, j := range js {
		go func() {
			defer wg.Done()
			if err := j.run(ctx); err != nil {
				errs <- err
				cancel()
			}
		}()
	}
	log.Info("running", "keyed_topic", cfg.Kafka.KeyedTopic(), "keyed_partitions", top.keyedParts)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if len(all) > 0 {
		log.Error("stopped", "err", all[0])
		return all[0]
	}
	log.Info("stopped")
	return nil
}

// registerCollectors registers the collectors that read the stages at
// scrape time (state stores, sinks, hot keys) with reg, all or none; the
// returned function unregisters them. A nil reg registers nothing.
func registerCollectors(reg prometheus.Registerer, k *keying, js []*joinStage) (func(), error) {
	if reg == nil {
		return func() {}, nil
	}
	j := js[len(js)-1] // the stage writing the sink
	cs := []prometheus.Collector{
		metrics.NewStateCollector(func() []metrics.StoreStats {
			var all []metrics.StoreStats
			for _, j := range js {
				all = append(all, j.storeStats()...)
			}
			return all
		}),
		metrics.NewSinkCollector(j.sinkTotals),
		metrics.NewSkewCollector(j.cfg.Skew.TopKeys, func() metrics.SkewSnapshot {
			hot, fanout, waiting := j.skewSnapshot()
			return metrics.SkewSnapshot{Hot: hot, Busy: k.busy.snapshot(), FanOutKeys: fanout, Waiting: waiting}
		}),
	}
	unregister := func(n int) {
		for _, c := range cs[:n] {
			reg.Unregister(c)
		}
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			unregister(i)
			return nil, fmt.Errorf("cdcjoin: metrics: %w", err)
		}
	}
	return func() { unregister(len(cs)) }, nil
}

// Readiness and liveness (watch). An instance is ready (Options.Ready, /readyz) when both stages
// run, each has received its group's assignment, and every partition it
// owns has state caught up to the committed positions:
//
//   - keying: every assigned source partition's index is restored to its
//     changelog's end (restore). Indexes are restored as soon as the
//     partition's committed offset is known to be stable (OnOffsetsFetched:
//     KIP-447 makes that fetch wait for the previous owner's transaction),
//     between polls, not only when the partition's first records arrive;
//     so a moved partition's rebuild happens, and is visible as not ready,
//     before input for it shows up.
//   - join: every assigned keyed partition has a worker whose sink is open
//     and whose durable position reached the group's committed offset (or
//     what a Positioned sink delivered), or which waited catchUpIdle for
//     input below it with none left to read there (worker.moreBelow, the
//     brokers' last stable offset: the keyed topic recreated shorter, or
//     its records deleted); a partition idle with records still to read
//     below it (a slow fetch under load) is not ready.
//
// A partition whose local state was current when assigned, or a fresh one
// with nothing committed, is caught up at once. When a rebuild (no usable
// local state) or a catch-up (local state behind) ends, one line is logged
// and metrics.CatchUpSeconds / CatchUpRecords are bumped for it.

// watch answers r's readiness and liveness from the stages: ready once
// every owned partition caught up and the brokers answer; alive while no
// stage (nor the brokers, per the probe) is stuck. r's status is the
// stages' Status (/statusz).
func watch(r *metrics.Readiness, cfg *config.Config, k *keying, js []*joinStage, schemas *registry.Client, brokers *stageHealth) {
	limit, klimit := stuckAfter(cfg), keyingStall(cfg)
	r.SetLiveness(func() error {
		if err := brokers.stalled("kafka", time.Now(), klimit); err != nil {
			return err
		}
		if err := k.health.stalled("keying", time.Now(), klimit); err != nil {
			return err
		}
		for _, j := range js {
			if err := j.health.stalled(j.name(), time.Now(), klimit); err != nil {
				return err
			}
			if p, d, ok := j.stuck(time.Now(), limit); ok {
				return fmt.Errorf("%s partition %d has been in one batch for %v (more than %v)", j.name(), p, d.Round(time.Second), limit)
			}
		}
		return nil
	})
	r.SetCheck(func() error {
		if err := brokers.notReady("kafka"); err != nil {
			return err
		}
		if err := schemas.NotReady(); err != nil {
			return err
		}
		if err := k.health.notReady("keying"); err != nil {
			return err
		}
		if err := k.notReady(); err != nil {
			return err
		}
		for _, j := range js {
			if err := j.health.notReady(j.name()); err != nil {
				return err
			}
			if err := j.notReady(); err != nil {
				return err
			}
		}
		return nil
	})
	r.SetStatus(func() any { return status(k, js, time.Now()) })
	r.Set(true)
}

// stuckAfter is how long a join partition may stay in one batch before it
// counts as stuck (liveness fails, and Run stops with an error): longer
// than the ClickHouse sink may legitimately retry.
func stuckAfter(cfg *config.Config) time.Duration {
	d := 5 * time.Minute
	if cfg.ClickHouse != nil {
		d += cfg.ClickHouse.Retry.MaxElapsed
	}
	return d
}

// keyingStall is how long the keying stage may go without progress while
// it has work (a failure it restarts after, a transaction in progress)
// before liveness fails: a transaction's deadline (its timeout and
// txnGrace) plus a group session.
func keyingStall(cfg *config.Config) time.Duration {
	return cfg.Kafka.TransactionTimeout + txnGrace + cfg.Kafka.SessionTimeout
}

// lockedSink serializes a shared sink's calls. Close is a no-op: the
// caller owns the shared sink.
type lockedSink struct {
	mu sync.Mutex
	s  sink.Sink
}

func (l *lockedSink) Write(ctx context.Context, cs []row.Change) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.Write(ctx, cs)
}

func (l *lockedSink) Flush(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.Flush(ctx)
}

func (l *lockedSink) Close() error { return nil }

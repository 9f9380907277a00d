package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/metrics"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
	"github.com/cdcjoin/cdcjoin/sink/clickhouse"
	"github.com/cdcjoin/cdcjoin/sink/jsonl"
)

func runCommand() command {
	c := command{
		name:    "run",
		summary: "run the join as a service: Debezium topics on Kafka → ClickHouse (or JSON lines)",
		usage:   "--config FILE [--output FILE] [--cpuprofile FILE] [--log-format text|json] [--log-level LEVEL]",
	}
	c.run = func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		fs := newFlags(&c, stderr, `
Consumes the parent and child Debezium topics (kafka.brokers), keys every
change by the join key into the compacted "<group>.keyed" topic (Kafka
transactions), joins per keyed partition on local pebble state in state.dir,
and writes upserts and retractions to ClickHouse (the config's clickhouse
section) or, without one, as JSON lines to --output. A job written as SQL that
compiles to a multi-stage plan (cdcjoin explain) runs one such join stage per
plan stage, each on its own keyed topic "<group>.s<n>.keyed" and consumer
group "<group>-s<n>", the intermediate results keyed through Kafka. A time
join (time_join) keys its events with watermark records into an uncompacted
keyed topic and inserts each joined row once (ClickHouse mode insert).

Start more instances with the same config (and their own state.dir) to scale
out: Kafka's consumer groups spread the partitions. SIGINT/SIGTERM drain:
in-flight batches are finished and committed before exit. Metrics, /healthz
and /readyz are served on kafka.metrics_addr.`)
		job := kafkaJobFlags(fs, stderr)
		output := fs.String("output", "-", "JSON-lines output `file` when the config has no clickhouse section (- is stdout)")
		cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to `file` (for go tool pprof; written when the run stops, e.g. on SIGTERM)")
		cfg, log, err := job.open(fs, args)
		if err != nil {
			return err
		}
		if *cpuProfile != "" {
			stop, err := startCPUProfile(*cpuProfile)
			if err != nil {
				return err
			}
			defer stop()
		}
		opts := kafkarun.Options{Logger: log, Ready: &metrics.Readiness{}}
		var s sink.Sink
		if cfg.ClickHouse != nil && cfg.IsTimeJoin() {
			opts.NewSink = insertSinks(cfg, log)
		} else if cfg.ClickHouse != nil {
			// Check (and create) the table before joining anything, so
			// that a bad table or credentials fail at once; typed from
			// the Debezium schemas, else the declared types, else the
			// values of the source topics (waiting for a non-NULL value
			// of every column: a NULL does not decide a type).
			types, err := openTable(ctx, cfg, log)
			if err != nil || ctx.Err() != nil {
				return err
			}
			opts.NewSink = clickhouseSinks(cfg, types)
		} else if *output == "-" {
			s = jsonl.New(stdout, cfg.OutputNames())
		} else {
			f, err := jsonl.Create(*output, cfg.OutputNames())
			if err != nil {
				return err
			}
			s = f
		}
		if s != nil {
			defer s.Close()
			opts.Sink = s
		}
		log.Info("cdcjoin starting", "version", version, "config", *job.config, "brokers", strings.Join(cfg.Kafka.Brokers, ","))
		err = kafkarun.Run(ctx, cfg, opts)
		if err != nil {
			return err
		}
		log.Info("cdcjoin stopped cleanly")
		return nil
	}
	return c
}

// openTable samples the source topics for the column types (schemas, or
// non-NULL values) and opens the ClickHouse sink once, creating the table
// if it is missing. While some column of a table to create has no known
// type, it samples on and retries (logging what it waits for every 30 s)
// until ctx is done.
func openTable(ctx context.Context, cfg *config.Config, log *slog.Logger) ([]row.ColumnType, error) {
	sampler, err := kafkarun.NewSampler(cfg)
	if err != nil {
		return nil, err
	}
	defer sampler.Close()
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	types := sampler.Sample(sctx, 10000)
	cancel()
	var logged time.Time
	for {
		ch, err := clickhouse.Open(ctx, cfg, clickhouse.Options{Types: types})
		var ue *clickhouse.UntypedError
		if !errors.As(err, &ue) {
			if err == nil {
				ch.Close()
			}
			return types, err
		}
		if time.Since(logged) > 30*time.Second {
			log.Warn("waiting for a non-NULL value of every column to type the new table (declare the types to start at once)",
				"table", ue.Table, "columns", strings.Join(ue.Columns, ","))
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(2 * time.Second):
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		types = sampler.Sample(sctx, 100000)
		cancel()
	}
}

// logFlags adds --log-format and --log-level to fs and returns the function
// that makes the logger they describe (call it after parsing).
// kafkaJob is the opener of the subcommands that work on a Kafka job
// (run, reemit): its --config and log flags.
type kafkaJob struct {
	config *string
	logger func() (*slog.Logger, error)
}

// kafkaJobFlags defines kafkaJob's flags on fs (logs to stderr).
func kafkaJobFlags(fs *flag.FlagSet, stderr io.Writer) kafkaJob {
	return kafkaJob{
		config: fs.String("config", "", "job configuration (YAML) `file` (required)"),
		logger: logFlags(fs, stderr),
	}
}

// open parses args and returns the job --config names, loaded and
// validated for Kafka, and the logger the flags ask for. Without --config
// it prints the usage and returns errUsage.
func (j kafkaJob) open(fs *flag.FlagSet, args []string) (*config.Config, *slog.Logger, error) {
	if err := parseFlags(fs, args); err != nil {
		return nil, nil, err
	}
	if *j.config == "" {
		fs.Usage()
		return nil, nil, fmt.Errorf("cdcjoin %s: --config is required: %w", fs.Name(), errUsage)
	}
	log, err := j.logger()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := config.Load(*j.config)
	if err != nil {
		return nil, nil, err
	}
	if err := cfg.ValidateForKafka(); err != nil {
		return nil, nil, err
	}
	return cfg, log, nil
}

func logFlags(fs *flag.FlagSet, w io.Writer) func() (*slog.Logger, error) {
	format := fs.String("log-format", "text", "log format: text or json (logs go to stderr)")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	return func() (*slog.Logger, error) { return newLogger(w, *format, *level) }
}

// clickhouseSinks returns the sink factory of `run`: one ClickHouse sink
// per keyed partition, so that partitions flush in parallel and an outage
// holds up no other partition's revoke. Batches are driven by the join
// (near batch.rows per INSERT); in changelog mode each partition's sink
// writes delivery markers, so a change is inserted exactly once however
// the process stops.
func clickhouseSinks(cfg *config.Config, types []row.ColumnType) func(context.Context, kafkarun.SinkFor) (sink.Sink, error) {
	return func(ctx context.Context, p kafkarun.SinkFor) (sink.Sink, error) {
		o := clickhouse.Options{Types: types, Driven: true}
		if cfg.ClickHouse.Mode == config.ModeChangelog {
			o.Stream = p.Stream
			return clickhouse.OpenExact(ctx, cfg, o)
		}
		return clickhouse.Open(ctx, cfg, o)
	}
}

// insertSinks returns the sink factory of a time join's `run`: one
// insert-mode ClickHouse sink per keyed partition, whose stream is the
// partition (its rows' seq numbers are the partition's: a row emitted
// again after a crash or a rebalance is dropped by max(_seq)); the table
// is made at the first rows, typed by the declared types, else by what a
// sample of the source topics taken then says (timeTypes), else by the
// first rows' values.
func insertSinks(cfg *config.Config, log *slog.Logger) func(context.Context, kafkarun.SinkFor) (sink.Sink, error) {
	types := &timeTypes{cfg: cfg, log: log}
	return func(_ context.Context, p kafkarun.SinkFor) (sink.Sink, error) {
		return clickhouse.NewLazyInsert(cfg, types.get, func() string { return p.Stream }), nil
	}
}

// Bounds of timeTypes' sample of the source topics.
const (
	timeSampleTime    = 10 * time.Second
	timeSampleRecords = 5000
)

// timeTypes are the output column types of a time join's `run`, for the
// tables its partitions' lazy sinks create: the declared types, and for
// columns without one what one sample of the source topics (a
// kafkarun.Sampler: their schemas, else their non-NULL values; at most
// timeSampleTime and timeSampleRecords) found. The sample is taken once
// per process, when a partition's first rows arrive (by then the topics
// hold data; at startup they may be empty), and shared; safe for
// concurrent use (the partitions' sinks open concurrently: one samples,
// the others wait for it).
type timeTypes struct {
	cfg *config.Config
	log *slog.Logger

	mu      sync.Mutex
	sampled []row.ColumnType // nil until a sample completed
}

// get returns the types (zero entries where nothing is known). A sample
// cut short by ctx (not by its own bounds) is not kept: the next get
// samples again.
func (t *timeTypes) get(ctx context.Context) []row.ColumnType {
	out := t.cfg.DeclaredOutputTypes()
	if row.AllKnown(out) {
		return out
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sampled == nil {
		t.sampled = t.sample(ctx)
	}
	for i, ct := range t.sampled {
		if i < len(out) && !out[i].Known() {
			out[i] = ct
		}
	}
	return out
}

// sample reads the source topics for the types (nil when ctx ended first
// or the topics cannot be read: the caller then goes on without).
func (t *timeTypes) sample(ctx context.Context) []row.ColumnType {
	s, err := kafkarun.NewSampler(t.cfg)
	if err != nil {
		t.log.Warn("cannot sample the source topics for the new table's column types", "err", err)
		return nil
	}
	defer s.Close()
	sctx, cancel := context.WithTimeout(ctx, timeSampleTime)
	defer cancel()
	types := s.Sample(sctx, timeSampleRecords)
	if ctx.Err() != nil {
		return nil
	}
	var unknown []string
	for i, ct := range types {
		if !ct.Known() {
			unknown = append(unknown, t.cfg.OutputNames()[i])
		}
	}
	t.log.Info("sampled the source topics for the new table's column types", "unknown", strings.Join(unknown, ","))
	return types
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("cdcjoin: --log-level %q: use debug, info, warn or error: %w", level, errUsage)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("cdcjoin: --log-format %q: use text or json: %w", format, errUsage)
}

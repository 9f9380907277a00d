package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/deadletter"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/registry"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
	"github.com/cdcjoin/cdcjoin/sink/clickhouse"
	"github.com/cdcjoin/cdcjoin/sink/jsonl"
)

func replayCommand() command {
	c := command{
		name:    "replay",
		summary: "apply a file of Debezium records offline (backfill, checks, simplest benchmark)",
		usage:   "--config FILE --input FILE [--changes FILE] [--final FILE] [--resume] [--end-of-input] [--clickhouse ADDR]",
	}
	c.run = func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		fs := newFlags(&c, stderr, `
Reads Kafka records of the parent and child Debezium topics, one per line, in
consumption order:
  {"topic":"dbserver1.public.users","partition":0,"offset":12,"key":{"id":1},"value":{…}}
and applies them to the join state in state.dir. The emitted changes (upserts
and retractions with versions) go to --changes and/or ClickHouse; --final
writes the resulting join, one JSON object per row keyed by the select names,
sorted by row key. Exits non-zero on a bad config or, under errors.policy stop,
on the first bad record (naming its topic/partition/offset).

A time join (time_join) emits insert-only rows: --changes gets
{"op":"insert","version":<seq>,"values":{…}}, --final one JSON object per
emitted row in emission order; late records are bad records (reason late).
The watermark does not move at the end of the input unless --end-of-input
says the input is complete (a bounded backfill): then every row still
waiting for the watermark (outer rows, temporal rows, windows) is emitted.`)
		cfgPath := fs.String("config", "", "job configuration (YAML) `file` (required)")
		input := fs.String("input", "", "input `file` of records, JSON lines; - for stdin (required)")
		changes := fs.String("changes", "", "write every emitted change as a JSON line to `file` (- for stdout)")
		final := fs.String("final", "", "write the final materialized join to `file` (- for stdout)")
		resume := fs.Bool("resume", false, "continue from the state in state.dir, skipping records at or before its committed positions")
		bad := fs.String("bad-records", "", "with errors.policy dlq: write bad records with their error to `file` (JSON lines)")
		chAddr := fs.String("clickhouse", "", "also write changes to ClickHouse at `host:port` (native protocol); uses the config's clickhouse section")
		quiet := fs.Bool("quiet", false, "no progress lines on stderr")
		endOfInput := fs.Bool("end-of-input", false, "time joins: the input is complete: move the watermark to +infinity after it (outer rows, temporal rows and windows still waiting are emitted; later records are late)")
		cpuProfile := fs.String("cpuprofile", "", "write a CPU profile to `file` (for go tool pprof)")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if *cfgPath == "" || *input == "" {
			fs.Usage()
			return fmt.Errorf("cdcjoin replay: --config and --input are required: %w", errUsage)
		}
		cfg, err := config.Load(*cfgPath)
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
		a := replayArgs{
			input: *input, changes: *changes, final: *final, resume: *resume, bad: *bad,
			clickhouse: *chAddr, quiet: *quiet, endOfInput: *endOfInput,
		}
		if cfg.IsTimeJoin() {
			return runTimeReplay(ctx, cfg, a, stdout, stderr)
		}
		if a.endOfInput {
			return fmt.Errorf("cdcjoin replay: --end-of-input is for time joins (time_join): %w", errUsage)
		}
		return runReplay(ctx, cfg, a, stdout, stderr)
	}
	return c
}

type replayArgs struct {
	input, changes, final, bad, clickhouse string
	resume, quiet, endOfInput              bool
}

// outFile opens path for writing ("-" is stdout); close flushes it.
func outFile(path string, stdout io.Writer) (*bufio.Writer, func() error, error) {
	if path == "-" {
		w := bufio.NewWriterSize(stdout, 1<<20)
		return w, w.Flush, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("cdcjoin: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	return w, func() error {
		if err := w.Flush(); err != nil {
			f.Close()
			return fmt.Errorf("cdcjoin: write %s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("cdcjoin: close %s: %w", path, err)
		}
		return nil
	}, nil
}

func runReplay(ctx context.Context, cfg *config.Config, a replayArgs, stdout, stderr io.Writer) (retErr error) {
	names := cfg.OutputNames()
	opts := engine.Options{Resume: a.resume}
	// Changes are flushed to their destinations before each state commit;
	// the sinks close after the engine (the engine's deferred Close below
	// runs first).
	out, err := openReplayOutputs(a, names, stdout)
	defer out.close(&retErr)
	if err != nil {
		return err
	}
	var eng *engine.Engine
	if a.clickhouse != "" {
		chCfg, err := cfg.WithClickHouse(a.clickhouse)
		if err != nil {
			return err
		}
		types := func() []row.ColumnType { return eng.OutputTypes() }
		if chCfg.ClickHouse.Mode == config.ModeChangelog && a.changes == "" {
			// Delivery markers: a crash between a batch's INSERTs and its
			// state commit does not count the batch twice (engine/exact.go).
			out.add(clickhouse.NewLazyExact(chCfg, types, func() string { return eng.Stream() }))
		} else {
			if chCfg.ClickHouse.Mode == config.ModeChangelog {
				fmt.Fprintln(stderr, "cdcjoin replay: warning: with --changes as well, the changelog table is written at least once, not exactly once: a crash between a batch's INSERTs and its commit counts that batch twice after --resume (replay into ClickHouse alone for exactly once)")
			}
			out.add(clickhouse.NewLazy(chCfg, types))
		}
	}
	if err := out.options(cfg, a, stdout, &opts); err != nil {
		return err
	}
	in, closeIn, err := openInput(a.input)
	if err != nil {
		return err
	}
	defer closeIn()
	schemas, serr := job.OpenSchemas(cfg, registry.Options{})
	if serr != nil {
		return serr
	}
	defer schemas.Close()
	defer context.AfterFunc(ctx, schemas.Close)() // an interrupt ends a wait for the registry
	opts.Schemas = schemas
	eng, err = engine.Open(cfg, opts)
	if err != nil {
		return err
	}
	defer func() {
		if err := eng.Close(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	if err := eng.Start(ctx); err != nil {
		return err
	}
	if n := eng.Stats().BatchesDelivered; n > 0 {
		fmt.Fprintf(stderr, "cdcjoin replay: %d batches after the state's last commit are held by ClickHouse already (a crash came between their INSERTs and their commit): applying them without inserting again\n", n)
	}
	start := time.Now()
	// Keep the work of complete batches after an error; the partial batch is discarded.
	if err := readInput(ctx, in, a, stderr, eng.Run, func() string { return "" }); err != nil {
		return err
	}
	if err := eng.Commit(ctx); err != nil {
		return err
	}
	st := eng.Stats()
	if !a.quiet {
		el := time.Since(start).Seconds()
		fmt.Fprintf(stderr, "cdcjoin replay: done: %d records (%d events, %d tombstones, %d skipped, %d bad) in %.2fs, %.0f records/s; %d upserts, %d retractions, max fan-out %d\n",
			st.Records, st.Events, st.Tombstones, st.Skipped, st.Bad, el, float64(st.Records)/el, st.Join.Upserts, st.Join.Retractions, st.Join.MaxFanOut)
		if ss, ok := eng.Store().Stats(); ok && cfg.State.RowCacheMB > 0 {
			// Reads ahead (RowCachePrefetched) went to pebble too; their
			// entries' later reads count as hits.
			pebbleReads := ss.RowCacheMisses + ss.RowCachePrefetched
			if reads := ss.RowCacheHits + ss.RowCacheMisses; reads > 0 && pebbleReads*20 > reads {
				fmt.Fprintf(stderr, "cdcjoin replay: %d of %d state reads went to pebble: the state outgrew state.row_cache_mb (%d); "+
					"raising it (memory permitting) speeds up replays whose state fits in memory\n", min(pebbleReads, reads), reads, cfg.State.RowCacheMB)
			}
		}
	}
	if a.final != "" {
		w, closeFn, err := outFile(a.final, stdout)
		if err != nil {
			return err
		}
		var buf []byte
		err = eng.Final(func(_, _ []row.Value, vals []row.Value) error {
			buf = row.AppendJSONObject(buf[:0], names, vals)
			buf = append(buf, '\n')
			_, err := w.Write(buf)
			return err
		})
		if cerr := closeFn(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// replayOutputs are a replay's sinks and what closes them (last-in
// first-out: a sink added later may write through an earlier one's file).
type replayOutputs struct {
	sinks   sink.Tee
	closers []func() error
}

// openReplayOutputs opens --changes (JSON lines of every change) when set.
func openReplayOutputs(a replayArgs, names []string, stdout io.Writer) (*replayOutputs, error) {
	o := &replayOutputs{}
	if a.changes != "" {
		w, err := o.file(a.changes, stdout)
		if err != nil {
			return o, err
		}
		o.sinks = append(o.sinks, jsonl.New(w, names))
	}
	return o, nil
}

// file opens path for writing ("-" is stdout), flushed and closed by close.
func (o *replayOutputs) file(path string, stdout io.Writer) (*bufio.Writer, error) {
	w, closeFn, err := outFile(path, stdout)
	if err != nil {
		return nil, err
	}
	o.closers = append(o.closers, closeFn)
	return w, nil
}

// add adds a sink that close closes.
func (o *replayOutputs) add(s interface {
	sink.Sink
	Close() error
}) {
	o.sinks = append(o.sinks, s)
	o.closers = append(o.closers, s.Close)
}

// options sets opts' Sink to the sinks and its DeadLetters to
// --bad-records under errors.policy dlq (which then needs it).
func (o *replayOutputs) options(cfg *config.Config, a replayArgs, stdout io.Writer, opts *engine.Options) error {
	switch len(o.sinks) {
	case 0:
	case 1:
		opts.Sink = o.sinks[0]
	default:
		opts.Sink = o.sinks
	}
	if cfg.Errors.Policy != config.PolicyDLQ {
		return nil
	}
	if a.bad == "" {
		return fmt.Errorf("cdcjoin replay: errors.policy is dlq: pass --bad-records FILE to receive bad records: %w", errUsage)
	}
	w, err := o.file(a.bad, stdout)
	if err != nil {
		return err
	}
	opts.DeadLetters = deadletter.NewJSONL(w)
	return nil
}

// close closes what was opened, last first, keeping the first error in
// *retErr.
func (o *replayOutputs) close(retErr *error) {
	for i := len(o.closers) - 1; i >= 0; i-- {
		if err := o.closers[i](); err != nil && *retErr == nil {
			*retErr = err
		}
	}
}

// openInput opens --input (- is stdin).
func openInput(path string) (io.Reader, func(), error) {
	if path == "-" {
		return os.Stdin, func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("cdcjoin: %w", err)
	}
	return f, func() { f.Close() }, nil
}

// readInput feeds the records of in to run (an engine's Run), printing a
// progress line (with more's text) every few seconds unless --quiet.
func readInput(ctx context.Context, in io.Reader, a replayArgs, stderr io.Writer,
	run func(context.Context, func(yield func(*engine.Record) error) error) error, more func() string) error {
	start := time.Now()
	lastReport := start
	var n uint64
	err := run(ctx, func(yield func(*engine.Record) error) error {
		return engine.ReadJSONL(in, a.input, func(r *engine.Record) error {
			if err := yield(r); err != nil {
				return err
			}
			n++
			if n&0xffff == 0 && !a.quiet && time.Since(lastReport) >= 2*time.Second {
				lastReport = time.Now()
				el := time.Since(start).Seconds()
				fmt.Fprintf(stderr, "cdcjoin replay: %d records read, %.0f records/s%s\n", n, float64(n)/el, more())
			}
			return nil
		})
	})
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("cdcjoin: replay interrupted after %d records (committed work is kept; rerun with --resume): %w", n, err)
	}
	return err
}

// startCPUProfile profiles the process until the returned stop is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cdcjoin: cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

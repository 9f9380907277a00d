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
		usage:   "--config FILE --input FILE [--changes FILE] [--final FILE] [--resume] [--clickhouse ADDR]",
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
on the first bad record (naming its topic/partition/offset).`)
		cfgPath := fs.String("config", "", "job configuration (YAML) `file` (required)")
		input := fs.String("input", "", "input `file` of records, JSON lines; - for stdin (required)")
		changes := fs.String("changes", "", "write every emitted change as a JSON line to `file` (- for stdout)")
		final := fs.String("final", "", "write the final materialized join to `file` (- for stdout)")
		resume := fs.Bool("resume", false, "continue from the state in state.dir, skipping records at or before its committed positions")
		bad := fs.String("bad-records", "", "with errors.policy dlq: write bad records with their error to `file` (JSON lines)")
		chAddr := fs.String("clickhouse", "", "also write changes to ClickHouse at `host:port` (native protocol); uses the config's clickhouse section")
		quiet := fs.Bool("quiet", false, "no progress lines on stderr")
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
		return runReplay(ctx, cfg, replayArgs{
			input: *input, changes: *changes, final: *final, resume: *resume, bad: *bad,
			clickhouse: *chAddr, quiet: *quiet,
		}, stdout, stderr)
	}
	return c
}

type replayArgs struct {
	input, changes, final, bad, clickhouse string
	resume, quiet                          bool
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
	var opts engine.Options
	opts.Resume = a.resume
	var closers []func() error
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			if err := closers[i](); err != nil && retErr == nil {
				retErr = err
			}
		}
	}()
	// Changes are flushed to their destinations before each state commit;
	// the sinks close after the engine (closers run last-in first-out, and
	// the engine's deferred Close below runs first).
	var sinks sink.Tee
	if a.changes != "" {
		w, closeFn, err := outFile(a.changes, stdout)
		if err != nil {
			return err
		}
		closers = append(closers, closeFn)
		sinks = append(sinks, jsonl.New(w, names))
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
			ch := clickhouse.NewLazyExact(chCfg, types, func() string { return eng.Stream() })
			closers = append(closers, ch.Close)
			sinks = append(sinks, ch)
		} else {
			if chCfg.ClickHouse.Mode == config.ModeChangelog {
				fmt.Fprintln(stderr, "cdcjoin replay: warning: with --changes as well, the changelog table is written at least once, not exactly once: a crash between a batch's INSERTs and its commit counts that batch twice after --resume (replay into ClickHouse alone for exactly once)")
			}
			ch := clickhouse.NewLazy(chCfg, types)
			closers = append(closers, ch.Close)
			sinks = append(sinks, ch)
		}
	}
	switch len(sinks) {
	case 0:
	case 1:
		opts.Sink = sinks[0]
	default:
		opts.Sink = sinks
	}
	if cfg.Errors.Policy == config.PolicyDLQ {
		if a.bad == "" {
			return fmt.Errorf("cdcjoin replay: errors.policy is dlq: pass --bad-records FILE to receive bad records: %w", errUsage)
		}
		w, closeFn, err := outFile(a.bad, stdout)
		if err != nil {
			return err
		}
		closers = append(closers, closeFn)
		opts.DeadLetters = deadletter.NewJSONL(w)
	}

	var in io.Reader = os.Stdin
	if a.input != "-" {
		f, err := os.Open(a.input)
		if err != nil {
			return fmt.Errorf("cdcjoin: %w", err)
		}
		defer f.Close()
		in = f
	}
	schemas, serr := job.OpenSchemas(cfg, registry.Options{})
	if serr != nil {
		return serr
	}
	defer schemas.Close()
	defer context.AfterFunc(ctx, schemas.Close)() // an interrupt ends a wait for the registry
	opts.Schemas = schemas
	eng, err := engine.Open(cfg, opts)
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
	lastReport := start
	var n uint64
	err = eng.Run(ctx, func(yield func(*engine.Record) error) error {
		return engine.ReadJSONL(in, a.input, func(r *engine.Record) error {
			if err := yield(r); err != nil {
				return err
			}
			n++
			if n&0xffff == 0 && !a.quiet && time.Since(lastReport) >= 2*time.Second {
				lastReport = time.Now()
				el := time.Since(start).Seconds()
				fmt.Fprintf(stderr, "cdcjoin replay: %d records read, %.0f records/s\n", n, float64(n)/el)
			}
			return nil
		})
	})
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("cdcjoin: replay interrupted after %d records (committed work is kept; rerun with --resume): %w", n, err)
	}
	if err != nil {
		// Keep the work of complete batches; the partial batch is discarded.
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

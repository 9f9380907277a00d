package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/deadletter"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
	"github.com/cdcjoin/cdcjoin/sink/clickhouse"
	"github.com/cdcjoin/cdcjoin/sink/jsonl"
)

// runTimeReplay is replay for a time join (engine.TimeEngine).
func runTimeReplay(ctx context.Context, cfg *config.Config, a replayArgs, stdout, stderr io.Writer) (retErr error) {
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
	var sinks sink.Tee
	if a.changes != "" {
		w, closeFn, err := outFile(a.changes, stdout)
		if err != nil {
			return err
		}
		closers = append(closers, closeFn)
		sinks = append(sinks, jsonl.New(w, names))
	}
	if a.final != "" {
		// The rows as they are emitted: a time join's output is its
		// rows, not a table to materialize.
		w, closeFn, err := outFile(a.final, stdout)
		if err != nil {
			return err
		}
		closers = append(closers, closeFn)
		var buf []byte
		sinks = append(sinks, sink.Func(func(c *row.Change) error {
			buf = append(row.AppendJSONObject(buf[:0], names, c.Values), '\n')
			_, err := w.Write(buf)
			return err
		}))
	}
	var eng *engine.TimeEngine
	if a.clickhouse != "" {
		chCfg, err := cfg.WithClickHouse(a.clickhouse)
		if err != nil {
			return err
		}
		ch := clickhouse.NewLazyInsert(chCfg, func() []row.ColumnType { return eng.OutputTypes() }, func() string { return eng.Stream() })
		closers = append(closers, ch.Close)
		sinks = append(sinks, ch)
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
			return fmt.Errorf("cdcjoin replay: errors.policy is dlq: pass --bad-records FILE to receive bad records (late ones included): %w", errUsage)
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
	eng, err := engine.OpenTime(cfg, opts)
	if err != nil {
		return err
	}
	defer func() {
		if err := eng.Close(); err != nil && retErr == nil {
			retErr = err
		}
	}()
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
				fmt.Fprintf(stderr, "cdcjoin replay: %d records read, %.0f records/s, watermark %s\n",
					n, float64(n)/time.Since(start).Seconds(), deadletter.FormatTime(eng.Join().Watermark()))
			}
			return nil
		})
	})
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("cdcjoin: replay interrupted after %d records (committed work is kept; rerun with --resume): %w", n, err)
	}
	if err != nil {
		return err
	}
	if a.endOfInput {
		if err := eng.EndOfInput(ctx); err != nil {
			return err
		}
	}
	if err := eng.Commit(ctx); err != nil {
		return err
	}
	if !a.quiet {
		st := eng.Stats()
		el := time.Since(start).Seconds()
		var byTopic []string
		for t, c := range st.LateByTopic {
			byTopic = append(byTopic, fmt.Sprintf("%s %d", t, c))
		}
		sort.Strings(byTopic)
		late := ""
		if len(byTopic) > 0 {
			late = " (" + strings.Join(byTopic, ", ") + ")"
		}
		fmt.Fprintf(stderr, "cdcjoin replay: done: %d records (%d events, %d tombstones, %d skipped, %d bad) in %.2fs, %.0f records/s; %d rows emitted (%d joined, %d padded), %d late records%s, %d duplicates, watermark %s\n",
			st.Records, st.Events, st.Tombstones, st.Skipped, st.Bad, el, float64(st.Records)/el,
			st.Emitted, st.Join.Pairs, st.Join.Outer, st.Late, late, st.Duplicates, deadletter.FormatTime(eng.Join().Watermark()))
	}
	return nil
}

package main

import (
	"context"
	"fmt"
	"io"
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
	dl, closeDL, err := badRecords(cfg, a, stdout)
	if err != nil {
		return err
	}
	if dl != nil {
		closers = append(closers, closeDL)
		opts.DeadLetters = dl
	}
	in, closeIn, err := openInput(a.input)
	if err != nil {
		return err
	}
	defer closeIn()
	eng, err = engine.OpenTime(cfg, opts)
	if err != nil {
		return err
	}
	defer func() {
		if err := eng.Close(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	start := time.Now()
	err = readInput(ctx, in, a, stderr, eng.Run, func() string {
		return ", watermark " + deadletter.FormatTime(eng.CommittedWatermark())
	})
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

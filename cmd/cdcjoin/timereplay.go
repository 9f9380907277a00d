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
)

// runTimeReplay is replay for a time join (engine.TimeEngine).
func runTimeReplay(ctx context.Context, cfg *config.Config, a replayArgs, stdout, stderr io.Writer) (retErr error) {
	names := cfg.OutputNames()
	opts := engine.Options{Resume: a.resume}
	out, err := openReplayOutputs(a, names, stdout)
	defer out.close(&retErr)
	if err != nil {
		return err
	}
	if a.final != "" {
		// The rows as they are emitted: a time join's output is its
		// rows, not a table to materialize.
		w, err := out.file(a.final, stdout)
		if err != nil {
			return err
		}
		var buf []byte
		out.sinks = append(out.sinks, sink.Func(func(c *row.Change) error {
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
		out.add(clickhouse.NewLazyInsert(chCfg, func(context.Context) []row.ColumnType { return eng.OutputTypes() }, func() string { return eng.Stream() }))
	}
	if err := out.options(cfg, a, stdout, &opts); err != nil {
		return err
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

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/sink/clickhouse"
)

func switchCommand() command {
	c := command{
		name:    "switch",
		summary: "change a running job without downtime: point the live view at the new job's table once it caught up",
		usage:   "--config NEW --view NAME [--wait DURATION]",
	}
	c.run = func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		fs := newFlags(&c, stderr, `
The last step of a job change (a column added to the select, another filter
or join kind): the new job (--config, its own name, so its own state,
internal topics, groups and table) runs next to the old one with `+"`cdcjoin run`"+`,
building its state and table from the source topics while the old job keeps
serving. switch waits until the new job has caught up (its keying group at
the source topics' ends, its join group at its keyed topic's end), then
points the live view --view (in the new job's clickhouse.database) at the
new job's table in one atomic step: queries of the view read the old
job's complete table or the new job's, never a partial or empty one.
Creates the view when it does not exist (the first job). Then stop the old
job; its table, internal topics and state can be dropped. See README,
Changing a running job.`)
		cfgPath := fs.String("config", "", "the new job's configuration `file` (required)")
		view := fs.String("view", "", "the live view's `name` (required), e.g. user_domains_live")
		wait := fs.Duration("wait", 30*time.Minute, "how long to wait for the new job to catch up")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if *cfgPath == "" || *view == "" {
			fs.Usage()
			return fmt.Errorf("cdcjoin switch: --config and --view are required: %w", errUsage)
		}
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			return err
		}
		if err := cfg.ValidateForKafka(); err != nil {
			return err
		}
		if cfg.ClickHouse == nil || cfg.ClickHouse.Mode != config.ModeUpsert {
			return fmt.Errorf("cdcjoin switch: %s: the job needs a clickhouse section in upsert mode", *cfgPath)
		}
		wctx, cancel := context.WithTimeout(ctx, *wait)
		defer cancel()
		last := ""
		for {
			ok, behind, err := kafkarun.CaughtUp(wctx, cfg)
			if err == nil && ok {
				break
			}
			msg := behind
			if err != nil {
				msg = err.Error()
			}
			if msg != last {
				fmt.Fprintf(stderr, "cdcjoin switch: waiting for %s to catch up: %s\n", cfg.Name, msg)
				last = msg
			}
			select {
			case <-wctx.Done():
				if errors.Is(wctx.Err(), context.DeadlineExceeded) {
					return fmt.Errorf("cdcjoin switch: %s did not catch up within %v (%s); the view was not changed", cfg.Name, *wait, msg)
				}
				return wctx.Err()
			case <-time.After(time.Second):
			}
		}
		stmts, err := clickhouse.SwitchView(ctx, cfg, *view)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "switched %s.%s to %s.%s:\n  %s\nnow stop the old job\n", cfg.ClickHouse.Database, *view,
			cfg.ClickHouse.Database, cfg.ClickHouse.Table, strings.ReplaceAll(strings.Join(stmts, ";\n"), "\n", "\n  "))
		return nil
	}
	return c
}

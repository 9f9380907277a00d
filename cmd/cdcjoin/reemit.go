package main

import (
	"context"
	"fmt"
	"io"

	"github.com/cdcjoin/cdcjoin/reemit"
)

func reemitCommand() command {
	c := command{
		name:    "reemit",
		summary: "bring the ClickHouse table back to the join the state holds (after a TRUNCATE or lost rows)",
		usage:   "--config FILE [--log-format text|json] [--log-level LEVEL]",
	}
	c.run = func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		fs := newFlags(&c, stderr, `
Compares the job's ClickHouse table with the join held in this instance's
state.dir and writes the difference: rows the table lacks (or holds at an
older version) are inserted with the versions they were emitted with; rows
it holds that the state does not have are deleted (upsert mode) or
cancelled (changelog mode: every row key's sum(_sign) ends 0 or 1, also
after retractions that landed on a truncated table). Idempotent: a second
run writes nothing.

Run it with `+"`cdcjoin run`"+` stopped (SIGTERM) on every instance of the job
whose state.dir holds keyed partitions, one after the other, then start `+"`run`"+`
again. A partition whose state is behind the job's committed position (a
kill -9) is refused: start `+"`run`"+`, wait for /readyz 200, stop it with
SIGTERM, and run reemit again.`)
		cfg, log, err := kafkaJobFlags(fs, stderr).open(fs, args)
		if err != nil {
			return err
		}
		rep, err := reemit.Run(ctx, cfg, log)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "reemit done: keyed partitions %v, %d rows in the state; %d inserted, %d cancelled, %d deleted, %d of other partitions left alone\n",
			rep.Partitions, rep.StateRows, rep.Inserted, rep.Cancelled, rep.Deleted, rep.Skipped)
		return nil
	}
	return c
}

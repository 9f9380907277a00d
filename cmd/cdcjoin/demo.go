package main

import (
	"context"
	"fmt"
	"io"

	"github.com/cdcjoin/cdcjoin/demo"
)

func demoCommand() command {
	c := command{
		name:    "demo",
		summary: "zero-setup demo: the example join on an in-process Kafka",
		usage:   "[--clickhouse ADDR]",
	}
	c.run = func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		fs := newFlags(&c, stderr, `
Starts an in-process Kafka, loads the example users and domains as Debezium
events, runs the real "run" code path, then plays a scripted change stream
(rename a user, move a domain to another user, delete a user, add a domain),
printing the joined table and the upserts/retractions after each step.
Needs nothing installed; exits 0 when every step showed the expected join.`)
		chAddr := fs.String("clickhouse", "", "also write the join to ClickHouse at `host:port` (native protocol): database cdcjoin_demo")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if err := demo.Run(ctx, stdout, demo.Options{ClickHouseAddr: *chAddr}); err != nil {
			return fmt.Errorf("%w", err)
		}
		return nil
	}
	return c
}

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/keyed"
)

func runCommand() command   { return notYet("run", "run the join as a service on Kafka") }
func demoCommand() command  { return notYet("demo", "zero-setup demo on an in-process Kafka") }
func ddlCommand() command   { return notYet("ddl", "print the ClickHouse DDL for a config") }
func benchCommand() command { return notYet("bench", "benchmark harness") }

func notYet(name, summary string) command {
	return command{name: name, summary: summary, run: func(context.Context, []string, io.Writer, io.Writer) error {
		return fmt.Errorf("cdcjoin %s: not available in this build", name)
	}}
}

func clickhouseEmitter(ctx context.Context, cfg *config.Config, addr string) (keyed.Emit, func(context.Context) error, func() error, error) {
	return nil, nil, nil, fmt.Errorf("cdcjoin: --clickhouse: not available in this build")
}

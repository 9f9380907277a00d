// Command standin is a minimal `cdcjoin run --config F` (Kafka runtime +
// ClickHouse sink, logs to stderr) that e2e/run.sh uses only while the
// cdcjoin binary it builds has no working `run` command yet, so that the
// e2e can exercise the runtime and the sink end to end meanwhile. It is not
// a user-facing program: run.sh says loudly when it falls back to it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/runtime"
	"github.com/cdcjoin/cdcjoin/sink/clickhouse"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "run" {
		fmt.Fprintln(os.Stderr, "usage: standin run --config F")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	path := fs.String("config", "", "config file")
	_ = fs.Parse(os.Args[2:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *path); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, path string) error {
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	sk, err := clickhouse.Open(ctx, cfg, clickhouse.Options{})
	if err != nil {
		return err
	}
	defer sk.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return runtime.Run(ctx, cfg, runtime.Options{Sink: sk, Logger: log})
}

package bench

import (
	"context"
	"fmt"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/sink"
	"github.com/cdcjoin/cdcjoin/sink/clickhouse"
)

// clickhouseYAML is the job's clickhouse section for addr (table
// bench_changes, created by the sink when absent).
func clickhouseYAML(addr string) string {
	return fmt.Sprintf("clickhouse: {addr: [%q], table: bench_changes}\n", addr)
}

func openClickHouse(ctx context.Context, cfg *config.Config) (sink.Sink, error) {
	s, err := clickhouse.Open(ctx, cfg, clickhouse.Options{})
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: bench: clickhouse sink: %w", err)
	}
	return s, nil
}

package main

import (
	"context"
	"fmt"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink/clickhouse"
)

// withClickHouseAddr returns cfg with its clickhouse section pointed at addr
// (creating a default section when the file has none), validated again so
// that defaults apply.
func withClickHouseAddr(cfg *config.Config, addr string) (*config.Config, error) {
	return cfg.WithClickHouse(addr)
}

// clickhouseEmitter returns an emit/flush/close triple writing changes to
// ClickHouse. The sink is opened at the first change, so that the table can
// be typed from the Debezium schemas seen by then (types()).
func clickhouseEmitter(ctx context.Context, cfg *config.Config, addr string, types func() []row.ColumnType) (keyed.Emit, func(context.Context) error, func() error, error) {
	cfg, err := withClickHouseAddr(cfg, addr)
	if err != nil {
		return nil, nil, nil, err
	}
	var s *clickhouse.Sink
	var one [1]row.Change
	emit := func(c *row.Change) error {
		if s == nil {
			var err error
			s, err = clickhouse.Open(ctx, cfg, clickhouse.Options{Types: types()})
			if err != nil {
				return err
			}
		}
		one[0] = *c
		return s.Write(ctx, one[:])
	}
	flush := func(ctx context.Context) error {
		if s == nil {
			return nil
		}
		return s.Flush(ctx)
	}
	closeFn := func() error {
		if s == nil {
			return nil
		}
		if err := s.Close(); err != nil {
			return fmt.Errorf("cdcjoin: close clickhouse sink: %w", err)
		}
		return nil
	}
	return emit, flush, closeFn, nil
}

package clickhouse

import (
	"context"
	"fmt"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/row"
)

// Lazy is a ClickHouse sink opened at its first Write, so that a table it
// creates is typed with the column types learned by then (types, e.g. from
// the Debezium schemas the engine has decoded). Not safe for concurrent
// use.
type Lazy struct {
	cfg   *config.Config
	types func() []row.ColumnType
	s     *Sink
}

// NewLazy returns a sink that opens Open(ctx, cfg, Options{Types: types()})
// when the first changes arrive.
func NewLazy(cfg *config.Config, types func() []row.ColumnType) *Lazy {
	return &Lazy{cfg: cfg, types: types}
}

// Write implements sink.Sink.
func (l *Lazy) Write(ctx context.Context, changes []row.Change) error {
	if l.s == nil {
		s, err := Open(ctx, l.cfg, Options{Types: l.types()})
		if err != nil {
			return err
		}
		l.s = s
	}
	return l.s.Write(ctx, changes)
}

// Flush implements sink.Sink.
func (l *Lazy) Flush(ctx context.Context) error {
	if l.s == nil {
		return nil
	}
	return l.s.Flush(ctx)
}

// Close implements sink.Sink.
func (l *Lazy) Close() error {
	if l.s == nil {
		return nil
	}
	if err := l.s.Close(); err != nil {
		return fmt.Errorf("cdcjoin: close clickhouse sink: %w", err)
	}
	return nil
}

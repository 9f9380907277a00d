package clickhouse

import (
	"context"
	"fmt"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
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

// LazyExact is a changelog sink with delivery markers (a sink.Positioned,
// see OpenExact) opened at its first batch, so that a table it creates is
// typed with the column types learned by then. The stream name is asked
// for (stream) when the sink is first used: the engine that owns the
// stream can then be opened after the sink. Not safe for concurrent use.
type LazyExact struct {
	cfg    *config.Config
	types  func() []row.ColumnType
	stream func() string
	ctx    context.Context // Delivered's, for opening the sink at Begin
	s      *Exact
}

var _ sink.Positioned = (*LazyExact)(nil)

// NewLazyExact returns a LazyExact for cfg (changelog mode).
func NewLazyExact(cfg *config.Config, types func() []row.ColumnType, stream func() string) *LazyExact {
	return &LazyExact{cfg: cfg, types: types, stream: stream, ctx: context.Background()}
}

// Delivered implements sink.Positioned. Before the sink is opened it reads
// the markers through a sink opened for that alone (its table is not
// created by it).
func (l *LazyExact) Delivered(ctx context.Context) (sink.Delivery, error) {
	l.ctx = context.WithoutCancel(ctx)
	if l.s != nil {
		return l.s.Delivered(ctx)
	}
	probe, err := OpenExact(ctx, l.cfg, Options{Stream: l.stream()})
	if err != nil {
		return sink.Delivery{}, err
	}
	d, err := probe.Delivered(ctx)
	if cerr := probe.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("cdcjoin: close clickhouse sink: %w", cerr)
	}
	return d, err
}

// Begin implements sink.Positioned; the first Begin opens the sink.
func (l *LazyExact) Begin(from int64) error {
	if l.s == nil {
		s, err := OpenExact(l.ctx, l.cfg, Options{Types: l.types(), Stream: l.stream()})
		if err != nil {
			return err
		}
		if _, err := s.Delivered(l.ctx); err != nil {
			s.Close()
			return err
		}
		l.s = &s
	}
	return l.s.Begin(from)
}

// Replaying implements sink.Positioned.
func (l *LazyExact) Replaying() bool { return l.s != nil && l.s.Replaying() }

// End implements sink.Positioned.
func (l *LazyExact) End(ctx context.Context, to int64) error {
	if l.s == nil {
		return fmt.Errorf("cdcjoin: clickhouse: End without Begin")
	}
	return l.s.End(ctx, to)
}

// Write implements sink.Sink (after Begin).
func (l *LazyExact) Write(ctx context.Context, changes []row.Change) error {
	if l.s == nil {
		return fmt.Errorf("cdcjoin: clickhouse: Write before Begin")
	}
	return l.s.Write(ctx, changes)
}

// Flush implements sink.Sink.
func (l *LazyExact) Flush(ctx context.Context) error {
	if l.s == nil {
		return nil
	}
	return l.s.Flush(ctx)
}

// Close implements sink.Sink.
func (l *LazyExact) Close() error {
	if l.s == nil {
		return nil
	}
	if err := l.s.Close(); err != nil {
		return fmt.Errorf("cdcjoin: close clickhouse sink: %w", err)
	}
	return nil
}

// LazyInsert is an insert-mode sink (a time join's rows, insert.go)
// opened at its first Write, so that a table it creates is typed with the
// column types known by then (types, asked for with the Write's context),
// and where those and the declared types know nothing about a column, by
// its first non-NULL value among the first Write's changes (else the open
// fails with an *UntypedError); the stream is asked for then too. Not safe
// for concurrent use.
type LazyInsert struct {
	cfg    *config.Config
	types  func(context.Context) []row.ColumnType
	stream func() string
	s      *Sink
}

// NewLazyInsert returns a LazyInsert for cfg (mode insert).
func NewLazyInsert(cfg *config.Config, types func(context.Context) []row.ColumnType, stream func() string) *LazyInsert {
	return &LazyInsert{cfg: cfg, types: types, stream: stream}
}

// Write implements sink.Sink.
func (l *LazyInsert) Write(ctx context.Context, changes []row.Change) error {
	if l.s == nil {
		s, err := open(ctx, l.cfg, Options{Types: l.types(ctx), Stream: l.stream()}, sampleRow(changes, len(l.cfg.OutputNames())))
		if err != nil {
			return err
		}
		l.s = s
	}
	return l.s.Write(ctx, changes)
}

// Flush implements sink.Sink.
func (l *LazyInsert) Flush(ctx context.Context) error {
	if l.s == nil {
		return nil
	}
	return l.s.Flush(ctx)
}

// Dropped reports the rows not sent because the table held them already.
func (l *LazyInsert) Dropped() uint64 {
	if l.s == nil {
		return 0
	}
	return l.s.Dropped()
}

// Close implements sink.Sink.
func (l *LazyInsert) Close() error {
	if l.s == nil {
		return nil
	}
	if err := l.s.Close(); err != nil {
		return fmt.Errorf("cdcjoin: close clickhouse sink: %w", err)
	}
	return nil
}

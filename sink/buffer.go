package sink

import (
	"context"

	"github.com/cdcjoin/cdcjoin/row"
)

// Buffer collects the changes a join emits — copying them, since the join
// reuses a Change's slices — and hands them to a Sink in chunks of at most
// Chunk changes, so that a fan-out of millions of rows streams through
// bounded memory. Both drivers (engine, kafkarun) write through one. Not
// safe for concurrent use.
type Buffer struct {
	s       Sink
	chunk   int
	buf     []row.Change
	vals    []row.Value // arena for copied values
	written int         // changes handed to the sink since the last Flush
}

// DefaultChunk is the chunk size of NewBuffer(s, 0).
const DefaultChunk = 1024

// NewBuffer returns a buffer writing to s in chunks of chunk changes
// (DefaultChunk when chunk ≤ 0). s nil discards changes (they are still
// counted).
func NewBuffer(s Sink, chunk int) *Buffer {
	if chunk <= 0 {
		chunk = DefaultChunk
	}
	return &Buffer{s: s, chunk: chunk}
}

// Emitter returns the function to pass to the join as its emit callback
// (keyed.Emit): it copies each change and writes a chunk whenever one is
// full, with ctx. Errors are the sink's.
func (b *Buffer) Emitter(ctx context.Context) func(*row.Change) error {
	return func(c *row.Change) error { return b.Add(ctx, c) }
}

// Add copies c into the buffer, writing the buffered chunk when full.
func (b *Buffer) Add(ctx context.Context, c *row.Change) error {
	cp := *c
	cp.ParentKey = b.copyVals(c.ParentKey)
	if c.ChildKey != nil {
		cp.ChildKey = b.copyVals(c.ChildKey)
	}
	cp.Values = b.copyVals(c.Values)
	if c.Prev != nil {
		cp.Prev = b.copyVals(c.Prev)
	}
	b.buf = append(b.buf, cp)
	if len(b.buf) >= b.chunk {
		return b.Write(ctx)
	}
	return nil
}

func (b *Buffer) copyVals(v []row.Value) []row.Value {
	if cap(b.vals)-len(b.vals) < len(v) {
		// The changes already buffered keep the old arena.
		b.vals = make([]row.Value, 0, max(4096, 2*cap(b.vals), len(v)))
	}
	n := len(b.vals)
	b.vals = append(b.vals, v...)
	return b.vals[n:len(b.vals):len(b.vals)]
}

// Write hands the buffered changes to the sink (the sink copies what it
// keeps, so the buffer reuses its arena).
func (b *Buffer) Write(ctx context.Context) error {
	if len(b.buf) == 0 {
		return nil
	}
	if b.s != nil {
		if err := b.s.Write(ctx, b.buf); err != nil {
			return err
		}
	}
	b.written += len(b.buf)
	clear(b.buf)
	b.buf = b.buf[:0]
	clear(b.vals) // drop the strings the values reference
	b.vals = b.vals[:0]
	return nil
}

// Flush writes what is buffered and flushes the sink (blocking until the
// destination accepted everything written). It reports how many changes
// the flush covered.
func (b *Buffer) Flush(ctx context.Context) (int, error) {
	if err := b.Write(ctx); err != nil {
		return 0, err
	}
	n := b.written
	if n > 0 && b.s != nil {
		if err := b.s.Flush(ctx); err != nil {
			return 0, err
		}
	}
	b.written = 0
	return n, nil
}

// Discard drops buffered changes that were not written (after a failed
// batch; what was written already is the sink's to drop on Close).
func (b *Buffer) Discard() {
	clear(b.buf)
	b.buf = b.buf[:0]
	b.vals = nil
	b.written = 0
}

// Func adapts a function receiving one change at a time (tests, models) to
// a Sink whose Flush does nothing. The function must copy what it keeps.
type Func func(*row.Change) error

// Write implements Sink.
func (f Func) Write(_ context.Context, cs []row.Change) error {
	for i := range cs {
		if err := f(&cs[i]); err != nil {
			return err
		}
	}
	return nil
}

// Flush implements Sink.
func (f Func) Flush(context.Context) error { return nil }

// Close implements Sink.
func (f Func) Close() error { return nil }

// Tee writes every change to each sink in turn; Flush flushes all. It does
// not close them.
type Tee []Sink

// Write implements Sink.
func (t Tee) Write(ctx context.Context, cs []row.Change) error {
	for _, s := range t {
		if err := s.Write(ctx, cs); err != nil {
			return err
		}
	}
	return nil
}

// Flush implements Sink.
func (t Tee) Flush(ctx context.Context) error {
	for _, s := range t {
		if err := s.Flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Close implements Sink (a no-op: the caller owns the sinks).
func (t Tee) Close() error { return nil }

package sink_test

import (
	"context"
	"testing"

	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// recorder keeps copies of what it is given and counts calls.
type recorder struct {
	writes, flushes int
	got             []string
}

func (r *recorder) Write(_ context.Context, cs []row.Change) error {
	r.writes++
	for _, c := range cs {
		r.got = append(r.got, c.Values[0].Text())
	}
	return nil
}
func (r *recorder) Flush(context.Context) error { r.flushes++; return nil }
func (r *recorder) Close() error                { return nil }

// TestBuffer: changes are copied (the emitter reuses its Change), written
// in chunks of the chunk size, and Flush writes the rest and flushes once.
func TestBuffer(t *testing.T) {
	rec := &recorder{}
	b := sink.NewBuffer(rec, 3)
	ctx := context.Background()
	emit := b.Emitter(ctx)
	vals := make([]row.Value, 1)
	c := row.Change{Op: row.Upsert, ParentKey: vals[:0:0], Values: vals}
	for i := 0; i < 7; i++ {
		vals[0] = row.Int(int64(i)) // the emitter's slices change under the buffer
		if err := emit(&c); err != nil {
			t.Fatal(err)
		}
	}
	if rec.writes != 2 || len(rec.got) != 6 {
		t.Fatalf("after 7 changes in chunks of 3: %d writes of %d changes", rec.writes, len(rec.got))
	}
	n, err := b.Flush(ctx)
	if err != nil || n != 7 || rec.flushes != 1 || len(rec.got) != 7 {
		t.Fatalf("flush: %d %v; %d flushes, %d changes", n, err, rec.flushes, len(rec.got))
	}
	for i, v := range rec.got {
		if v != row.Int(int64(i)).Text() {
			t.Fatalf("change %d has value %s: the buffer did not copy", i, v)
		}
	}
	if n, _ := b.Flush(ctx); n != 0 || rec.flushes != 1 {
		t.Fatalf("an empty flush flushed the sink (%d, %d flushes)", n, rec.flushes)
	}
	emit(&c)
	b.Discard()
	if n, _ := b.Flush(ctx); n != 0 || len(rec.got) != 7 {
		t.Fatalf("a discarded change was written")
	}
}

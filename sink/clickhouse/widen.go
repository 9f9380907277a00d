package clickhouse

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/cdcjoin/cdcjoin/row"
)

// Widening: a source column whose type grew (ALTER TABLE … TYPE bigint,
// numeric(p,s) to a larger one, real to double precision, DROP NOT NULL)
// sends values that the table's column, created from the old type, cannot
// hold. With clickhouse.create_table on, the sink widens the column
// (ALTER TABLE … MODIFY COLUMN, which keeps every stored value exactly) and
// goes on; other sinks of the table (one per keyed partition in `run`) find
// the new type at their next INSERT and move their batches to it. Without
// create_table, or for a change that is no widening, the sink stops with an
// error naming the column, its type, the value, the type it needs and the
// statement to run.

// fitError is a value that its column's ClickHouse type cannot hold.
type fitError struct {
	col int
	v   row.Value
	err error
}

func (e *fitError) Error() string { return e.err.Error() }
func (e *fitError) Unwrap() error { return e.err }

// widenFor returns the smallest type that holds everything t holds and v
// too, when there is a lossless one.
func widenFor(t colType, v row.Value) (string, bool) {
	wrap := func(base string) string {
		if t.nullable {
			return "Nullable(" + base + ")"
		}
		return base
	}
	switch {
	case t.base == tArray:
		return "", false
	case v.Kind == row.KindNull:
		if t.nullable {
			return "", false
		}
		return "Nullable(" + t.name + ")", true
	}
	switch t.base {
	case tInt8, tInt16, tInt32:
		if v.Kind == row.KindInt {
			return wrap("Int64"), true
		}
	case tFloat32:
		if v.Kind == row.KindFloat || v.Kind == row.KindInt {
			return wrap("Float64"), true
		}
	case tDecimal:
		var s string
		switch v.Kind {
		case row.KindDecimal, row.KindString:
			s = v.Str
		case row.KindInt:
			s = strconv.FormatInt(v.Int, 10)
		default:
			return "", false
		}
		intDigits, frac, ok := decimalDigits(s)
		if !ok {
			return "", false
		}
		scale := max(t.scale, frac)
		prec := max(t.prec-t.scale, intDigits) + scale
		if prec > 38 {
			return "", false
		}
		return wrap(fmt.Sprintf("Decimal(%d, %d)", prec, scale)), true
	}
	return "", false
}

// widen makes column fe.col hold fe.v: flushes what was written with the
// old type, widens the column and takes the table's new types. Without
// create_table, or without a lossless wider type, it returns the error
// that stops the sink.
func (s *Sink) widen(ctx context.Context, fe *fitError) error {
	s.mu.Lock()
	old := s.types[fe.col]
	s.mu.Unlock()
	name := s.names[fe.col]
	to, ok := widenFor(old, fe.v)
	stmt := fmt.Sprintf("ALTER TABLE %s MODIFY COLUMN %s %s", tableName(s.chc), quoteIdent(name), to)
	switch {
	case !ok:
		return fmt.Errorf("cdcjoin: clickhouse: column %s of %s.%s is %s, which cannot hold %s %q (%v), and no wider type holds both: the source column's type changed; give the column a type that does (clickhouse.columns, or ALTER TABLE … MODIFY COLUMN), or rebuild the table",
			name, s.chc.Database, s.chc.Table, old.name, fe.v.Kind, fe.v.Text(), fe.err)
	case !s.chc.CreateTableEnabled():
		return fmt.Errorf("cdcjoin: clickhouse: column %s of %s.%s is %s, which cannot hold %s %q (%v): the source column was widened; run %s (or set clickhouse.create_table: true, and cdcjoin widens it itself), then restart",
			name, s.chc.Database, s.chc.Table, old.name, fe.v.Kind, fe.v.Text(), fe.err, stmt)
	}
	if err := s.Flush(ctx); err != nil {
		return err
	}
	if err := s.retry(ctx, "widen column", func(ctx context.Context) error { return s.conn.Exec(ctx, stmt) }); err != nil {
		return fmt.Errorf("%w\nstatement: %s", err, stmt)
	}
	s.st.widened.Add(1)
	return s.refreshTypes(ctx)
}

// refreshTypes reads the table's column types again and moves the open
// batch (and recycled ones) to them.
func (s *Sink) refreshTypes(ctx context.Context) error {
	ti, err := s.describe(ctx)
	if err != nil {
		return err
	}
	if ti == nil {
		return fmt.Errorf("cdcjoin: clickhouse: table %s.%s disappeared", s.chc.Database, s.chc.Table)
	}
	types, err := s.check(ti)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.types = types
	for {
		select {
		case <-s.free: // batches of the old types
			continue
		default:
		}
		break
	}
	if s.cur != nil {
		if err := s.cur.retype(s); err != nil {
			return err
		}
	}
	return nil
}

// retype moves b's columns to the sink's current types (a widened column:
// every value read back and converted).
func (b *batch) retype(s *Sink) error {
	for i, t := range s.types {
		if b.types[i].name == t.name {
			continue
		}
		c := newColumn(t)
		for r := 0; r < b.rows; r++ {
			v, ok := b.cols[i].value(r)
			if !ok {
				return fmt.Errorf("cdcjoin: clickhouse: column %s changed from %s to %s while a batch held rows of it: restart cdcjoin", s.names[i], b.types[i].name, t.name)
			}
			if err := c.put(r, v); err != nil {
				return fmt.Errorf("cdcjoin: clickhouse: column %s changed from %s to %s, which cannot hold its value %q: %w", s.names[i], b.types[i].name, t.name, v.Text(), err)
			}
		}
		b.cols[i], b.types[i] = c, t
	}
	return nil
}

// adapt moves a sealed batch to the table's types when another sink (or a
// DBA) changed a column since the batch was made; the INSERT being prepared
// names the server's types.
func (s *Sink) adapt(ctx context.Context, b *batch, server []string) error {
	stale := false
	for i := range b.types {
		if i < len(server) && !sameType(server[i], b.types[i].name) {
			stale = true
		}
	}
	if !stale {
		return nil
	}
	if err := s.refreshTypes(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return b.retype(s)
}

// sameType compares ClickHouse type names ignoring spaces.
func sameType(a, b string) bool {
	return strings.ReplaceAll(a, " ", "") == strings.ReplaceAll(b, " ", "")
}

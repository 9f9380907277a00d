package clickhouse

import (
	"context"
	"fmt"
	"strings"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// Exactly-once changelog (sink.Positioned).
//
// A changelog row inserted twice counts twice in sum(_sign), so a replay
// after a crash must not insert again what landed before. A driver
// (Options.Stream set) brackets each batch of its input with Begin(from)
// and End(to). The sink cuts the batch's rows into INSERTs at
// deterministic points (every 2 × batch.rows rows or 2 × batch.bytes bytes
// within the batch, and the batch's end), so replaying the same input
// yields the same INSERTs, and every INSERT carries, in the same block (one
// block is one part: atomic, on 18.16 too), two delivery-marker rows of
// the stream:
//
//	_pk = '\0cdcjoin', _ck = the stream, _sign = +1, _version = this INSERT's marker
//	_pk = '\0cdcjoin', _ck = the stream, _sign = -1, _version = the previous INSERT's marker
//
// The select columns of a marker row hold their type's zero value (NULL
// when Nullable). sum(_sign) over the marker key is 0 at all times (every
// INSERT adds +1 and -1), so marker rows change no _sign-weighted
// aggregate; VersionedCollapsingMergeTree collapses each +1 with the -1 the
// next INSERT brings, leaving the latest +1 (and the first INSERT's -1 at
// version 0). appendKey never writes a NUL byte, so no row of the join has
// the marker's _pk.
//
// A marker's version encodes the position: a cut inside the batch that
// began at position from is from<<20 | i<<1 (i = 1, 2, … for the first,
// second, … cut); the batch's last INSERT, ending at position to, is
// to<<20 | 1. Versions grow with every INSERT of a stream, and INSERTs of a
// stream are sent one at a time, each after the previous one was
// acknowledged, so the largest +1 marker names the last INSERT that landed
// (Delivered): a complete batch (what to hand the driver: input below to
// was delivered), or i cuts of a batch that began at from (the driver
// replays it from from; Begin(from) makes the sink drop those i INSERTs
// instead of sending them again).
//
// An INSERT retried after an ambiguous failure (the connection broke after
// the data was sent) is first looked up by its marker and not sent again
// if it landed; on 22.2+ the deduplication token drops it anyway.
const (
	markerPK    = "\x00cdcjoin"
	markerShift = 20
	maxCuts     = 1<<(markerShift-1) - 1
	maxPosition = 1<<(64-markerShift) - 1
)

// markerVersion returns the marker of the i-th cut (i ≥ 1) of the batch that
// began at pos, or, for last, of the final INSERT of a batch ending at pos.
func markerVersion(pos int64, i int, last bool) uint64 {
	if last {
		return uint64(pos)<<markerShift | 1
	}
	return uint64(pos)<<markerShift | uint64(i)<<1
}

// deliveryOf decodes the latest marker v (0: none).
func deliveryOf(v uint64) sink.Delivery {
	if v == 0 {
		return sink.Delivery{Complete: true}
	}
	pos := int64(v >> markerShift)
	if v&1 == 1 {
		return sink.Delivery{Pos: pos, Complete: true}
	}
	return sink.Delivery{Pos: pos, Chunks: int(v>>1) & maxCuts}
}

// exact is the marker state of a sink with Options.Stream. Guarded by
// Sink.mu, except stream (immutable).
type exact struct {
	stream  string
	queried bool          // Delivered was asked
	found   sink.Delivery // what Delivered found, until Begin consumes a partial batch
	prev    uint64        // the latest marker that landed (or was accepted)
	from    int64         // position of the batch in progress; -1: none
	cuts    int           // INSERTs cut inside the batch in progress
	skip    int           // of them, how many landed before (a replayed batch)
	values  []row.Value   // the select values of marker rows
}

// Exact is a changelog sink with delivery markers: a sink.Positioned.
type Exact struct{ *Sink }

var _ sink.Positioned = Exact{}
var _ sink.Batcher = (*Sink)(nil)

// OpenExact opens a changelog sink with delivery markers for the input
// named opts.Stream (required): see Open, and the package documentation.
func OpenExact(ctx context.Context, cfg *config.Config, opts Options) (Exact, error) {
	if opts.Stream == "" {
		return Exact{}, fmt.Errorf("cdcjoin: clickhouse: OpenExact needs Options.Stream")
	}
	s, err := Open(ctx, cfg, opts)
	if err != nil {
		return Exact{}, err
	}
	return Exact{s}, nil
}

// markerValues returns a row of zero values for columns of types (NULL for
// Nullable ones), as the sink's column conversions accept them.
func markerValues(types []colType) []row.Value {
	out := make([]row.Value, len(types))
	for i, t := range types {
		switch {
		case t.nullable:
			out[i] = row.Null()
		case t.base == tString:
			out[i] = row.String("")
		case t.base == tUUID:
			out[i] = row.String("00000000-0000-0000-0000-000000000000")
		case t.base == tDate || t.base == tDateTime || t.base == tDateTime64:
			out[i] = row.Timestamp(0)
		default: // integers, floats, decimals
			out[i] = row.Int(0)
		}
	}
	return out
}

// sqlString quotes s as a ClickHouse string literal.
func sqlString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\x00", `\0`)
	return "'" + r.Replace(s) + "'"
}

// latestMarker returns the largest +1 marker version of the stream at or
// above atLeast (0: none), in one attempt.
func (s *Sink) latestMarker(ctx context.Context, atLeast uint64) (uint64, error) {
	q := fmt.Sprintf("SELECT max(%s) FROM %s WHERE %s = %s AND %s = %s AND %s = 1 AND %s >= %d",
		colVersion, tableName(s.chc), colPK, sqlString(markerPK), colCK, sqlString(s.ex.stream), colSign, colVersion, atLeast)
	var v uint64
	err := s.conn.QueryRow(ctx, q).Scan(&v)
	return v, err
}

// Delivered implements sink.Positioned: it reads the stream's latest
// delivery marker (nothing when the table does not exist yet).
func (e Exact) Delivered(ctx context.Context) (sink.Delivery, error) {
	s := e.Sink
	if s.ex == nil {
		return sink.Delivery{}, fmt.Errorf("cdcjoin: clickhouse: Delivered needs Options.Stream (changelog mode)")
	}
	var v uint64
	if s.ready.Load() || s.tableExists(ctx) {
		err := s.retry(ctx, "read delivery markers", func(ctx context.Context) error {
			var err error
			v, err = s.latestMarker(ctx, 0)
			return err
		})
		if err != nil {
			return sink.Delivery{}, err
		}
	}
	d := deliveryOf(v)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ex.queried, s.ex.found, s.ex.prev = true, d, v
	return d, nil
}

// Begin implements sink.Positioned.
func (e Exact) Begin(from int64) error {
	s := e.Sink
	s.mu.Lock()
	defer s.mu.Unlock()
	ex := s.ex
	switch {
	case ex == nil:
		return fmt.Errorf("cdcjoin: clickhouse: Begin needs Options.Stream (changelog mode)")
	case !ex.queried:
		return fmt.Errorf("cdcjoin: clickhouse: Begin before Delivered")
	case from < 0 || from > maxPosition:
		return fmt.Errorf("cdcjoin: clickhouse: position %d out of range", from)
	case s.cur != nil && s.cur.rows > 0 || len(s.pending) > 0:
		return fmt.Errorf("cdcjoin: clickhouse: Begin with rows of the previous batch not ended")
	}
	ex.from, ex.cuts, ex.skip = from, 0, 0
	if !ex.found.Complete && ex.found.Pos == from {
		ex.skip = ex.found.Chunks
	}
	ex.found = sink.Delivery{Complete: true, Pos: ex.found.Pos}
	return nil
}

// Replaying implements sink.Positioned.
func (e Exact) Replaying() bool {
	s := e.Sink
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ex != nil && s.ex.from >= 0 && s.ex.cuts < s.ex.skip
}

// End implements sink.Positioned.
func (e Exact) End(ctx context.Context, to int64) error {
	s := e.Sink
	if err := s.failed(); err != nil {
		return err
	}
	s.mu.Lock()
	ex := s.ex
	var err error
	switch {
	case ex == nil || ex.from < 0:
		err = fmt.Errorf("cdcjoin: clickhouse: End without Begin")
	case ex.cuts < ex.skip:
		err = fmt.Errorf("cdcjoin: clickhouse: batch from %d ended after %d INSERTs, but %d of it landed before: the replay does not match", ex.from, ex.cuts, ex.skip)
	case to < ex.from || to > maxPosition:
		err = fmt.Errorf("cdcjoin: clickhouse: batch from %d ends at %d", ex.from, to)
	}
	need := s.cur != nil && s.cur.rows > 0
	s.mu.Unlock()
	if err != nil {
		return s.setFatal(err)
	}
	if need {
		if err := s.acquire(ctx); err != nil {
			return err
		}
		s.mu.Lock()
		s.markLocked(s.cur, true, to)
		s.sealLocked()
		s.mu.Unlock()
	}
	if err := s.waitPending(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	ex.from = -1
	s.mu.Unlock()
	return nil
}

// markLocked gives batch b, about to be sealed, its delivery markers: the
// final INSERT of the batch ending at to (last), or the next cut inside the
// batch in progress. A cut that landed before (a replayed batch) is marked
// to be skipped instead. No-op without a batch in progress. s.mu is held.
func (s *Sink) markLocked(b *batch, last bool, to int64) {
	ex := s.ex
	if ex == nil || ex.from < 0 || b == nil || b.rows == 0 {
		return
	}
	var v uint64
	if last {
		v = markerVersion(to, 0, true)
	} else {
		ex.cuts++
		if ex.cuts > maxCuts {
			s.fatal = fmt.Errorf("cdcjoin: clickhouse: a batch of more than %d INSERTs", maxCuts)
			return
		}
		v = markerVersion(ex.from, ex.cuts, false)
		if ex.cuts <= ex.skip {
			b.skip = true
		}
	}
	if !b.skip {
		if ex.values == nil {
			ex.values = markerValues(s.types)
		}
		for _, m := range []struct {
			sign int8
			ver  uint64
		}{{1, v}, {-1, ex.prev}} {
			if err := b.appendSigned(s, ex.values, markerPK, ex.stream, m.sign, m.ver); err != nil {
				s.fatal = fmt.Errorf("cdcjoin: clickhouse: delivery marker: %w", err)
				return
			}
		}
	}
	b.marker = v
	ex.prev = v
}

// landed reports whether the INSERT with marker v is in the table (asked
// before retrying it after an ambiguous failure).
func (s *Sink) landed(ctx context.Context, v uint64) (bool, error) {
	got, err := s.latestMarker(ctx, v)
	return got >= v && got != 0, err
}

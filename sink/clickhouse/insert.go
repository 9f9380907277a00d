package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/row"
)

// Insert mode (a time join's output: row.Insert changes).
//
// The table is a plain MergeTree of the emitted rows: the select columns,
// then _stream String (who emitted the row: a replay's state, a keyed
// partition of run) and _seq UInt64 (the row's position in its stream's
// output, row.Change.Version), ORDER BY (_stream, _seq). A driver emits a
// stream's rows in seq order and re-emits the same rows with the same seq
// after a crash (package timejoin is deterministic given its input), so
// each row is inserted exactly once however the process stops, on every
// server version: the sink sends a stream's INSERTs one at a time, each
// one block (one part: atomic, 18.16 included), so max(_seq) of the stream
// is exactly how far delivery got. On setup the sink reads it and drops
// every row at or below it; an INSERT retried after an ambiguous failure
// (the reply was lost) is first looked up the same way. On 22.2+ the table
// also has non_replicated_deduplication_window and every INSERT carries
// insert_deduplication_token = stream:first-last seq. No marker rows: a
// count(*) of the table counts rows.
//
// Why not delivery markers (changelog mode): a MergeTree never removes
// marker rows, so every query would have to filter them; the seq costs 8
// bytes per row and needs no bracketing by the driver (Begin/End).
const (
	colStream = "_stream"
	colSeq    = "_seq"
)

// insertState is the dedup state of a sink in insert mode. Guarded by
// Sink.mu, except stream (immutable).
type insertState struct {
	stream    string
	delivered uint64 // the stream's largest _seq in the table
	dropped   uint64 // rows not sent again (at or below delivered)
}

func (s *Sink) insertMode() bool { return s.chc.Mode == config.ModeInsert }

// readDelivered reads the stream's largest _seq (0 when none).
func (s *Sink) readDelivered(ctx context.Context) (uint64, error) {
	var v uint64
	err := s.retry(ctx, "read delivered rows", func(ctx context.Context) error {
		var err error
		v, err = s.maxSeq(ctx)
		return err
	})
	return v, err
}

// maxSeq reads the stream's largest _seq, once no INSERT of the stream is
// still running on the server: an INSERT whose client was killed or closed
// mid-send may still commit after the client is gone (TestInsertExactlyOnce
// under load: 37 rows twice), so the server's processes are asked first
// (each INSERT's query_id starts with insertQueryID's prefix). A cluster's
// other replicas are not asked.
func (s *Sink) maxSeq(ctx context.Context) (uint64, error) {
	running := fmt.Sprintf("SELECT count() FROM system.processes WHERE query_id LIKE %s", sqlString(insertQueryPrefix(s.ins.stream)+"%"))
	for {
		var n uint64
		if err := s.conn.QueryRow(ctx, running).Scan(&n); err != nil {
			return 0, err
		}
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	var v uint64
	q := fmt.Sprintf("SELECT max(%s) FROM %s WHERE %s = %s", colSeq, tableName(s.chc), colStream, sqlString(s.ins.stream))
	err := s.conn.QueryRow(ctx, q).Scan(&v)
	return v, err
}

// insertQueryPrefix starts the query_id of every INSERT of stream.
func insertQueryPrefix(stream string) string { return "cdcjoin-insert-" + stream + "-" }

// Dropped reports how many rows an insert-mode sink did not send because
// the table held them already (a replay after a crash).
func (s *Sink) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ins == nil {
		return 0
	}
	return s.ins.dropped
}

// addInsert appends an insert-mode row, unless the table has it. s.mu is
// held.
func (b *batch) addInsert(s *Sink, c *row.Change) error {
	if c.Op != row.Insert {
		return fmt.Errorf("cdcjoin: clickhouse: mode insert takes inserts (a time join's rows), not %s", c.Op)
	}
	if c.Version <= s.ins.delivered {
		s.ins.dropped++
		return nil
	}
	if err := b.putValues(s, b.rows, c.Values, s.ins.stream, ""); err != nil {
		return err
	}
	if b.firstSeq == 0 {
		b.firstSeq = c.Version
	}
	b.lastSeq = c.Version
	b.ver = append(b.ver, c.Version)
	b.pk = append(b.pk, s.ins.stream)
	b.rows++
	return nil
}

// insertDDL is the CREATE TABLE of insert mode.
func insertDDL(cfg *config.Config, names, colTypes []string, srv Server) string {
	ch := cfg.ClickHouse
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s%s\n(\n", tableName(ch), onCluster(ch))
	for i, n := range names {
		fmt.Fprintf(&b, "    %s %s,\n", quoteIdent(n), colTypes[i])
	}
	engine, settings := engineFor(ch, srv)
	fmt.Fprintf(&b, "    %s String,\n    %s UInt64\n)\nENGINE = %s\nORDER BY (%s, %s)", colStream, colSeq, engine, colStream, colSeq)
	if len(settings) > 0 {
		fmt.Fprintf(&b, "\nSETTINGS %s", strings.Join(settings, ", "))
	}
	return b.String()
}

package clickhouse

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// ErrClosed is returned by Write and Flush after Close.
var ErrClosed = errors.New("cdcjoin: clickhouse: sink closed")

// attemptTimeout bounds one INSERT attempt.
const attemptTimeout = 2 * time.Minute

// Options are the sink's inputs besides the configuration.
type Options struct {
	// Types are the Debezium column types of the select columns, in select
	// order (nil, or zero entries, when unknown). When the table does not
	// exist and no type is known, the table is created at the first Write
	// with types inferred from its values (see ColumnTypes).
	Types []row.ColumnType
	// Recreate drops the table and its view first (destroys their data:
	// for demos and tests whose versions start over).
	Recreate bool
	// Driven means the caller decides when batches end (sink.Batcher):
	// the sink sends no INSERT on batch.interval, and batch.rows and
	// batch.bytes only cut an INSERT at twice their value (a fan-out larger
	// than a batch still streams); Full reports when a flush is due.
	Driven bool
	// Stream, in changelog mode, names the caller's input for delivery
	// markers (see exact.go and sink.Positioned): the sink then delivers
	// each change exactly once across replays, sends its INSERTs one at a
	// time, and is Driven. One table may hold many streams (a keyed
	// partition each); a stream name must be stable across restarts and
	// change when its positions start over. In insert mode (required
	// there) it is the rows' _stream, their seq numbering's name
	// (insert.go); the sink then sends its INSERTs one at a time.
	Stream string

	// noDedup (tests: the negative control) makes an insert-mode sink
	// ignore what the table holds.
	noDedup bool
}

// Sink writes row.Change values into a ClickHouse table. See the package
// documentation for the table layout and the guarantees.
//
// Write and Flush must not be called concurrently with each other; Stats and
// Close may be called from any goroutine. The sink owns one timer goroutine
// and MaxInFlight insert goroutines; Close stops and waits for them.
type Sink struct {
	cfg  *config.Config
	chc  *config.ClickHouse
	conn driver.Conn
	srv  Server
	opts Options

	ctx    context.Context // the sink's lifetime; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	queue  chan *batch   // sealed batches for the workers; never blocks (see slots)
	slots  chan struct{} // one token per sealed, unfinished batch (cap MaxInFlight)
	free   chan *batch   // recycled batches
	ready  atomic.Bool   // table checked, columns known
	names  []string      // select output names
	types  []colType     // their ClickHouse types, as the table has them
	sql    string        // INSERT INTO db.t (cols…)
	token  bool          // send insert_deduplication_token
	driven bool          // Options.Driven (or Stream)
	closed sync.Once

	mu      sync.Mutex // guards the fields below
	cur     *batch
	pending map[*batch]chan struct{}
	fatal   error
	ex      *exact       // delivery markers (Options.Stream); nil without
	ins     *insertState // mode insert: dedup by (_stream, _seq); nil in the other modes

	st struct {
		batches, rows, bytes, changes, retries, errors, insertNs, maxRows, widened atomic.Uint64
	}
}

var _ sink.Sink = (*Sink)(nil)
var _ sink.StatsReporter = (*Sink)(nil)

// Open connects to ClickHouse, detects the server version, and creates or
// checks the table (unless the table is absent and no column type is known:
// then that happens at the first Write). It fails with a descriptive error
// when an existing table does not match (missing columns, wrong engine or
// sorting key, unsupported types) or the server rejects the credentials;
// retryable failures (server unreachable) are retried per cfg's retry policy
// until ctx ends.
func Open(ctx context.Context, cfg *config.Config, opts Options) (*Sink, error) {
	return open(ctx, cfg, opts, nil)
}

// open is Open, a table it creates typed, where opts.Types and the
// declared types know nothing, by sample (a row of values, e.g. the first
// changes' sampleRow; may be nil) as ColumnTypes does.
func open(ctx context.Context, cfg *config.Config, opts Options, sample []row.Value) (*Sink, error) {
	if cfg.ClickHouse == nil {
		return nil, fmt.Errorf("cdcjoin: clickhouse: the configuration has no clickhouse section")
	}
	c := cfg.ClickHouse
	chOpts := &ch.Options{
		Addr:         c.Addr,
		Auth:         ch.Auth{Database: "default", Username: c.Username, Password: c.Password},
		DialTimeout:  10 * time.Second,
		ReadTimeout:  attemptTimeout,
		MaxOpenConns: c.MaxInFlight + 2,
		MaxIdleConns: c.MaxInFlight + 2,
		Compression:  &ch.Compression{Method: ch.CompressionLZ4},
	}
	if c.TLS.Enabled {
		tc, err := c.TLS.ClientConfig()
		if err != nil {
			return nil, err
		}
		chOpts.TLS = tc
	}
	inFlight := c.MaxInFlight
	var ex *exact
	var ins *insertState
	if c.Mode == config.ModeInsert {
		if opts.Stream == "" {
			return nil, fmt.Errorf("cdcjoin: clickhouse: mode insert needs Options.Stream")
		}
		// One INSERT at a time: max(_seq) must name the last one that
		// landed.
		inFlight, ins = 1, &insertState{stream: opts.Stream}
	} else if opts.Stream != "" {
		if c.Mode != config.ModeChangelog {
			return nil, fmt.Errorf("cdcjoin: clickhouse: delivery markers (Options.Stream) are for changelog mode")
		}
		// One INSERT at a time: the latest marker must name the last
		// INSERT that landed.
		inFlight, opts.Driven = 1, true
		ex = &exact{stream: opts.Stream, from: -1}
	}
	conn, err := ch.Open(chOpts)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: clickhouse: open %v: %w", c.Addr, err)
	}
	s := &Sink{
		cfg: cfg, chc: c, conn: conn, opts: opts, names: cfg.OutputNames(),
		queue:   make(chan *batch, inFlight),
		slots:   make(chan struct{}, inFlight),
		free:    make(chan *batch, inFlight+1),
		pending: map[*batch]chan struct{}{},
		driven:  opts.Driven, ex: ex, ins: ins,
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	err = s.retry(ctx, "connect", func(ctx context.Context) error {
		v, err := conn.ServerVersion()
		if err != nil {
			return err
		}
		s.srv = Server{Major: int(v.Version.Major), Minor: int(v.Version.Minor)}
		return nil
	})
	if err == nil && opts.Recreate {
		err = s.drop(ctx)
	}
	if err == nil && (knownTypes(opts.Types) || knownTypes(cfg.DeclaredOutputTypes()) || s.tableExists(ctx)) {
		err = s.setup(ctx, sample)
	}
	if err != nil {
		s.cancel()
		conn.Close()
		return nil, err
	}
	s.wg.Add(1 + inFlight)
	go s.ticker()
	for i := 0; i < inFlight; i++ {
		go s.worker()
	}
	return s, nil
}

// drop removes the table and its view.
func (s *Sink) drop(ctx context.Context) error {
	db := quoteIdent(s.chc.Database)
	for _, q := range []string{
		"DROP TABLE IF EXISTS " + db + "." + quoteIdent(ViewName(s.chc)),
		"DROP TABLE IF EXISTS " + db + "." + quoteIdent(s.chc.Table),
	} {
		if err := s.conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("cdcjoin: clickhouse: %s: %w", q, err)
		}
	}
	return nil
}

// Server returns the detected server version.
func (s *Sink) Server() Server { return s.srv }

func knownTypes(ts []row.ColumnType) bool {
	for _, t := range ts {
		if t.Known() {
			return true
		}
	}
	return false
}

// retry runs f until it succeeds, fails with a non-retryable error, the
// retry budget (retry.max_elapsed) is spent, or ctx or the sink ends.
func (s *Sink) retry(ctx context.Context, what string, f func(context.Context) error) error {
	r := s.chc.Retry
	bo := backoff{next: r.Initial, max: r.Max}
	start := time.Now()
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := f(actx)
		cancel()
		if err == nil {
			return nil
		}
		s.st.errors.Add(1)
		if ctx.Err() != nil {
			return fmt.Errorf("cdcjoin: clickhouse: %s: %w (last error: %v)", what, ctx.Err(), err)
		}
		if !Retryable(err) {
			return fmt.Errorf("cdcjoin: clickhouse: %s: %w", what, err)
		}
		if time.Since(start) >= r.MaxElapsed {
			return fmt.Errorf("cdcjoin: clickhouse: %s: giving up after %d attempts in %v: %w", what, attempt, time.Since(start).Round(time.Millisecond), err)
		}
		if err := sleep(ctx, bo.delay()); err != nil {
			return fmt.Errorf("cdcjoin: clickhouse: %s: %w", what, err)
		}
		s.st.retries.Add(1)
	}
}

// tableInfo is what system.tables and system.columns say about a table.
type tableInfo struct {
	engine, sortingKey string
	cols               map[string]string // name -> type
}

func (s *Sink) describe(ctx context.Context) (*tableInfo, error) {
	var ti *tableInfo
	err := s.retry(ctx, "describe table", func(ctx context.Context) error {
		ti = nil
		rows, err := s.conn.Query(ctx, "SELECT engine, sorting_key FROM system.tables WHERE database = ? AND name = ?", s.chc.Database, s.chc.Table)
		if err != nil {
			return err
		}
		defer rows.Close()
		if !rows.Next() {
			return rows.Err()
		}
		ti = &tableInfo{cols: map[string]string{}}
		if err := rows.Scan(&ti.engine, &ti.sortingKey); err != nil {
			return err
		}
		rows.Close()
		cr, err := s.conn.Query(ctx, "SELECT name, type FROM system.columns WHERE database = ? AND table = ?", s.chc.Database, s.chc.Table)
		if err != nil {
			return err
		}
		defer cr.Close()
		for cr.Next() {
			var n, t string
			if err := cr.Scan(&n, &t); err != nil {
				return err
			}
			ti.cols[n] = t
		}
		return cr.Err()
	})
	return ti, err
}

func (s *Sink) tableExists(ctx context.Context) bool {
	ti, err := s.describe(ctx)
	return err == nil && ti != nil
}

// setup creates the table when absent (and allowed), checks it, and fixes
// the column types and the INSERT statement. sample is a row of values used
// to infer types when none are known (may be nil).
func (s *Sink) setup(ctx context.Context, sample []row.Value) error {
	ti, err := s.describe(ctx)
	if err != nil {
		return err
	}
	exec := func(stmts []string) error {
		for _, q := range stmts {
			if err := s.retry(ctx, "create table", func(ctx context.Context) error { return s.conn.Exec(ctx, q) }); err != nil {
				return fmt.Errorf("%w\nstatement:\n%s", err, q)
			}
		}
		return nil
	}
	stmts, err := ddlFor(s.cfg, ColumnTypes(s.cfg, s.opts.Types, sample, s.srv), s.srv)
	if err != nil {
		return err
	}
	if ti == nil {
		if cols := untyped(s.cfg, s.opts.Types, sample); len(cols) > 0 {
			return &UntypedError{Table: s.chc.Database + "." + s.chc.Table, Columns: cols}
		}
		if !s.chc.CreateTableEnabled() {
			return fmt.Errorf("cdcjoin: clickhouse: table %s.%s does not exist and create_table is false (create it with the statements of `cdcjoin ddl`)", s.chc.Database, s.chc.Table)
		}
		if err := exec(stmts[:2]); err != nil {
			return err
		}
		if ti, err = s.describe(ctx); err != nil {
			return err
		}
		if ti == nil {
			return fmt.Errorf("cdcjoin: clickhouse: table %s.%s is missing right after CREATE TABLE", s.chc.Database, s.chc.Table)
		}
	}
	types, err := s.check(ti)
	if err != nil {
		return err
	}
	if s.chc.CreateTableEnabled() {
		if err := exec(stmts[2:]); err != nil { // the view (upsert mode), if missing
			return err
		}
	}
	s.types = types
	cols := make([]string, 0, len(s.names)+4)
	for _, n := range s.names {
		cols = append(cols, quoteIdent(n))
	}
	if s.ins != nil {
		d, err := s.readDelivered(ctx)
		if err != nil {
			return err
		}
		if s.opts.noDedup {
			d = 0
		}
		s.mu.Lock()
		s.ins.delivered = max(s.ins.delivered, d)
		s.mu.Unlock()
		s.sql = fmt.Sprintf("INSERT INTO %s (%s)", tableName(s.chc), strings.Join(append(cols, colStream, colSeq), ", "))
		s.token = s.srv.HasDedupToken()
		s.ready.Store(true)
		return nil
	}
	cols = append(cols, colPK, colCK, colVersion, s.flagCol())
	s.sql = fmt.Sprintf("INSERT INTO %s (%s)", tableName(s.chc), strings.Join(cols, ", "))
	s.token = s.chc.Mode == config.ModeChangelog && s.srv.HasDedupToken()
	s.ready.Store(true)
	return nil
}

func (s *Sink) flagCol() string {
	if s.chc.Mode == config.ModeChangelog {
		return colSign
	}
	return colDeleted
}

// check compares an existing table with what the sink needs, reporting
// every difference at once, and returns the select columns' types.
func (s *Sink) check(ti *tableInfo) ([]colType, error) {
	var diffs []string
	wantEngine := []string{"ReplacingMergeTree", "ReplicatedReplacingMergeTree"}
	switch s.chc.Mode {
	case config.ModeChangelog:
		wantEngine = []string{"VersionedCollapsingMergeTree", "ReplicatedVersionedCollapsingMergeTree"}
	case config.ModeInsert:
		wantEngine = []string{"MergeTree", "ReplicatedMergeTree"}
	}
	if ti.engine != wantEngine[0] && ti.engine != wantEngine[1] {
		diffs = append(diffs, fmt.Sprintf("engine is %s, mode %s needs %s", ti.engine, s.chc.Mode, wantEngine[0]))
	}
	k := strings.ReplaceAll(ti.sortingKey, " ", "")
	var hidden [][2]string
	if s.chc.Mode == config.ModeInsert {
		if k != colStream+","+colSeq {
			diffs = append(diffs, fmt.Sprintf("ORDER BY is (%s), need (%s, %s)", ti.sortingKey, colStream, colSeq))
		}
		hidden = [][2]string{{colStream, "String"}, {colSeq, "UInt64"}}
	} else {
		// VersionedCollapsingMergeTree appends the version to the sorting key.
		if k != colPK+","+colCK && k != colPK+","+colCK+","+colVersion {
			diffs = append(diffs, fmt.Sprintf("ORDER BY is (%s), need (%s, %s)", ti.sortingKey, colPK, colCK))
		}
		hidden = [][2]string{{colPK, "String"}, {colCK, "String"}, {colVersion, "UInt64"}}
		if s.chc.Mode == config.ModeChangelog {
			hidden = append(hidden, [2]string{colSign, "Int8"})
		} else {
			hidden = append(hidden, [2]string{colDeleted, "UInt8"})
		}
	}
	for _, h := range hidden {
		if t, ok := ti.cols[h[0]]; !ok {
			diffs = append(diffs, fmt.Sprintf("column %s is missing (want %s)", h[0], h[1]))
		} else if t != h[1] {
			diffs = append(diffs, fmt.Sprintf("column %s has type %s, want %s", h[0], t, h[1]))
		}
	}
	types := make([]colType, len(s.names))
	for i, n := range s.names {
		t, ok := ti.cols[n]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("column %s (select output) is missing", n))
			continue
		}
		ct, err := parseType(t)
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("column %s: %v", n, err))
			continue
		}
		types[i] = ct
	}
	if len(diffs) > 0 {
		return nil, fmt.Errorf("cdcjoin: clickhouse: existing table %s.%s does not match the configuration (mode %s):\n  %s",
			s.chc.Database, s.chc.Table, s.chc.Mode, strings.Join(diffs, "\n  "))
	}
	return types, nil
}

// Write appends changes to the current batch, sending batches as they fill
// (rows or bytes limit). It blocks while max_in_flight batches are being
// inserted and another is full (back-pressure), until ctx ends. The changes'
// slices are not retained. A value that cannot be stored in its column (type
// mismatch, NULL in a non-Nullable column) is a fatal error: the sink stops
// and every later call returns it.
func (s *Sink) Write(ctx context.Context, changes []row.Change) error {
	if err := s.failed(); err != nil {
		return err
	}
	if len(changes) == 0 {
		return nil
	}
	if !s.ready.Load() {
		if err := s.setup(ctx, sampleRow(changes, len(s.names))); err != nil {
			return s.setFatal(err)
		}
	}
	maxRows, maxBytes := s.chc.Batch.Rows, int(s.chc.Batch.Bytes)
	if s.driven {
		maxRows, maxBytes = 2*maxRows, 2*maxBytes
	}
	s.mu.Lock()
	if s.cur == nil {
		s.cur = s.newBatch()
	}
	for i := 0; i < len(changes); i++ {
		if s.cur.rows >= maxRows || s.cur.bytes >= maxBytes {
			s.mu.Unlock()
			if err := s.acquire(ctx); err != nil {
				return err
			}
			s.mu.Lock()
			s.sealLocked()
		}
		rows := s.cur.rows
		if err := s.cur.add(s, &changes[i]); err != nil {
			var fe *fitError
			if !errors.As(err, &fe) {
				s.fatal = err
				s.mu.Unlock()
				return err
			}
			// A widened source column (widen.go): drop the change's
			// partial rows, widen the column, add it again.
			s.cur.truncate(rows)
			s.mu.Unlock()
			if err := s.widen(ctx, fe); err != nil {
				return s.setFatal(err)
			}
			s.mu.Lock()
			i--
		}
	}
	s.mu.Unlock()
	s.st.changes.Add(uint64(len(changes)))
	return nil
}

// sampleRow returns, per column, the first non-NULL value among changes.
func sampleRow(changes []row.Change, n int) []row.Value {
	out := make([]row.Value, n)
	for _, c := range changes {
		for i := 0; i < n && i < len(c.Values); i++ {
			if out[i].Kind == row.KindNull && c.Values[i].Kind != row.KindUnavailable {
				out[i] = c.Values[i]
			}
		}
	}
	return out
}

// Flush sends the current batch and waits until every batch written before
// the call has been accepted by ClickHouse, or ctx ends, or the sink fails
// (returning the fatal error).
func (s *Sink) Flush(ctx context.Context) error {
	if err := s.failed(); err != nil {
		return err
	}
	s.mu.Lock()
	need := s.cur != nil && s.cur.rows > 0
	s.mu.Unlock()
	if need {
		if err := s.acquire(ctx); err != nil {
			return err
		}
		s.mu.Lock()
		s.sealLocked()
		s.mu.Unlock()
	}
	return s.waitPending(ctx)
}

// waitPending waits until every sealed batch is finished, or ctx ends, or
// the sink fails (returning the fatal error).
func (s *Sink) waitPending(ctx context.Context) error {
	s.mu.Lock()
	waits := make([]chan struct{}, 0, len(s.pending))
	for _, d := range s.pending {
		waits = append(waits, d)
	}
	s.mu.Unlock()
	for _, d := range waits {
		select {
		case <-d:
		case <-ctx.Done():
			return fmt.Errorf("cdcjoin: clickhouse: flush: %w", ctx.Err())
		case <-s.ctx.Done():
			return ErrClosed
		}
	}
	return s.failed()
}

// Close stops the sink's goroutines, abandoning unacknowledged batches
// (in-flight inserts are cancelled), and closes the connection. It does not
// flush. Safe to call more than once.
func (s *Sink) Close() error {
	var err error
	s.closed.Do(func() {
		s.cancel()
		s.wg.Wait()
		if cerr := s.conn.Close(); cerr != nil {
			err = fmt.Errorf("cdcjoin: clickhouse: close: %w", cerr)
		}
	})
	return err
}

// Full implements sink.Batcher: the rows (or bytes) written since the last
// flush reach batch.rows (batch.bytes).
func (s *Sink) Full() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending) > 0 || s.cur != nil && (s.cur.rows >= s.chc.Batch.Rows || s.cur.bytes >= int(s.chc.Batch.Bytes))
}

// MaxDelay implements sink.Batcher: batch.interval.
func (s *Sink) MaxDelay() time.Duration { return s.chc.Batch.Interval }

// Stats returns the sink's counters.
func (s *Sink) Stats() sink.Stats {
	return sink.Stats{
		Batches: s.st.batches.Load(), Rows: s.st.rows.Load(), Bytes: s.st.bytes.Load(),
		Changes: s.st.changes.Load(), Retries: s.st.retries.Load(), Errors: s.st.errors.Load(),
		InsertTime: time.Duration(s.st.insertNs.Load()), MaxBatchRows: int(s.st.maxRows.Load()),
	}
}

func (s *Sink) failed() error {
	if s.ctx.Err() != nil {
		return ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fatal
}

func (s *Sink) setFatal(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fatal == nil {
		s.fatal = err
	}
	return s.fatal
}

// acquire takes an in-flight slot, blocking for back-pressure.
func (s *Sink) acquire(ctx context.Context) error {
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cdcjoin: clickhouse: waiting for an insert slot: %w", ctx.Err())
	case <-s.ctx.Done():
		return ErrClosed
	}
}

// sealLocked hands the current batch to the workers, using a slot the
// caller acquired; an empty batch gives the slot back. s.mu is held.
func (s *Sink) sealLocked() {
	if s.cur == nil || s.cur.rows == 0 {
		<-s.slots
		return
	}
	if s.cur.marker == 0 {
		s.markLocked(s.cur, false, 0) // a cut inside the caller's batch
	}
	b := s.cur
	s.cur = s.newBatch()
	s.pending[b] = b.done
	s.queue <- b // cannot block: at most cap(slots) batches are sealed and unfinished
}

func (s *Sink) newBatch() *batch {
	select {
	case b := <-s.free:
		if sameTypes(b.types, s.types) {
			return b
		}
		// made before a column was widened: dropped
	default:
	}
	b := &batch{done: make(chan struct{}), cols: make([]column, len(s.types)), types: append([]colType(nil), s.types...)}
	for i, t := range s.types {
		b.cols[i] = newColumn(t)
	}
	if s.chc.Mode == config.ModeUpsert {
		b.index = map[rowKey]int{}
	}
	if s.token && s.ins == nil {
		b.hash = sha256.New()
	}
	return b
}

// ticker sends a batch once its first row is batch.interval old.
func (s *Sink) ticker() {
	defer s.wg.Done()
	iv := s.chc.Batch.Interval
	t := time.NewTicker(max(iv/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			if s.driven {
				continue // the caller ends batches
			}
			s.mu.Lock()
			if s.cur != nil && s.cur.rows > 0 && now.Sub(s.cur.start) >= iv {
				select {
				case s.slots <- struct{}{}:
					s.sealLocked()
				default: // all slots busy: the batch keeps filling
				}
			}
			s.mu.Unlock()
		}
	}
}

func (s *Sink) worker() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case b := <-s.queue:
			err := s.failed()
			if err == nil && !b.skip {
				sent := false
				err = s.retry(s.ctx, "insert", func(ctx context.Context) error {
					if sent && b.marker != 0 {
						// The last attempt may have landed although it
						// failed (the reply was lost): look before resending.
						if ok, err := s.landed(ctx, b.marker); err != nil || ok {
							return err
						}
					}
					if sent && s.ins != nil {
						if got, err := s.maxSeq(ctx); err != nil || got >= b.lastSeq {
							return err
						}
					}
					sent = true
					return s.insert(ctx, b)
				})
				if err != nil && s.ctx.Err() == nil {
					s.setFatal(err)
				}
				if err == nil && s.ins != nil {
					s.mu.Lock()
					s.ins.delivered = max(s.ins.delivered, b.lastSeq)
					s.mu.Unlock()
				}
			}
			s.mu.Lock()
			delete(s.pending, b)
			s.mu.Unlock()
			close(b.done)
			<-s.slots
			b.reset()
			select {
			case s.free <- b:
			default:
			}
		}
	}
}

// insert sends b as one INSERT.
func (s *Sink) insert(ctx context.Context, b *batch) error {
	if s.ins != nil {
		tok := fmt.Sprintf("%s:%d-%d", s.ins.stream, b.firstSeq, b.lastSeq)
		opts := []ch.QueryOption{ch.WithQueryID(fmt.Sprintf("%s%d-%d-%d", insertQueryPrefix(s.ins.stream), b.firstSeq, b.lastSeq, time.Now().UnixNano()))}
		if s.token {
			opts = append(opts, ch.WithSettings(ch.Settings{"insert_deduplication_token": tok}))
		}
		ctx = ch.Context(ctx, opts...)
	} else if b.hash != nil {
		tok := hex.EncodeToString(b.hash.Sum(nil))
		ctx = ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_deduplication_token": tok}))
	}
	start := time.Now()
	bt, err := s.conn.PrepareBatch(ctx, s.sql)
	if err != nil {
		return err
	}
	server := make([]string, 0, len(b.cols))
	for _, c := range bt.Columns() {
		server = append(server, string(c.Type()))
	}
	if err := s.adapt(ctx, b, server); err != nil {
		bt.Abort()
		return err
	}
	n := len(b.cols)
	for i, c := range b.cols {
		if err := bt.Column(i).Append(c.data()); err != nil {
			bt.Abort()
			return fmt.Errorf("column %s: %w", s.names[i], err)
		}
	}
	var flag any = b.sign
	if s.chc.Mode == config.ModeUpsert {
		flag = b.deleted
	}
	hidden := []any{b.pk, b.ck, b.ver, flag}
	if s.ins != nil {
		hidden = []any{b.pk, b.ver} // _stream, _seq
	}
	for i, d := range hidden {
		if err := bt.Column(n + i).Append(d); err != nil {
			bt.Abort()
			return err
		}
	}
	if err := bt.Send(); err != nil {
		return err
	}
	s.st.insertNs.Add(uint64(time.Since(start)))
	s.st.batches.Add(1)
	s.st.rows.Add(uint64(b.rows))
	s.st.bytes.Add(uint64(b.bytes))
	for {
		m := s.st.maxRows.Load()
		if uint64(b.rows) <= m || s.st.maxRows.CompareAndSwap(m, uint64(b.rows)) {
			break
		}
	}
	return nil
}

func sameTypes(a, b []colType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].name != b[i].name {
			return false
		}
	}
	return true
}

type rowKey struct{ pk, ck string }

// batch is a columnar buffer of rows: the select columns, then the hidden
// columns. Only the goroutine holding Sink.mu fills it; once sealed, only
// its worker reads it.
type batch struct {
	cols    []column
	types   []colType // the columns' types (the table's when the batch was made)
	pk, ck  []string
	ver     []uint64
	sign    []int8
	deleted []uint8
	index   map[rowKey]int // upsert mode: row key -> row, for folding
	rows    int
	bytes   int
	start   time.Time
	hash    hash.Hash // changelog mode on servers with dedup tokens
	scratch []byte
	done    chan struct{} // closed when the batch is finished
	marker  uint64        // its delivery marker's version (exact.go); 0: none
	skip    bool          // landed before: not sent (a replayed batch)
	// insert mode: the first and last _seq of the batch
	firstSeq, lastSeq uint64
}

// truncate drops the rows from n on (a change whose values did not fit).
func (b *batch) truncate(n int) {
	if n >= b.rows {
		return
	}
	for _, c := range b.cols {
		c.truncate(n)
	}
	for k, i := range b.index {
		if i >= n {
			delete(b.index, k)
		}
	}
	b.pk, b.ck, b.ver = b.pk[:n], b.ck[:n], b.ver[:n]
	if len(b.sign) > n {
		b.sign = b.sign[:n]
	}
	if len(b.deleted) > n {
		b.deleted = b.deleted[:n]
	}
	b.rows = n
}

func (b *batch) reset() {
	for _, c := range b.cols {
		c.reset()
	}
	clear(b.pk)
	clear(b.ck)
	b.pk, b.ck, b.ver, b.sign, b.deleted = b.pk[:0], b.ck[:0], b.ver[:0], b.sign[:0], b.deleted[:0]
	clear(b.index)
	b.rows, b.bytes = 0, 0
	b.marker, b.skip = 0, false
	b.firstSeq, b.lastSeq = 0, 0
	if b.hash != nil {
		b.hash.Reset()
	}
	b.done = make(chan struct{})
}

// add appends the rows for change c.
func (b *batch) add(s *Sink, c *row.Change) error {
	if len(c.Values) != len(b.cols) || (c.Prev != nil && len(c.Prev) != len(b.cols)) {
		return fmt.Errorf("cdcjoin: clickhouse: change has %d values (prev %d), the select list has %d columns", len(c.Values), len(c.Prev), len(b.cols))
	}
	if s.ins != nil {
		return b.addInsert(s, c)
	}
	if c.Op != row.Upsert && c.Op != row.Retract {
		return fmt.Errorf("cdcjoin: clickhouse: change with invalid op %d", c.Op)
	}
	if b.rows == 0 {
		b.start = time.Now()
	}
	b.scratch = appendKey(b.scratch[:0], c.ParentKey)
	pk := string(b.scratch)
	ck := ""
	if !c.Padded() {
		b.scratch = appendKey(b.scratch[:0], c.ChildKey)
		ck = string(b.scratch)
	}
	if b.index != nil { // upsert mode
		var del uint8
		if c.Op == row.Retract {
			del = 1
		}
		row := b.rows
		if i, ok := b.index[rowKey{pk, ck}]; ok {
			if b.ver[i] > c.Version {
				return nil // an older replayed change: the batch has a newer one
			}
			row = i
		}
		if err := b.putValues(s, row, c.Values, pk, ck); err != nil {
			return err
		}
		if row < b.rows {
			b.ver[row], b.deleted[row] = c.Version, del
			return nil
		}
		b.index[rowKey{pk, ck}] = row
		b.pk, b.ck = append(b.pk, pk), append(b.ck, ck)
		b.ver, b.deleted = append(b.ver, c.Version), append(b.deleted, del)
		b.rows++
		return nil
	}
	switch {
	case c.Op == row.Retract:
		return b.appendSigned(s, c.Values, pk, ck, -1, c.PrevVersion)
	case c.Prev != nil:
		if err := b.appendSigned(s, c.Prev, pk, ck, -1, c.PrevVersion); err != nil {
			return err
		}
	}
	return b.appendSigned(s, c.Values, pk, ck, 1, c.Version)
}

func (b *batch) appendSigned(s *Sink, vals []row.Value, pk, ck string, sign int8, ver uint64) error {
	if err := b.putValues(s, b.rows, vals, pk, ck); err != nil {
		return err
	}
	b.pk, b.ck = append(b.pk, pk), append(b.ck, ck)
	b.ver, b.sign = append(b.ver, ver), append(b.sign, sign)
	b.rows++
	if b.hash != nil {
		h := b.scratch[:0]
		h = binary.AppendUvarint(h, uint64(len(pk)))
		h = append(h, pk...)
		h = binary.AppendUvarint(h, uint64(len(ck)))
		h = append(h, ck...)
		h = binary.BigEndian.AppendUint64(h, ver)
		h = append(h, byte(sign))
		for i := range vals {
			v := &vals[i]
			h = append(h, byte(v.Kind))
			h = binary.BigEndian.AppendUint64(h, uint64(v.Int))
			h = binary.BigEndian.AppendUint64(h, math.Float64bits(v.Float))
			h = binary.AppendUvarint(h, uint64(len(v.Str)))
			h = append(h, v.Str...)
		}
		b.hash.Write(h)
		b.scratch = h
	}
	return nil
}

// putValues stores vals at row (row == b.rows appends; the caller then
// appends the hidden columns).
func (b *batch) putValues(s *Sink, row int, vals []row.Value, pk, ck string) error {
	for i := range vals {
		if err := b.cols[i].put(row, vals[i]); err != nil {
			if row == b.rows {
				for j := 0; j < i; j++ {
					b.cols[j].truncate(row)
				}
			}
			return &fitError{col: i, v: vals[i], err: fmt.Errorf("cdcjoin: clickhouse: column %s (%s), row key (%s | %s): %w", s.names[i], b.types[i].name, pk, ck, err)}
		}
		if row == b.rows {
			b.bytes += valueSize(&vals[i])
		}
	}
	if row == b.rows {
		b.bytes += len(pk) + len(ck) + 10
	}
	return nil
}

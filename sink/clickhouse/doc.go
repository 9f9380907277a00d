// Package clickhouse is the ClickHouse sink: it writes the join's changes
// (row.Change) into one table over the native protocol (clickhouse-go/v2).
//
// # Table
//
// The table has the select list's output columns, then hidden columns:
//
//   - _pk, _ck String: the row key (parent key, child key) as text (see
//     appendKey): values separated by ',', strings quoted. _ck is ” for a LEFT
//     join's padded row; a real child key never encodes to ” (an empty-string
//     key is ”). ORDER BY (_pk, _ck) therefore works whatever is selected.
//   - _version UInt64: row.Change.Version.
//   - upsert mode: _deleted UInt8; ENGINE ReplacingMergeTree(_version), or
//     ReplacingMergeTree(_version, _deleted) on 23.2+ (FINAL drops
//     deletions there; with allow_experimental_replacing_merge_with_cleanup
//     on 23.12+, so that Purge's OPTIMIZE … FINAL CLEANUP can remove them
//     for good, on the schedule README.md describes); and a view
//     <table>_current = SELECT <select list> FROM <table> FINAL WHERE
//     _deleted = 0, the live join.
//   - with config.ClickHouse.Cluster: every statement ON CLUSTER, the
//     Replicated* engine at ReplicaPath with the {replica} macro.
//   - changelog mode: _sign Int8; ENGINE VersionedCollapsingMergeTree(_sign,
//     _version). A Retract is the previously emitted row (Values) with
//     _sign = -1, _version = PrevVersion; an Upsert of an existing row
//     (Prev != nil) is (-1, Prev, PrevVersion) then (+1, Values, Version); a
//     new row is (+1, Values, Version). sum(_sign) gives correct aggregates
//     without FINAL.
//
// Column types come from the Debezium schema or the types declared in the
// configuration (ColumnTypes), per-column overrides in the configuration,
// or, for schemaless input without declarations, the first values seen.
// Values are converted exactly or refused: a value a column cannot hold (a
// date outside Date's range, more digits than a Decimal's, …) is an error,
// never a wrapped or rounded value. An existing table is checked, not altered: a missing column,
// another engine or sorting key, or a column type the sink cannot write is a
// fatal error listing every difference. Types of an existing table win (a DBA
// may widen them); values are converted to them.
//
// # Delivery
//
// Write appends to a columnar batch; a batch is sent at batch.rows rows,
// about batch.bytes bytes, or batch.interval after its first row. In upsert
// mode changes to the same row key within a batch are folded (the highest
// version wins). At most max_in_flight INSERTs run at once; beyond that,
// Write blocks. Flush returns after ClickHouse accepted every batch written
// before it. Retryable failures (connection refused/reset, EOF, timeouts,
// codes 3, 159, 202, 203, 209, 210, 225, 241, 242, 252, 319, 394, 425, 999)
// are retried with exponential backoff and jitter up to retry.max_elapsed;
// other server errors (schema: 16, 47, 53, 60, 81; auth: 192, 193, 516,
// 497; bad data) and conversion errors are fatal: the sink stops and every
// later Write/Flush returns the error. Close does not flush.
//
// Driven (Options.Driven, what `cdcjoin run` uses, one sink per keyed
// partition): the caller ends batches (sink.Batcher: it flushes when Full,
// at batch.rows rows or batch.bytes, or batch.interval after the batch
// began), so an INSERT holds about batch.rows rows; the sink sends nothing
// on its interval, and batch.rows and batch.bytes only cut an INSERT at
// twice their value (a fan-out larger than a batch still streams).
//
// # Replays and duplicates
//
// Upsert mode is idempotent: a row is identified by (_pk, _ck) and the
// highest _version wins, so an INSERT retried after an ambiguous failure, or
// input replayed after a crash (which reproduces the same versions), changes
// nothing visible through FINAL.
//
// Changelog mode is not idempotent by itself: a row inserted twice counts
// twice in sum(_sign) (VersionedCollapsingMergeTree collapses a +1/-1 pair
// per (key, version), never two +1s). A batch's INSERTs land before the
// driver commits its position, so a crash in between (a kill -9, or an OS
// crash: pebble buffers its WAL, so state commits can be lost too) makes
// the driver replay input whose rows are already in the table.
//
// With delivery markers (OpenExact, Options.Stream: `cdcjoin run` in
// changelog mode, one stream per keyed partition) each change is inserted
// exactly once however the process stops, on every server version, 18.16
// included: every INSERT carries, in the same block (one part: atomic),
// two marker rows that record which input positions it covers, and a
// driver that restarts asks Delivered where the table's output ends and
// applies what lies below without writing it again; a batch cut short is
// replayed with the INSERTs that landed dropped (exact.go has the
// details). An INSERT retried after an ambiguous failure (the server
// committed but the reply was lost) is looked up by its marker first; on
// 22.2+ the table also has non_replicated_deduplication_window = 1000 and
// every INSERT carries insert_deduplication_token = SHA-256 of its rows,
// so the server drops such a retry too. Marker rows have _pk = '\0cdcjoin'
// (no row of the join has it), zero or NULL select values, and
// sum(_sign) = 0 per marker key at all times: they change no
// _sign-weighted aggregate; filter _pk != '\0cdcjoin' when reading raw
// rows. The guarantee needs the keyed topic's records to be the same on
// replay: keep the join group within kafka.min_compaction_lag of the log
// end (as for rebuilds).
//
// Both drivers use markers: `cdcjoin run` (a stream per keyed partition)
// and `cdcjoin replay --clickhouse` (a stream per state, positions counted
// in the engine's batches: engine/exact.go, through LazyExact). Without
// markers (Open in changelog mode: replay with --changes as well, custom
// drivers) the old guarantee holds: on 22.2+ a retry of a batch after
// an ambiguous failure is deduplicated by its token; on 18.16 such a retry
// can duplicate the batch; and a replay after a crash inserts again what
// landed before the crash. Use upsert mode there, or replay into an empty
// table.
//
// # Compatibility
//
// Tested on Debian 12's clickhouse-server 18.16.1. Every INSERT names its
// columns (18.16 otherwise reports zero columns). Feature detection by
// server version: DateTime64(6, 'UTC') for timestamps on 20.1+ (Int64
// microseconds since the epoch before), Date32 for dates on 21.9+ (Int32
// days since the epoch before), Bool on 21.12+ (UInt8 before),
// ReplacingMergeTree(ver, is_deleted) on 23.2+, deduplication tokens on
// 22.2+. Arrays are Array(Nullable(T)) everywhere. Known 18.16 defect: GROUP BY on a
// Nullable(Decimal(38, s)) column crashes the server (SIGSEGV in
// ColumnDecimal<Decimal128>::deserializeAndInsertFromArena); group by
// toString(col) or use a Decimal precision ≤ 18 override there.
package clickhouse

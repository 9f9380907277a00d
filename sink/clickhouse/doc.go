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
//     ReplacingMergeTree(_version, _deleted) on 23.2+; and a view
//     <table>_current = SELECT <select list> FROM <table> FINAL WHERE
//     _deleted = 0, the live join.
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
// # Replays and duplicates
//
// Upsert mode is idempotent: a row is identified by (_pk, _ck) and the
// highest _version wins, so an INSERT retried after an ambiguous failure, or
// input replayed after a crash (which reproduces the same versions), changes
// nothing visible through FINAL.
//
// Changelog mode is not idempotent by itself: a row inserted twice counts
// twice in sum(_sign) (VersionedCollapsingMergeTree collapses a +1/-1 pair
// per (key, version), never two +1s). On 22.2+ the table is created with
// non_replicated_deduplication_window = 1000 and every INSERT carries
// insert_deduplication_token = SHA-256 of the batch's exact rows, so a retry
// of the same batch after an ambiguous failure (the server committed but the
// reply was lost) is dropped by the server. Replays after a crash are
// deduplicated only when they form byte-identical batches, which the
// interval trigger does not guarantee. On older servers (18.16, Debian 12)
// there are no tokens: a retry after an ambiguous failure (connection lost
// after the data was sent) can duplicate that batch's rows. What holds there:
// a batch that failed before ClickHouse received all of it is not visible
// (each INSERT is one block, atomic), and the runtime commits input positions
// only after Flush, so acknowledged work is never replayed; only the
// "committed but reply lost" window can double count. Use upsert mode where
// that matters on old servers.
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

// Package e2e drives cdcjoin's real-stack end-to-end test: PostgreSQL →
// Debezium (Kafka Connect) → Kafka → `cdcjoin run` → ClickHouse, all real
// servers on loopback (deploy/local/).
//
// The pieces are independent of the cdcjoin packages under test, so that
// the check cannot share a bug with what it checks:
//   - Workload generates a seeded, deterministic DML history (scripted hard
//     cases plus random transactions) and Postgres applies it;
//   - Postgres.Join and ClickHouse.Rows read the oracle (the JOIN computed
//     by PostgreSQL) and the materialized result (<table>_current), both as
//     text cells, and Diff compares them row for row, column for column;
//   - for the join of deploy/local/types.sql's tables (a column of every
//     common PostgreSQL type, schemas on and off), Postgres.TypedJoin and
//     ClickHouse.TypedRows bring each column to its type's canonical form
//     first (see TypedColumns), so that 't' and 1, NaN and nan, a date and
//     its day number compare equal and nothing else does;
//   - Watcher follows the Debezium topics and cdcjoin's keyed topics, and
//     Lags reads the consumer groups' committed offsets, to tell when
//     cdcjoin has caught up;
//   - Connect registers the Debezium connector over Kafka Connect's REST API.
//
// The driver is e2e/cmd/cdcjoin-e2e, run by e2e/run.sh (`make e2e`).
package e2e

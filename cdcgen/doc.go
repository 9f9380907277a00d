// Package cdcgen generates seeded, deterministic, randomized CDC histories
// of a parent table (users) and a child table (domains) as the records a
// Kafka consumer would read from Debezium's PostgreSQL connector (3.6
// shapes, Kafka Connect JsonConverter, schemas on, off or mixed per record),
// together with the ground truth needed to check a join against them: the
// DB state at checkpoints, the SQL join oracle (Join) and a model of a
// ClickHouse ReplacingMergeTree table.
//
// # Use
//
// Correctness tests: h, _ := Generate(DefaultOptions(seed)); feed
// h.Records in order; at h.Checkpoints[i] compare the output with
// Join(h.TablesAt(i)). Benchmarks and huge runs: NewGenerator + Next
// (constant memory per round, a few integers per DB row), or StreamJSONL.
//
// # Rounds and checkpoints
//
// Operations are generated in rounds of 1..MaxRoundOps. A round's records
// go to their partitions (murmur2 of the key, as Kafka's default
// partitioner), then the round's partitions are merged into the consumption
// order by Options.Interleave, each partition's order kept. At a round's end
// every partition has been consumed up to the same DB time, so the consumed
// prefix corresponds to exactly one DB state: that is a Checkpoint (the
// record has Checkpoint set). Inside a round, the consumer may have seen a
// later change on one partition and not an earlier one on another: no DB
// state matches, and none is claimed.
//
// The snapshot (op=r, one source position) is emitted in chunks; only its
// end is a checkpoint.
//
// # Hard cases and their policies
//
//   - Truncate (op=t, null key) lands on one random partition; Kafka orders
//     it against nothing else. With Partitions > 1 a truncate therefore runs
//     alone in its own round (checkpoints right before and after it); with one
//     partition it may appear anywhere in a round.
//   - Redelivery models a connector restart at the end of a round: every
//     record produced since a random operation of the round is appended
//     again (same bytes, new offsets) on every partition, so each re-sent
//     suffix ends with the partition's latest record and state converges by
//     the checkpoint. Consequence consumers must survive: a re-sent update
//     with TOAST placeholders can reach a row that a later (already
//     consumed) delete removed; its placeholder values are unknown until the
//     re-sent delete arrives.
//   - Snapshot rerun: the first run fails after k records, which stay in
//     the topic; then the whole snapshot is emitted again, identical bytes.
//   - PK change: delete(old) + tombstone(old) + create(new) at the update's
//     source position; old and new keys may hash to different partitions.
//   - REPLICA IDENTITY DEFAULT (domains by default): update before=null;
//     delete before has the key, user_id 0 (NOT NULL zero value, as real
//     Debezium sends it) and nulls.
//   - TOAST: an unchanged text column of an update may be sent as
//     "__debezium_unavailable_value" (Options.Toast).
//   - Transactions (MaxTxOps) share txId; source.sequence is
//     ["<end of previous commit>","<lsn>"], null first element for the first
//     transaction after the snapshot; with LSNInterleave a transaction's
//     change LSNs can be lower than the previous transaction's.
//   - Children before parents (OrphanDomain: user_id of a user inserted
//     later), parents deleted under their children, deleted ids re-created.
//
// Row contents are pure functions of (id, version counters), so the
// generator can model 10^8 rows in a few GB. Texts include quotes,
// backslashes, control characters and multi-byte UTF-8.
package cdcgen

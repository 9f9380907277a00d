// Package debezium decodes Debezium change events (Kafka Connect
// JsonConverter output) into projected rows.
//
// A Decoder handles records with schemas ({"schema":…,"payload":…}) and
// without (the bare envelope), decided per record, for the operations
// c, u, d, r and t. With a schema, values are typed by it, including the Kafka
// Connect and Debezium logical types (Decimal, VariableScaleDecimal, the
// io.debezium.time types, Uuid, Json, Enum); without one, by the JSON token
// (integers as row.KindInt, other numbers as exact row.KindDecimal text). Debezium's
// unchanged-TOAST placeholder becomes row.KindUnavailable in both modes.
//
// Speed: the decoder is a hand-written JSON scanner that allocates nothing
// per record in the steady state. It matches member names against the
// projection and skips everything else (checking only bracket balance and
// string syntax in skipped parts), stops parsing a row image once every
// projected column is found, and recognizes a repeated schema block by one
// byte comparison against the last one (a hash lookup otherwise), so the
// schema is parsed once, not per record. See the benchmarks in
// bench_test.go.
//
// Errors are *DecodeError values with a kind (for metrics and routing) and
// the path of the offending field, e.g. "payload.after.user_id".
package debezium

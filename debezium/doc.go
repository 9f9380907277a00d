// Package debezium decodes Debezium change events (Kafka Connect
// JsonConverter output) into projected rows.
//
// A Decoder handles records with schemas ({"schema":…,"payload":…}) and
// without (the bare envelope), decided per record, for the operations
// c, u, d, r and t. With a schema, values are typed by it, including the Kafka
// Connect and Debezium logical types (Decimal, VariableScaleDecimal, the
// io.debezium.time types, Uuid, Json, Enum) and arrays (row.KindArray, each
// element typed like a column). Without one, by the types the caller
// declares (Options.Types, e.g. pgschema.Column("numeric(12,2)", modes): the
// schema the record would have had), else by the JSON token (integers as
// row.KindInt, other numbers as exact row.KindDecimal text, arrays element
// by element). Every form of Debezium's unchanged-TOAST placeholder (text,
// base64/hex bytes, the array and map forms) becomes row.KindUnavailable in
// both modes. Key columns (Options.KeyColumns) are canonical and keep one
// type. Only a nil or empty value, or JSON null, is a tombstone: binary data
// (the Schema Registry wire format of Avro/Protobuf converters) is a bad
// record that says what it is.
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
// Why not github.com/goccy/go-json on this path: goccy_bench_test.go
// decodes the same records with goccy, generically (envelope into a
// struct, row images into maps of raw values, projected columns parsed,
// the schema decoded once per distinct block — what a config-driven
// projection needs) and into static structs with exactly the projected
// fields (a lower bound a generic decoder cannot use). Instructions per
// record (valgrind callgrind, GOGC=off, GOMAXPROCS=1; deterministic on
// this shared machine) and allocations per record, 2026-11-30:
//
//	record                         this decoder    goccy generic     goccy static
//	users insert, no schema        13.6K, 0 alloc  17.3K, 19 allocs   7.8K,  3 allocs
//	users insert, schema           16.0K, 0 alloc  65.7K, 22 allocs  38.0K,  3 allocs
//	40 columns, 2 projected, none  46.1K, 0 alloc  149K, 181 allocs  25.1K,  2 allocs
//	40 columns, 2 projected, schema 49.3K, 0 alloc 237K, 184 allocs  89.6K,  2 allocs
//
// The generic goccy decoder costs 1.3× to 4.8× the instructions and
// allocates per column; this decoder stays. goccy's static skip of an
// unneeded wide image is about twice as cheap as this scanner's (25K
// against 46K instructions): skipping is where this decoder has room.
// goccy is the JSON library everywhere off the hot path (configuration,
// reports, tests, the replay file reader).
//
// Reproduce: go test -c -o deb.test ./debezium; for N in 1 1001:
// GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 GOGC=off valgrind --tool=callgrind
// ./deb.test -test.run '^$' -test.bench 'BENCH$' -test.benchtime Nx; the
// difference of the two totals over 1000.
//
// Errors are *DecodeError values with a kind (for metrics and routing) and
// the path of the offending field, e.g. "payload.after.user_id".
package debezium

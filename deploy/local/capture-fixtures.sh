#!/usr/bin/env bash
# deploy/local/capture-fixtures.sh [OUTDIR]
#
# Records real Debezium messages for the decoder's tests into OUTDIR
# (default debezium/testdata/real/): schema-on.jsonl (JsonConverter with
# schemas.enable=true, topic prefix dbserver1) and schema-off.jsonl
# (schemas.enable=false, topic prefix dbserver2) for users/domains
# (schema.sql, fixture-dml.sql), and types-on.jsonl / types-off.jsonl for
# type_parents/type_children (types.sql, types-dml.sql). One record per line:
#   {"topic":…,"partition":N,"offset":N,"key":<JSON|null>,"value":<JSON|null>}
# ordered by the record's create time (stable: users before domains on ties).
#
# WIPES the local stack's PostgreSQL, Kafka and Connect data (not
# ClickHouse): it starts them fresh so the output is reproducible up to
# timestamps, LSNs and transaction ids. Leaves them running; stop with
# deploy/local/stack.sh down.
#
# Steps: fresh postgres/kafka/connect; apply types.sql; register two
# connectors from debezium-postgres.json (overrides below); wait for the
# snapshot (op=r) of schema.sql's and types.sql's rows; run fixture-dml.sql
# and types-dml.sql; wait until the topics stop growing; dump them with
# Kafka's console consumer; convert with jq.
#
# Ports come from the scripts' variables (PG_PORT, KAFKA_PORT, CONNECT_PORT).
set -euo pipefail
SCRIPT=capture-fixtures.sh
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT="${1:-$REPO_DIR/debezium/testdata/real}"
WORK="$RUN_ROOT/capture"
BOOTSTRAP="127.0.0.1:${KAFKA_PORT:-19092}"
TABLES=(users domains type_parents type_children)

say "wiping and restarting postgres, kafka, connect"
"$LOCAL_DIR/connect.sh" down
"$LOCAL_DIR/kafka.sh" down
"$LOCAL_DIR/postgres.sh" down
rm -rf "$RUN_ROOT/kafka" "$RUN_ROOT/connect" "$RUN_ROOT/postgres" "$WORK"
mkdir -p "$WORK" "$OUT"
"$LOCAL_DIR/postgres.sh" install
"$LOCAL_DIR/kafka.sh" install
"$LOCAL_DIR/postgres.sh" up >/dev/null
"$LOCAL_DIR/kafka.sh" up >/dev/null
"$LOCAL_DIR/connect.sh" up >/dev/null
"$LOCAL_DIR/postgres.sh" psql -q -v ON_ERROR_STOP=1 -f "$LOCAL_DIR/types.sql" >/dev/null

CONN="$LOCAL_DIR/debezium-postgres.json"
COMMON=(database.port="${PG_PORT:-15432}"
	table.include.list=public.users,public.domains,public.type_parents,public.type_children)
"$LOCAL_DIR/connect.sh" register "$CONN" name=fixture-schema-on "${COMMON[@]}" \
	topic.prefix=dbserver1 slot.name=fixture_on publication.name=fixture_on \
	key.converter=org.apache.kafka.connect.json.JsonConverter key.converter.schemas.enable=true \
	value.converter=org.apache.kafka.connect.json.JsonConverter value.converter.schemas.enable=true
"$LOCAL_DIR/connect.sh" register "$CONN" name=fixture-schema-off "${COMMON[@]}" \
	topic.prefix=dbserver2 slot.name=fixture_off publication.name=fixture_off \
	key.converter=org.apache.kafka.connect.json.JsonConverter key.converter.schemas.enable=false \
	value.converter=org.apache.kafka.connect.json.JsonConverter value.converter.schemas.enable=false

# total_records: sum of the end offsets of the fixture topics (each has one
# partition; topics not yet created count 0).
total_records() {
	local topics=() p t
	for p in dbserver1 dbserver2; do
		for t in "${TABLES[@]}"; do topics+=("$p.public.$t"); done
	done
	kafka_java org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$BOOTSTRAP" \
		--topic "$(IFS='|'; echo "${topics[*]}")" 2>/dev/null |
		awk -F: '{s += $NF} END {print s + 0}'
}

# wait_stable MIN: wait until at least MIN records exist and the count has
# not changed for 5 s.
wait_stable() {
	local min="$1" last=-1 n stable=0 deadline=$((SECONDS + 180))
	while :; do
		n="$(total_records)"
		if [ "$n" -ge "$min" ] && [ "$n" = "$last" ]; then
			stable=$((stable + 1))
			[ $stable -ge 2 ] && break
		else
			stable=0
		fi
		last="$n"
		[ $SECONDS -lt $deadline ] || die "topics did not settle (have $n records, want >= $min)"
		sleep 2.5
	done
	echo "$n"
}

say "waiting for the snapshots (2 x 17 rows)"
n="$(wait_stable 34)"
say "snapshot done: $n records; running fixture-dml.sql and types-dml.sql"
"$LOCAL_DIR/postgres.sh" psql -q -f "$LOCAL_DIR/fixture-dml.sql" >/dev/null
"$LOCAL_DIR/postgres.sh" psql -q -v ON_ERROR_STOP=1 -f "$LOCAL_DIR/types-dml.sql" >/dev/null
n="$(wait_stable $((n + 2)))"
say "streaming done: $n records in all; dumping"

dump() { # dump PREFIX OUTFILE TABLE...
	local prefix="$1" outfile="$2" t
	shift 2
	: >"$WORK/$prefix.tsv"
	for t in "$@"; do
		kafka_java org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$BOOTSTRAP" \
			--topic "$prefix.public.$t" --from-beginning --timeout-ms 5000 \
			--formatter-property print.timestamp=true --formatter-property print.partition=true \
			--formatter-property print.offset=true --formatter-property print.key=true \
			--formatter-property print.value=true \
			--formatter-property key.separator=$'\t' --formatter-property line.separator=$'\n' \
			2>>"$WORK/consumer.err" | sed "s/^/$prefix.public.$t\t/" >>"$WORK/$prefix.tsv"
	done
	# topic \t CreateTime:ms \t Partition:N \t Offset:N \t key \t value. The
	# key and value are copied byte for byte (a JSON tool would reformat
	# numbers: int64 extremes and float spellings are what the tests are
	# about); jq only checks that every line parses.
	awk -F'\t' -v OFS='\t' '{
		ts = $2; sub(/^CreateTime:/, "", ts)
		p = $3; sub(/^Partition:/, "", p)
		o = $4; sub(/^Offset:/, "", o)
		print ts, "{\"topic\":\"" $1 "\",\"partition\":" p ",\"offset\":" o ",\"key\":" $5 ",\"value\":" $6 "}"
	}' <"$WORK/$prefix.tsv" | sort -s -t$'\t' -k1,1n | cut -f2- >"$outfile"
	jq -e . <"$outfile" >/dev/null || die "$outfile: not one JSON object per line"
	say "wrote $outfile ($(wc -l <"$outfile") records, $(du -h "$outfile" | cut -f1))"
}
dump dbserver1 "$OUT/schema-on.jsonl" users domains
dump dbserver2 "$OUT/schema-off.jsonl" users domains
dump dbserver1 "$OUT/types-on.jsonl" type_parents type_children
dump dbserver2 "$OUT/types-off.jsonl" type_parents type_children

#!/usr/bin/env bash
# deploy/local/capture-avro-fixtures.sh [OUTDIR]
#
# Records real Debezium messages written in Avro through Apicurio Registry
# (registry.sh) for the decoders' golden tests into OUTDIR (default
# debezium/testdata/avro/), one connector per wire format:
#   confluent.jsonl  Apicurio's AvroConverter in Confluent-compatible mode
#                    (magic byte, 4-byte content id; topic prefix avro1)
#   global.jsonl     Apicurio's own format (magic byte, 8-byte global id; avro2)
#   headers.jsonl    ids in the record headers, no magic byte (avro3)
#   json.jsonl       the same changes through JsonConverter, schemas on
#                    (json1), for comparing the formats value for value
# for users/domains (schema.sql, fixture-dml.sql, then evolve-dml.sql, which
# adds, widens and drops columns: several schema versions per table) and
# the type tables (types.sql, types-dml.sql). Lines are `cdcjoin replay`
# input with the records' bytes (key_b64, value_b64, headers; see
# e2e/cmd/cdcjoin-capture); schemas.json holds every schema the records
# name, as the registry answered, by id space.
#
# WIPES the local stack's PostgreSQL, Kafka, Connect and registry data (not
# ClickHouse) and leaves them running; stop with deploy/local/stack.sh down
# and deploy/local/registry.sh down.
set -euo pipefail
SCRIPT=capture-avro-fixtures.sh
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT="${1:-$REPO_DIR/debezium/testdata/avro}"
BOOTSTRAP="127.0.0.1:${KAFKA_PORT:-19092}"
REG="http://127.0.0.1:${REGISTRY_PORT:-18081}"
TABLES=(users domains type_parents type_children)

say "wiping and restarting postgres, kafka, connect, registry"
"$LOCAL_DIR/connect.sh" down
"$LOCAL_DIR/kafka.sh" down
"$LOCAL_DIR/postgres.sh" down
"$LOCAL_DIR/registry.sh" down
rm -rf "$RUN_ROOT/kafka" "$RUN_ROOT/connect" "$RUN_ROOT/postgres" "$RUN_ROOT/registry"
mkdir -p "$OUT"
"$LOCAL_DIR/postgres.sh" install
"$LOCAL_DIR/kafka.sh" install
"$LOCAL_DIR/registry.sh" install
"$LOCAL_DIR/postgres.sh" up >/dev/null
"$LOCAL_DIR/kafka.sh" up >/dev/null
"$LOCAL_DIR/registry.sh" up >/dev/null
"$LOCAL_DIR/connect.sh" up >/dev/null
"$LOCAL_DIR/postgres.sh" psql -q -v ON_ERROR_STOP=1 -f "$LOCAL_DIR/types.sql" >/dev/null

CONN="$LOCAL_DIR/debezium-postgres.json"
COMMON=(database.port="${PG_PORT:-15432}"
	table.include.list=public.users,public.domains,public.type_parents,public.type_children)
# avro SIDE ARGS...: AvroConverter settings for key or value.
avro() {
	local side="$1"
	shift
	echo "$side.converter=io.apicurio.registry.utils.converter.AvroConverter" \
		"$side.converter.apicurio.registry.url=$REG/apis/registry/v2" \
		"$side.converter.apicurio.registry.auto-register=true" \
		"$side.converter.apicurio.registry.find-latest=true" "$@"
}
# shellcheck disable=SC2046
"$LOCAL_DIR/connect.sh" register "$CONN" name=avro-confluent "${COMMON[@]}" \
	topic.prefix=avro1 slot.name=avro1 publication.name=avro1 \
	$(avro key key.converter.apicurio.registry.as-confluent=true key.converter.apicurio.registry.use-id=contentId key.converter.apicurio.registry.headers.enabled=false) \
	$(avro value value.converter.apicurio.registry.as-confluent=true value.converter.apicurio.registry.use-id=contentId value.converter.apicurio.registry.headers.enabled=false)
# shellcheck disable=SC2046
"$LOCAL_DIR/connect.sh" register "$CONN" name=avro-global "${COMMON[@]}" \
	topic.prefix=avro2 slot.name=avro2 publication.name=avro2 \
	$(avro key key.converter.apicurio.registry.headers.enabled=false) \
	$(avro value value.converter.apicurio.registry.headers.enabled=false)
# shellcheck disable=SC2046
"$LOCAL_DIR/connect.sh" register "$CONN" name=avro-headers "${COMMON[@]}" \
	topic.prefix=avro3 slot.name=avro3 publication.name=avro3 \
	$(avro key key.converter.apicurio.registry.headers.enabled=true) \
	$(avro value value.converter.apicurio.registry.headers.enabled=true)

"$LOCAL_DIR/connect.sh" register "$CONN" name=json-same "${COMMON[@]}" \
	topic.prefix=json1 slot.name=json1 publication.name=json1 \
	key.converter=org.apache.kafka.connect.json.JsonConverter key.converter.schemas.enable=true \
	value.converter=org.apache.kafka.connect.json.JsonConverter value.converter.schemas.enable=true

topics() { # topics PREFIX...: the fixture topics of the prefixes, |-joined
	local out=() p t
	for p in "$@"; do
		for t in "${TABLES[@]}"; do out+=("$p.public.$t"); done
	done
	(IFS='|'; echo "${out[*]}")
}
total_records() {
	kafka_java org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$BOOTSTRAP" \
		--topic "$(topics avro1 avro2 avro3 json1)" 2>/dev/null | awk -F: '{s += $NF} END {print s + 0}'
}
wait_stable() { # wait_stable MIN
	local min="$1" last=-1 n stable=0 deadline=$((SECONDS + 240))
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

say "waiting for the snapshots (4 x 17 rows)"
n="$(wait_stable 68)"
say "snapshot done: $n records; running fixture-dml.sql, types-dml.sql, evolve-dml.sql"
"$LOCAL_DIR/postgres.sh" psql -q -f "$LOCAL_DIR/fixture-dml.sql" >/dev/null
"$LOCAL_DIR/postgres.sh" psql -q -v ON_ERROR_STOP=1 -f "$LOCAL_DIR/types-dml.sql" >/dev/null
"$LOCAL_DIR/postgres.sh" psql -q -f "$LOCAL_DIR/evolve-dml.sql" >/dev/null
n="$(wait_stable $((n + 3)))"
say "streaming done: $n records in all; dumping"

cd "$REPO_DIR"
go build -o "$RUN_ROOT/cdcjoin-capture" ./e2e/cmd/cdcjoin-capture
for pair in confluent:avro1 global:avro2 headers:avro3 json:json1; do
	name="${pair%%:*}" prefix="${pair#*:}"
	"$RUN_ROOT/cdcjoin-capture" --brokers "$BOOTSTRAP" --registry "$REG" \
		--topics "$(topics "$prefix" | tr '|' ',')" \
		--out "$OUT/$name.jsonl" --schemas "$OUT/$name.schemas.json"
done
say "wrote $OUT"

#!/usr/bin/env bash
# e2e/run.sh: the real-stack end-to-end test (`make e2e`).
#
# Brings up the local stack (deploy/local/stack.sh: PostgreSQL, Kafka,
# Kafka Connect + Debezium, ClickHouse), builds cdcjoin and the driver
# (e2e/cmd/cdcjoin-e2e), and runs the driver, which prepares a fresh source
# database, registers connectors (schemas on; and off for the typed join),
# runs `cdcjoin run` for deploy/local/e2e-inner.yaml, e2e-left.yaml and the
# typed joins e2e-types-on.yaml / e2e-types-off.yaml and the job written as
# SQL over three tables e2e-records.yaml (a multi-stage plan: users ⋈ domains
# ⟕ dns_records with conditions in ON and WHERE), applies the workload
# with a kill -9 restart, waits until cdcjoin caught up, compares ClickHouse
# with PostgreSQL row for row and column for column, runs the negative
# controls and prints the report.
# On exit it stops the stack components that it started (those already
# running are left alone).
#
# Environment:
#   E2E_SEED        workload seed (default 1)
#   E2E_ARGS        extra driver flags (e.g. "-random-txs 100 -kill=false")
#   E2E_KEEP=1      leave the stack running afterwards
#   E2E_CDCJOIN     use this binary instead of building cmd/cdcjoin
#   E2E_AVRO=0      skip the second pass: the same e2e with Debezium writing
#                   Avro through Apicurio Registry (registry.sh), the configs
#                   e2e-avro-*.yaml, and a 30 s registry outage while cdcjoin
#                   restarts after the kill
#   E2E_ARGS_AVRO   extra driver flags of the Avro pass
#
# The configs are copied to deploy/local/.run/e2e/configs with the ports of
# this machine's servers (KAFKA_PORT, CH_NATIVE_PORT, REGISTRY_PORT; the
# metrics ports 1946x move by KAFKA_PORT - 19092).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
LOCAL="$ROOT/deploy/local"
OUT="$LOCAL/.run/e2e"
T0=$SECONDS
say() { echo "e2e/run.sh: $*" >&2; }

mkdir -p "$OUT" "$ROOT/bin"
components=(postgres kafka connect clickhouse)
if [ "${E2E_AVRO:-1}" != 0 ]; then components+=(registry); fi
started=()
for c in "${components[@]}"; do
	if ! "$LOCAL/$c.sh" status >/dev/null 2>&1; then started+=("$c"); fi
done

cleanup() {
	local rc=$?
	if [ "${E2E_KEEP:-0}" = 1 ]; then
		say "E2E_KEEP=1: leaving the stack running"
	else
		local i
		for ((i = ${#started[@]} - 1; i >= 0; i--)); do
			"$LOCAL/${started[i]}.sh" down >&2 || rc=1
		done
	fi
	say "total $((SECONDS - T0))s, exit $rc"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "stack up (components started here: ${started[*]:-none})"
STACK_CONNECTOR= "$LOCAL/stack.sh" up >/dev/null
# shellcheck disable=SC1091
. "$LOCAL/.run/env"
if [ "${E2E_AVRO:-1}" != 0 ]; then
	"$LOCAL/registry.sh" install >&2
	eval "$("$LOCAL/registry.sh" up)"
	export CDCJOIN_REGISTRY_URL
fi
say "stack ready after $((SECONDS - T0))s"

bin="${E2E_CDCJOIN:-}"
if [ -z "$bin" ]; then
	bin="$ROOT/bin/cdcjoin"
	go build -o "$bin" ./cmd/cdcjoin
fi
say "using $bin"
go build -o "$ROOT/bin/cdcjoin-e2e" ./e2e/cmd/cdcjoin-e2e

# The configs with this machine's ports.
CONF="$OUT/configs"
mkdir -p "$CONF"
shift_ports=$(( ${KAFKA_PORT:-19092} - 19092 ))
subst=(-e "s/127\.0\.0\.1:19092/127.0.0.1:${KAFKA_PORT:-19092}/g"
	-e "s/127\.0\.0\.1:19000/127.0.0.1:${CH_NATIVE_PORT:-19000}/g"
	-e "s|127\.0\.0\.1:18081/|127.0.0.1:${REGISTRY_PORT:-18081}/|g")
for p in 19460 19461 19462 19463 19464 19465 19466 19467 19468 19469; do
	subst+=(-e "s/127\.0\.0\.1:$p\$/127.0.0.1:$((p + shift_ports))/")
done
for f in "$LOCAL"/e2e-*.yaml; do
	sed "${subst[@]}" "$f" >"$CONF/$(basename "$f")"
done
c() { echo "$CONF/$1"; } # c NAME: the rewritten config

# shellcheck disable=SC2086
"$ROOT/bin/cdcjoin-e2e" -cdcjoin "$bin" -seed "${E2E_SEED:-1}" -logdir "$OUT" \
	-configs "$(c e2e-inner.yaml),$(c e2e-left.yaml)" \
	-type-configs "$(c e2e-types-on.yaml),$(c e2e-types-off.yaml)" \
	-plan-configs "$(c e2e-records.yaml)" \
	${E2E_ARGS:-} 2>&1 | tee "$OUT/driver.log"
if [ "${E2E_AVRO:-1}" != 0 ]; then
	say "second pass: Debezium writing Avro through the schema registry"
	# shellcheck disable=SC2086
	"$ROOT/bin/cdcjoin-e2e" -cdcjoin "$bin" -seed "${E2E_SEED:-1}" -logdir "$OUT" -db e2eavro -format avro \
		-registry-script "$LOCAL/registry.sh" \
		-configs "$(c e2e-avro-inner.yaml),$(c e2e-avro-left.yaml)" -type-configs "$(c e2e-avro-types.yaml)" \
		${E2E_ARGS_AVRO:-} 2>&1 | tee "$OUT/driver-avro.log"
fi

# The broker's own faults (a private KRaft broker of the test's, killed,
# stopped and restarted under three `cdcjoin run` instances; ClickHouse from
# the stack): TESTING.md, "Kafka".
say "broker faults (cmd/cdcjoin TestBrokerRestarts)"
CDCJOIN_BROKER_FAULTS=1 CDCJOIN_CLICKHOUSE_ADDR="${CDCJOIN_CLICKHOUSE_ADDR:-}" \
	go test -count=1 -timeout 20m -run '^TestBrokerRestarts$' -v ./cmd/cdcjoin 2>&1 | tee "$OUT/broker-faults.log" | grep -E '^(=== RUN|--- |PASS|FAIL|ok)|broker_test.go' || true
if ! grep -q -- '--- PASS: TestBrokerRestarts' "$OUT/broker-faults.log"; then
	# The failure's whole report (diffs, /readyz, /statusz, the runs' log
	# tails) is in lines the filter above leaves out.
	say "broker faults failed; the end of the test's output:"
	tail -n 250 "$OUT/broker-faults.log"
	say "broker faults failed (log: $OUT/broker-faults.log)"
	exit 1
fi

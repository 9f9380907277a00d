#!/usr/bin/env bash
# e2e/run.sh: the real-stack end-to-end test (`make e2e`).
#
# Brings up the local stack (deploy/local/stack.sh: PostgreSQL, Kafka,
# Kafka Connect + Debezium, ClickHouse), builds cdcjoin and the driver
# (e2e/cmd/cdcjoin-e2e), and runs the driver, which prepares a fresh source
# database, registers connectors (schemas on; and off for the typed join),
# runs `cdcjoin run` for deploy/local/e2e-inner.yaml, e2e-left.yaml and the
# typed joins e2e-types-on.yaml / e2e-types-off.yaml, applies the workload
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
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
LOCAL="$ROOT/deploy/local"
OUT="$LOCAL/.run/e2e"
T0=$SECONDS
say() { echo "e2e/run.sh: $*" >&2; }

mkdir -p "$OUT" "$ROOT/bin"
components=(postgres kafka connect clickhouse)
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
say "stack ready after $((SECONDS - T0))s"

bin="${E2E_CDCJOIN:-}"
if [ -z "$bin" ]; then
	bin="$ROOT/bin/cdcjoin"
	go build -o "$bin" ./cmd/cdcjoin
fi
say "using $bin"
go build -o "$ROOT/bin/cdcjoin-e2e" ./e2e/cmd/cdcjoin-e2e

# shellcheck disable=SC2086
"$ROOT/bin/cdcjoin-e2e" -cdcjoin "$bin" -seed "${E2E_SEED:-1}" -logdir "$OUT" ${E2E_ARGS:-} 2>&1 | tee "$OUT/driver.log"

# The broker's own faults (a private KRaft broker of the test's, killed,
# stopped and restarted under three `cdcjoin run` instances; ClickHouse from
# the stack): TESTING.md, "Kafka".
say "broker faults (cmd/cdcjoin TestBrokerRestarts)"
CDCJOIN_BROKER_FAULTS=1 CDCJOIN_CLICKHOUSE_ADDR="${CDCJOIN_CLICKHOUSE_ADDR:-}" \
	go test -count=1 -timeout 20m -run '^TestBrokerRestarts$' -v ./cmd/cdcjoin 2>&1 | tee "$OUT/broker-faults.log" | grep -E '^(=== RUN|--- |PASS|FAIL|ok)|broker_test.go' || true
grep -q -- '--- PASS: TestBrokerRestarts' "$OUT/broker-faults.log" || { say "broker faults failed (log: $OUT/broker-faults.log)"; exit 1; }

#!/usr/bin/env bash
# deploy/local/stack.sh {install|up|down|status}
#
# The whole local stack on loopback, no Docker:
#   PostgreSQL 127.0.0.1:15432 (postgres.sh), Kafka 127.0.0.1:19092 (kafka.sh),
#   Kafka Connect + Debezium 127.0.0.1:18083 (connect.sh, connector from
#   debezium-postgres.json), ClickHouse 127.0.0.1:19000 (clickhouse.sh, when
#   that script exists).
#
#   install  install/fetch everything (apt packages, Maven jars); idempotent
#   up       install, then start in dependency order, register the connector
#            and write deploy/local/.run/env with the export lines; prints
#            them too, so `eval "$(deploy/local/stack.sh up)"` works
#   down     stop everything in reverse order (data is kept under .run/)
#   status   status of each component; exit 1 when one is down
#
# Environment: STACK_CONNECTOR (deploy/local/debezium-postgres.json; empty =
# do not register), STACK_CLICKHOUSE (1; 0 = leave ClickHouse alone), plus
# each script's own variables.
set -euo pipefail
SCRIPT=stack.sh
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONNECTOR="${STACK_CONNECTOR-$LOCAL_DIR/debezium-postgres.json}"
ENV_FILE="$RUN_ROOT/env"
HAVE_CH=false
if [ "${STACK_CLICKHOUSE:-1}" != 0 ] && [ -x "$LOCAL_DIR/clickhouse.sh" ]; then HAVE_CH=true; fi

cmd_install() {
	local t0=$SECONDS
	"$LOCAL_DIR/postgres.sh" install
	"$LOCAL_DIR/kafka.sh" install
	if $HAVE_CH; then "$LOCAL_DIR/clickhouse.sh" install >&2; fi
	say "install done in $((SECONDS - t0))s"
}

cmd_up() {
	cmd_install
	local t0=$SECONDS env
	mkdir -p "$RUN_ROOT"
	env="$("$LOCAL_DIR/postgres.sh" up)"
	env+=$'\n'"$("$LOCAL_DIR/kafka.sh" up)"
	env+=$'\n'"$("$LOCAL_DIR/connect.sh" up)"
	if [ -n "$CONNECTOR" ]; then
		"$LOCAL_DIR/connect.sh" register "$CONNECTOR"
	fi
	if $HAVE_CH; then
		env+=$'\n'"$("$LOCAL_DIR/clickhouse.sh" up)"
	fi
	printf '# Written by deploy/local/stack.sh up; source it: . deploy/local/.run/env\n%s\n' "$env" >"$ENV_FILE"
	say "stack up in $((SECONDS - t0))s; environment in $ENV_FILE"
	echo "$env"
}

cmd_down() {
	local rc=0
	if $HAVE_CH; then "$LOCAL_DIR/clickhouse.sh" down || rc=1; fi
	"$LOCAL_DIR/connect.sh" down || rc=1
	"$LOCAL_DIR/kafka.sh" down || rc=1
	"$LOCAL_DIR/postgres.sh" down || rc=1
	rm -f "$ENV_FILE"
	return $rc
}

cmd_status() {
	local rc=0
	"$LOCAL_DIR/postgres.sh" status || rc=1
	"$LOCAL_DIR/kafka.sh" status || rc=1
	"$LOCAL_DIR/connect.sh" status || rc=1
	if $HAVE_CH; then "$LOCAL_DIR/clickhouse.sh" status || rc=1; fi
	return $rc
}

case "${1:-}" in
install) cmd_install ;;
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
*) echo "usage: $0 {install|up|down|status}" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# deploy/local/registry.sh {install|up|down|status}
#
# Apicurio Registry 3 on loopback: the schema registry Debezium's Avro
# converter writes through (connect.sh loads Apicurio's converter as a
# plugin) and cdcjoin reads from (schema_registry.url). It serves
# Apicurio's own API (/apis/registry/v3, and v2 for the 2.x converters) and
# its Confluent-compatible one (/apis/ccompat/v7). Schemas are kept in an H2
# file database under deploy/local/.run/registry/, so a restart (`down` then
# `up`, as the e2e's registry outage does) keeps every id.
#
#   install  fetch the registry (Maven Central's apicurio-registry-app "all"
#            tar.gz, the Quarkus fast-jar layout) into the jar cache, unpacked
#   up       start it, wait until its API answers, print
#            `export CDCJOIN_REGISTRY_URL=http://127.0.0.1:18081/apis/ccompat/v7`
#   down     stop what `up` started (pid file), wait for it to exit
#   status   exit 0 when the API answers
#
# Needs Java 21 or newer (Apicurio 3 is built for 21): $REGISTRY_JAVA, else
# the newest java >= 21 under /usr/lib/jvm, else java on PATH if it is new
# enough.
#
# Environment: REGISTRY_PORT (18081), REGISTRY_MANAGEMENT_PORT (REGISTRY_PORT
# + 1000), REGISTRY_HEAP (-Xms64m -Xmx512m), REGISTRY_START_TIMEOUT (180)
# seconds, REGISTRY_JAVA.
set -euo pipefail
SCRIPT=registry.sh
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RUN="$RUN_ROOT/registry"
PORT="${REGISTRY_PORT:-18081}"
MGMT_PORT="${REGISTRY_MANAGEMENT_PORT:-$((PORT + 1000))}"
HEAP="${REGISTRY_HEAP:--Xms64m -Xmx512m}"
TIMEOUT="${REGISTRY_START_TIMEOUT:-180}"
PIDFILE="$RUN/registry.pid"
LOGS="$RUN/logs"
APP_DIR="$JARS_DIR/apicurio-registry"
URL="http://127.0.0.1:$PORT"

# java_major JAVA: the major version of that java binary (0 when it does not run).
java_major() {
	local v
	v="$("$1" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')" || true
	v="${v#1.}"
	echo "${v%%[.+-]*}" | grep -E '^[0-9]+$' || echo 0
}

# registry_java: print a java binary of version 21 or newer, or fail.
registry_java() {
	local j best="" bestv=0 v
	if [ -n "${REGISTRY_JAVA:-}" ]; then
		[ "$(java_major "$REGISTRY_JAVA")" -ge 21 ] || die "REGISTRY_JAVA=$REGISTRY_JAVA is not Java 21 or newer"
		echo "$REGISTRY_JAVA"
		return
	fi
	for j in /usr/lib/jvm/*/bin/java "$(command -v java || true)"; do
		[ -x "$j" ] || continue
		v="$(java_major "$j")"
		if [ "$v" -ge 21 ] && [ "$v" -gt "$bestv" ]; then best="$j" bestv="$v"; fi
	done
	[ -n "$best" ] || die "Apicurio Registry 3 needs Java 21 or newer; none found under /usr/lib/jvm or on PATH (set REGISTRY_JAVA)"
	echo "$best"
}

cmd_install() {
	ensure_java
	mkdir -p "$CACHE_DIR"
	local tgz="$JARS_DIR/apicurio-registry-tgz"
	fetch_jars apicurio-registry "$tgz" "$REGISTRY_POM"
	local hash marker="$APP_DIR/.cdcjoin-pom-apicurio-registry"
	hash="$(cat "$tgz/.cdcjoin-pom-apicurio-registry")"
	if [ -f "$marker" ] && [ "$(cat "$marker")" = "$hash" ]; then
		say "registry unpacked in $APP_DIR"
		return 0
	fi
	rm -rf "$APP_DIR"
	mkdir -p "$APP_DIR"
	tar -xzf "$tgz"/apicurio-registry-app-*-all.tar.gz -C "$APP_DIR"
	[ -f "$APP_DIR/quarkus-run.jar" ] || die "the registry archive has no quarkus-run.jar"
	echo "$hash" >"$marker"
	say "registry unpacked in $APP_DIR"
}

answers() {
	curl -sf -m 5 "$URL/apis/registry/v3/system/info" >/dev/null 2>&1
}

cmd_up() {
	[ -f "$APP_DIR/quarkus-run.jar" ] || die "registry missing in $APP_DIR; run: $0 install"
	command -v curl >/dev/null || apt_install curl
	local pid java
	if pid="$(pid_alive "$PIDFILE")"; then
		if answers; then
			say "already running (pid $pid) on $URL"
			echo "export CDCJOIN_REGISTRY_URL=$URL/apis/ccompat/v7"
			return 0
		fi
	elif port_open "$PORT"; then
		die "something not started by this script listens on 127.0.0.1:$PORT"
	fi
	java="$(registry_java)"
	mkdir -p "$RUN/data" "$LOGS"
	if ! pid_alive "$PIDFILE" >/dev/null; then
		# The management interface (health, metrics) cannot be turned off at
		# run time (quarkus.management.enabled is fixed when the registry is
		# built): it listens on loopback at its own port, not 0.0.0.0:9000,
		# so that several registries can run on one machine. AUTH off,
		# file-backed H2 so ids survive restarts.
		# shellcheck disable=SC2086
		start_bg "$PIDFILE" "$LOGS/registry.log" "$java" $HEAP -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
			-Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$PORT" \
			-Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$MGMT_PORT" \
			-Dquarkus.log.console.json=false \
			-Dapicurio.datasource.url="jdbc:h2:file:$RUN/data/registry;DB_CLOSE_ON_EXIT=FALSE" \
			-Dapicurio.datasource.jdbc.initial-size=2 -Dapicurio.datasource.jdbc.min-size=2 \
			-Dapicurio.datasource.jdbc.max-size=10 \
			-Dapicurio.rest.deletion.artifact.enabled=true \
			-jar "$APP_DIR/quarkus-run.jar"
	fi
	wait_ready "Apicurio Registry on $URL" "$PIDFILE" "$TIMEOUT" answers "$LOGS/registry.log"
	say "up (pid $(pid_alive "$PIDFILE")) on $URL ($java); logs in $LOGS"
	echo "export CDCJOIN_REGISTRY_URL=$URL/apis/ccompat/v7"
}

cmd_down() {
	stop_pid "$PIDFILE" "registry" 60
}

cmd_status() {
	local pid
	if pid="$(pid_alive "$PIDFILE")" && answers; then
		echo "registry.sh: running (pid $pid) on $URL"
		return 0
	fi
	echo "registry.sh: not running"
	return 1
}

case "${1:-}" in
install) cmd_install ;;
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
reset) cmd_down; rm -rf "$RUN/data"; say "data removed" ;;
*) echo "usage: $0 {install|up|down|status|reset}" >&2; exit 2 ;;
esac

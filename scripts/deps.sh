#!/usr/bin/env bash
# Installs everything cdcjoin's tests need on a fresh Debian 12 machine, as
# root: ClickHouse and PostgreSQL from Debian's packages, Kafka/Connect/
# Debezium and Flink jars from Maven Central (cached), chdb (a current
# ClickHouse, from PyPI, in a virtualenv) and the Go modules. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
deploy/local/clickhouse.sh install
deploy/local/kafka.sh install
if [ -x deploy/local/postgres.sh ]; then deploy/local/postgres.sh install; fi
if [ -x deploy/local/connect.sh ]; then deploy/local/connect.sh install; fi
deploy/local/registry.sh install
scripts/chdb.sh install
# The Flink peer of `cdcjoin bench --peer flink` (bench/peers/flink; bench/smoke.sh
# tests it): a JDK 17 to compile it, Maven, and Flink's jars in ~/.m2 (~220 MB).
if ! command -v javac >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openjdk-17-jdk-headless maven
fi
# dependency:go-offline takes ~25 s even when everything is in ~/.m2: a marker
# with the pom's hash skips it (removed with the cache, or when ~/.m2 lost Flink).
cache="${CDCJOIN_CACHE:-$HOME/.cache/cdcjoin}"
flink_mark="$cache/flink-peer-offline-$(sha256sum bench/peers/flink/pom.xml | cut -c1-16)"
if [ -f "$flink_mark" ] && [ -d "$HOME/.m2/repository/org/apache/flink" ]; then
	echo "deps.sh: the Flink peer's jars are in ~/.m2" >&2
else
	mvn -B -q --no-transfer-progress -f bench/peers/flink/pom.xml dependency:go-offline
	mkdir -p "$cache" && touch "$flink_mark"
fi
go mod download
(cd deploy && go mod download)
echo "deps: installed in $(( $(date +%s) - start ))s" >&2

#!/usr/bin/env bash
# Installs everything cdcjoin's tests need on a fresh Debian 12 machine, as
# root: ClickHouse and PostgreSQL from Debian's packages, Kafka/Connect/
# Debezium jars from Maven Central (cached), chdb (a current ClickHouse,
# from PyPI, in a virtualenv) and the Go modules. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
deploy/local/clickhouse.sh install
deploy/local/kafka.sh install
if [ -x deploy/local/postgres.sh ]; then deploy/local/postgres.sh install; fi
if [ -x deploy/local/connect.sh ]; then deploy/local/connect.sh install; fi
scripts/chdb.sh install
go mod download
echo "deps: installed in $(( $(date +%s) - start ))s" >&2

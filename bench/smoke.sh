#!/bin/sh
# bench/smoke.sh: run a tiny real benchmark (< 2 minutes) and check that
# report.json and REPORT.md exist and hold sane numbers. Used by
# `make bench-smoke`.
set -eu
cd "$(dirname "$0")/.."
CDCJOIN_BENCH_SMOKE=1 go test -count=1 -run '^TestSmoke(Kafka)?$' -v -timeout 5m ./bench/

#!/bin/sh
# bench/smoke.sh: run a tiny real benchmark (< 2 minutes) and check that
# report.json and REPORT.md exist and hold sane numbers; then the Flink peer
# on small runs (~1 minute once its jars are in ~/.m2, scripts/deps.sh; the
# peer's Maven build adds ~10 s the first time): its final join must equal
# the SQL oracle's and cdcjoin's. Used by `make bench-smoke`.
set -eu
cd "$(dirname "$0")/.."
CDCJOIN_BENCH_SMOKE=1 go test -count=1 -run '^TestSmoke(Kafka)?$' -v -timeout 5m ./bench/
CDCJOIN_PEER_FLINK=1 go test -count=1 -p 1 -run '^(TestFlinkOracle|TestSmokePeerFlink)$' -v -timeout 10m ./bench/peers/ ./bench/

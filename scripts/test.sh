#!/usr/bin/env bash
# The test command (`make test`): formatting, vet, then every test with the
# race detector against real ClickHouse and Kafka servers started here on
# 127.0.0.1 (deploy/local/*.sh), then the 30-seed oracle without -race (it is
# CPU-bound; -race runs 4 seeds of it). Servers are stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
export CI="${CI:-}"

echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$bad" ]; then echo "gofmt would change:"; echo "$bad"; exit 1; fi
echo "== go vet"
go vet ./...

cleanup() {
  deploy/local/kafka.sh down >/dev/null 2>&1 || true
  deploy/local/clickhouse.sh down >/dev/null 2>&1 || true
}
trap cleanup EXIT
echo "== starting ClickHouse and Kafka on loopback"
eval "$(deploy/local/clickhouse.sh up)"
eval "$(deploy/local/kafka.sh up)"
export CDCJOIN_CLICKHOUSE_ADDR CDCJOIN_KAFKA_BROKERS
# Integration tests must run, not skip: testenv fails them if an address is missing.
export CI=true

echo "== go test -race (integration tests against the real servers)"
go test -race -short -count=1 -timeout 30m ./...
echo "== oracle: 30 seeds x INNER/LEFT, crash/restart"
go test -count=1 -timeout 30m -run 'TestOracle' ./engine/
echo "== cdcjoin demo"
go run ./cmd/cdcjoin demo > /tmp/cdcjoin-demo.out
grep -q "Cancellation" /tmp/cdcjoin-demo.out
echo "test: all passed"

#!/usr/bin/env bash
# The test command (`make test`): formatting, vet, then every test with the
# race detector against real ClickHouse, Kafka and PostgreSQL servers started here on
# 127.0.0.1 (deploy/local/*.sh) and a current ClickHouse in-process (chdb), then the 30-seed oracle without -race (it is
# CPU-bound; -race runs 4 seeds of it). Servers are stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
export CI="${CI:-}"

echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$bad" ]; then echo "gofmt would change:"; echo "$bad"; exit 1; fi
echo "== go vet"
go vet ./...
# deploy/ is a Go module of its own (Helm, Kubernetes API types, the PromQL parser,
# compose-go: kept out of cdcjoin's go.mod); its tests run below.
(cd deploy && go vet ./...)

cleanup() {
  deploy/local/kafka.sh down >/dev/null 2>&1 || true
  deploy/local/clickhouse.sh down >/dev/null 2>&1 || true
  deploy/local/postgres.sh down >/dev/null 2>&1 || true
  deploy/local/registry.sh down >/dev/null 2>&1 || true
}
trap cleanup EXIT
echo "== starting ClickHouse, Kafka, PostgreSQL and the schema registry on loopback"
eval "$(deploy/local/clickhouse.sh up)"
eval "$(deploy/local/kafka.sh up)"
eval "$(deploy/local/postgres.sh up)"
deploy/local/registry.sh install >/dev/null
eval "$(deploy/local/registry.sh up)"
export CDCJOIN_CLICKHOUSE_ADDR CDCJOIN_KAFKA_BROKERS CDCJOIN_POSTGRES_DSN CDCJOIN_REGISTRY_URL
# A current ClickHouse in-process (scripts/chdb.sh, installed by make deps).
CDCJOIN_CHDB_PYTHON="$(scripts/chdb.sh path)"
export CDCJOIN_CHDB_PYTHON
# Integration tests must run, not skip: testenv fails them if an address is missing.
export CI=true

echo "== go test -race (integration tests against the real servers)"
# TestServerRestart stops and restarts the shared ClickHouse server: it runs
# on its own below, not while other packages' tests use the server.
# -timeout is per package binary and only a hang detector (the slow tests wait on
# progress themselves): cmd/cdcjoin's kill tests alone took 30+ min at load 30.
# The slowest packages are listed first (go test starts test binaries in the
# order given, two at a time on two cores): cmd/cdcjoin and kafkarun then run
# side by side from the start instead of kafkarun starting last, alone (about
# 5 minutes less on a 2-core machine).
slow="./cmd/cdcjoin ./kafkarun ./joinstate ./engine"
rest=$(go list ./... | grep -v -x $(for p in $slow; do printf -- '-e github.com/cdcjoin/cdcjoin/%s ' "${p#./}"; done))
go test -race -short -count=1 -timeout 60m -skip '^TestServerRestart$' $slow $rest
echo "== deploy/: Helm chart (lint, render), Kubernetes manifests (strict API types), dashboard against a live run, compose file"
(cd deploy && go test -count=1 -timeout 15m ./...)
echo "== ClickHouse stopped and restarted under the sink (alone: it restarts the shared server)"
go test -race -short -count=1 -timeout 10m -run '^TestServerRestart$' ./sink/clickhouse/
echo "== oracle: 30 seeds x INNER/LEFT, crash/restart"
go test -count=1 -timeout 30m -run 'TestOracle' ./engine/
go test -count=1 -timeout 20m -run 'TestMultiOracle' ./engine/ -args -seeds=3
echo "== the bench harness's --brokers path, checked against the join (skipped under -short above)"
go test -count=1 -timeout 10m -run '^TestKafkaBrokers$' ./bench/
echo "== cdcjoin demo (also into ClickHouse)"
go build -o bin/cdcjoin ./cmd/cdcjoin
bin/cdcjoin demo --clickhouse "$CDCJOIN_CLICKHOUSE_ADDR" | tee /tmp/cdcjoin-demo.out | tail -8
grep -q "done: every step matched the expected join." /tmp/cdcjoin-demo.out
got=$(clickhouse-client --port "${CDCJOIN_CLICKHOUSE_ADDR##*:}" -q \
  "SELECT user_id, firstname, lastname, domain_id, domain_name FROM cdcjoin_demo.user_domains_current ORDER BY user_id, domain_id FORMAT CSV")
want='1,"Egor","Myasnikov",1,"Approval"
1,"Egor","Myasnikov",2,"Rejection"
2,"Pavel","Hvastun",3,"Stoppage"
2,"Pavel","Hvastun",5,"Renewal"'
if [ "$got" != "$want" ]; then echo "demo: ClickHouse holds:"; echo "$got"; echo "want:"; echo "$want"; exit 1; fi
echo "test: all passed"

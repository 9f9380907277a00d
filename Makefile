# cdcjoin developer targets. `make test` is THE test command (CI runs it).
SHELL := /bin/bash
GO ?= go

.PHONY: build test unit deps e2e bench-smoke bench peer-flink-test peer-dbsp-test bench-peer stack-up stack-down demo fmt vet clean

build:
	$(GO) build -o bin/cdcjoin ./cmd/cdcjoin

## test: everything CI checks: gofmt, vet, unit + integration tests (-race)
## against real ClickHouse and Kafka started on loopback, the 30-seed oracle.
## Installs what it needs first (scripts/deps.sh: cached, ~2 s when installed).
test: deps
	scripts/test.sh

## unit: fast tests only, no servers (integration tests skip).
unit:
	$(GO) test -short ./...

## deps: install what the tests need on a fresh Debian machine (apt, Maven jars,
## chdb, Go modules); idempotent and cached. test, e2e and bench-smoke run it first.
deps:
	scripts/deps.sh

## e2e: PostgreSQL → Debezium → Kafka → cdcjoin → ClickHouse on loopback, with a
## kill -9 restart; ClickHouse must equal PostgreSQL's join row for row (INNER, LEFT, and
## a three-table job written as SQL: LEFT JOIN with a condition in ON and WHERE filters).
e2e: deps
	bash e2e/run.sh

## bench-smoke: a 20,000-row run of the benchmark harness (< 2 min); checks its report.
bench-smoke: deps
	bench/smoke.sh

## peer-flink-test: the Flink peer against the SQL oracle and against cdcjoin on
## small runs (needs a JDK 17+ and Maven; part of bench-smoke).
peer-flink-test:
	CDCJOIN_PEER_FLINK=1 $(GO) test -count=1 -p 1 -run '^(TestFlinkOracle|TestSmokePeerFlink)$$' -v -timeout 10m ./bench/peers/ ./bench/

## peer-dbsp-test: the DBSP peer against the SQL oracle (needs cargo; its first
## build compiles the dbsp crate: many minutes, so CI does not run it).
peer-dbsp-test:
	CDCJOIN_PEER_DBSP=1 $(GO) test -count=1 -run '^TestDBSPOracle$$' -v -timeout 60m ./bench/peers/

## bench-peer: cdcjoin vs its peers on one 1e6-row workload (bench/out-peer/);
## PEERS=flink,dbsp adds the DBSP peer (its first build takes many minutes)
PEERS ?= flink
bench-peer: build
	bin/cdcjoin bench --peer $(PEERS) --rows 1e6 --peer-rounds 3 --out bench/out-peer

## bench: the 1e6-row benchmark (reports under bench/out/)
bench: build
	bin/cdcjoin bench --rows 1e6 --out bench/out

demo: build
	bin/cdcjoin demo

stack-up:
	deploy/local/stack.sh up

stack-down:
	deploy/local/stack.sh down

fmt:
	gofmt -w $$(git ls-files '*.go')

vet:
	$(GO) vet ./...

clean:
	rm -rf bin

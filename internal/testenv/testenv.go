// Package testenv tells integration tests where the real servers are.
//
// Each server is named by an environment variable that the repo's scripts
// set (deploy/local/*.sh, `make test`). When a variable is unset the test is
// skipped on a developer machine, but fails under CI (CI=true), where a
// skipped integration test would be a silent pass.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Environment variables naming the real servers.
const (
	ClickHouseEnv = "CDCJOIN_CLICKHOUSE_ADDR" // host:port of ClickHouse's native protocol
	KafkaEnv      = "CDCJOIN_KAFKA_BROKERS"   // comma-separated bootstrap brokers of a real Kafka
	PostgresEnv   = "CDCJOIN_POSTGRES_DSN"    // postgres://… of a PostgreSQL with wal_level=logical
	ConnectEnv    = "CDCJOIN_CONNECT_URL"     // http://host:port of Kafka Connect's REST API
	RegistryEnv   = "CDCJOIN_REGISTRY_URL"    // a schema registry's Confluent-compatible API (Apicurio: …/apis/ccompat/v7)
	ChdbEnv       = "CDCJOIN_CHDB_PYTHON"     // a python3 that imports chdb (a current ClickHouse, in-process)
)

// Require returns the value of the environment variable env, skipping the
// test when it is unset outside CI and failing it when unset under CI.
func Require(t testing.TB, env, what string) string {
	t.Helper()
	v := os.Getenv(env)
	if v != "" {
		return v
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not set under CI: the %s integration test must run (start it with `make test` or deploy/local/)", env, what)
	}
	t.Skipf("%s not set: skipping %s integration test (run `make test` to start the servers)", env, what)
	return ""
}

// Unavailable skips the test because something it needs (a server, root,
// a fixture) is missing: a skip on a developer machine, a failure under CI
// (CI=true), where a skipped integration test would be a silent pass.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("under CI this test must run: "+format, args...)
	}
	t.Skipf(format, args...)
}

// Tmpfs mounts a tmpfs of size (mount's syntax: "8m") in a fresh
// directory and unmounts it (lazily: a process may still hold files there)
// when the test ends. Mounting needs root: without it the test is
// Unavailable.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		Unavailable(t, "cannot mount a tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

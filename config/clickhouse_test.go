package config

import (
	"errors"
	"strings"
	"testing"
)

func TestClickHouseCluster(t *testing.T) {
	c, err := Parse([]byte(good+"clickhouse: {addr: [\"ch1:9000\", \"ch2:9000\"], database: analytics, cluster: prod}\n"), "cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ClickHouse.ReplicaPath; got != "/clickhouse/tables/{shard}/analytics/"+c.ClickHouse.Table {
		t.Errorf("default replica_path %q", got)
	}
	_, err = Parse([]byte(good+"clickhouse:\n  addr: [\"ch:9000\"]\n  cluster: \"a b\"\n  replica_path: \"/x'y\"\n"), "bad.yaml")
	var p *Problems
	if !errors.As(err, &p) || !strings.Contains(err.Error(), `cluster "a b"`) || !strings.Contains(err.Error(), "no quotes") {
		t.Errorf("want cluster and replica_path problems, got %v", err)
	}
	_, err = Parse([]byte(good+"clickhouse: {addr: [\"ch:9000\"], replica_path: /p}\n"), "nocluster.yaml")
	if err == nil || !strings.Contains(err.Error(), "replica_path is set without clickhouse.cluster") {
		t.Errorf("replica_path without cluster: %v", err)
	}
}

// ${NAME} in string values comes from the environment (credentials from a
// Secret, the instance id from the pod name); keys are never expanded,
// $${NAME} is the text itself, an unset variable is a problem on its line.
func TestEnvReferences(t *testing.T) {
	t.Setenv("CDCJOIN_TEST_POD", "cdcjoin-2")
	t.Setenv("CDCJOIN_TEST_PW", "p#ss: 'x\"")
	t.Setenv("CDCJOIN_TEST_EMPTY", "")
	c, err := Parse([]byte(good+`kafka:
  brokers: ["k:9092"]
  instance_id: ${CDCJOIN_TEST_POD}
  sasl: {mechanism: plain, username: "u-${CDCJOIN_TEST_EMPTY}", password: "${CDCJOIN_TEST_PW}"}
clickhouse: {addr: ["ch:9000"], password: "$${CDCJOIN_TEST_PW}"}
`), "env.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Kafka.InstanceID != "cdcjoin-2" || c.Kafka.SASL.Password != "p#ss: 'x\"" || c.Kafka.SASL.Username != "u-" {
		t.Errorf("expanded: instance_id %q, sasl %q/%q", c.Kafka.InstanceID, c.Kafka.SASL.Username, c.Kafka.SASL.Password)
	}
	if c.ClickHouse.Password != "${CDCJOIN_TEST_PW}" {
		t.Errorf("$${…} must stay literal, got %q", c.ClickHouse.Password)
	}
	_, err = Parse([]byte(good+"clickhouse: {addr: [\"ch:9000\"],\n  password: \"${CDCJOIN_TEST_UNSET_X}\"}\n"), "unset.yaml")
	var p *Problems
	if !errors.As(err, &p) || !strings.Contains(err.Error(), "CDCJOIN_TEST_UNSET_X is not set") || p.Items[0].Line == 0 {
		t.Errorf("unset variable: %v", err)
	}
}

package config

import (
	"os"
	"strings"
	"testing"
)

const kafkaBase = `name: j
parent: {topic: users, key: id}
child: {topic: domains, key: id, parent_key: user_id}
select: parent.id, child.id AS domain_id
state: {dir: /tmp/x}
`

func TestKafkaOptional(t *testing.T) {
	c, err := Parse([]byte(kafkaBase), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ValidateForKafka(); err == nil || !strings.Contains(err.Error(), "kafka.brokers is required") {
		t.Fatalf("ValidateForKafka = %v", err)
	}
	if c.Kafka.Compression != DefaultCompression || c.Kafka.TransactionRecords != DefaultTransactionRecords || c.Kafka.Linger != DefaultLinger {
		t.Errorf("producer defaults: %q %d %v", c.Kafka.Compression, c.Kafka.TransactionRecords, c.Kafka.Linger)
	}
	if c.Kafka.SnapshotRecords != DefaultSnapshotRecords || c.Kafka.SnapshotInterval != DefaultSnapshotInterval || c.Kafka.SnapshotTopic() != "j.tsnap" {
		t.Errorf("snapshot defaults: %d %v %s", c.Kafka.SnapshotRecords, c.Kafka.SnapshotInterval, c.Kafka.SnapshotTopic())
	}
	if c.Kafka.KeyedTopic() != "j.keyed" || c.Kafka.JoinGroup() != "j-join" || c.Kafka.KeyingGroup() != "j-keying" {
		t.Errorf("names: %s %s %s", c.Kafka.KeyedTopic(), c.Kafka.JoinGroup(), c.Kafka.KeyingGroup())
	}
}

func TestKafkaValid(t *testing.T) {
	c, err := Parse([]byte(kafkaBase+"kafka: {brokers: [127.0.0.1:9092], group: g, epoch: 3, sasl: {mechanism: scram-sha-512, username: u, password: p}}\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ValidateForKafka(); err != nil {
		t.Fatal(err)
	}
	if c.Kafka.KeyedTopic() != "g.keyed" || c.Kafka.Epoch != 3 {
		t.Errorf("got %+v", c.Kafka)
	}
}

func TestKafkaProblems(t *testing.T) {
	_, err := Parse([]byte(kafkaBase+`kafka:
  brokers: [nohost, "h:99999"]
  epoch: 70000
  keyed_partitions: -1
  sasl: {mechanism: gssapi}
  tls: {ca_file: /nonexistent}
  session_timeout: 1ms
  metrics_addr: nope
  compression: brotli
  transaction_records: -5
  linger: 2s
  snapshot_records: -2
  snapshot_interval: 1ms
`), "t.yaml")
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, want := range []string{`"nohost" is not host:port`, `port "99999"`, "kafka.epoch 70000", "keyed_partitions -1",
		`mechanism "gssapi"`, "tls.enabled is false", "session_timeout 1ms", "metrics_addr",
		`kafka.compression "brotli": use one of none, gzip, snappy, lz4, zstd`, "kafka.transaction_records -5", "kafka.linger 2s",
		"kafka.snapshot_records -2: use -1 (never) or a positive count", "kafka.snapshot_interval 1ms: must be at least 10ms"} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in:\n%s", want, msg)
		}
	}
	if !strings.Contains(msg, "line 7:") {
		t.Errorf("problems carry no lines:\n%s", msg)
	}
}

// TestDefaultInstanceID: two jobs on one host with their own state.dir get
// their own instance ids (before: both the host name, so they fenced each
// other's transactions); the same state.dir gets the same id again.
func TestDefaultInstanceID(t *testing.T) {
	parse := func(dir string) string {
		t.Helper()
		c, err := Parse([]byte(strings.Replace(kafkaBase, "/tmp/x", dir, 1)), "t.yaml")
		if err != nil {
			t.Fatal(err)
		}
		return c.Kafka.InstanceID
	}
	a, b := parse("/var/lib/cdcjoin/a"), parse("/var/lib/cdcjoin/b")
	if a == b {
		t.Errorf("two state dirs share instance id %q", a)
	}
	if again := parse("/var/lib/cdcjoin/a/"); again != a {
		t.Errorf("the same state dir got %q, then %q", a, again)
	}
	if host, _ := os.Hostname(); !strings.HasPrefix(a, host+"-") {
		t.Errorf("instance id %q does not start with the host name %q", a, host)
	}
	c, err := Parse([]byte(kafkaBase+"kafka: {instance_id: explicit}\n"), "t.yaml")
	if err != nil || c.Kafka.InstanceID != "explicit" {
		t.Errorf("explicit instance_id: %v %v", c, err)
	}
}

package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Kafka configures the Kafka runtime (`cdcjoin run`, `cdcjoin demo`). The
// section is optional in a file: Load checks the settings that are given, and
// ValidateForKafka additionally requires what the runtime needs (brokers).
// `cdcjoin replay` needs no kafka section.
type Kafka struct {
	// Brokers are the bootstrap brokers, host:port (required for run).
	Brokers []string `yaml:"brokers"`
	// ClientID is sent to the brokers (default "cdcjoin").
	ClientID string `yaml:"client_id"`
	// Group prefixes the consumer groups ("<group>-keying", "<group>-join")
	// and the internal topics ("<group>.keyed", "<group>.child-index")
	// (default: name).
	Group string `yaml:"group"`
	// InstanceID identifies this process among the instances of the job; it
	// makes the keying stage's transactional id, so it must be unique per
	// running instance and should be stable across restarts (a restarted
	// instance then fences its predecessor's open transaction at once).
	// Default: the host name and a hash of the absolute state.dir
	// ("host-1a2b3c4d"), unique per state directory on a host and stable
	// across restarts (see DefaultInstanceID).
	InstanceID string `yaml:"instance_id"`
	// KeyedPartitions is the partition count of the keyed topic when
	// cdcjoin creates it (default 0: the larger source topic's count). An
	// existing keyed topic keeps its count.
	KeyedPartitions int `yaml:"keyed_partitions"`
	// ReplicationFactor of the internal topics cdcjoin creates (default -1:
	// the broker's default).
	ReplicationFactor int `yaml:"replication_factor"`
	// Epoch is the legacy version epoch: versions of keyed records read
	// before any epoch marker are epoch<<48 | offset+1 (keyed topics written
	// by cdcjoin ≤ wave 1). Every start of run writes epoch markers, after
	// which epochs are assigned automatically (package version); there is
	// nothing to bump by hand. Default 0.
	Epoch int `yaml:"epoch"`
	// MinCompactionLag is the keyed topic's min.compaction.lag.ms when
	// cdcjoin creates it (default 24h). A join partition that moves is
	// rebuilt exactly as long as the join group's committed offsets are
	// less than this far behind the log end.
	MinCompactionLag time.Duration `yaml:"min_compaction_lag"`
	// TransactionTimeout of the keying stage's transactions (default 30s).
	TransactionTimeout time.Duration `yaml:"transaction_timeout"`
	// TransactionRecords is the most source records the keying stage keys
	// in one Kafka transaction (default 10000). Every transaction costs the
	// brokers a fixed amount of work (partitions added, offsets committed,
	// a commit marker written to every partition it touched), which
	// dominates their CPU with small transactions; a larger one takes
	// longer to become visible to the join stage (read_committed) and must
	// finish within transaction_timeout (a transaction that took more than
	// a quarter of it halves the next one, down to 100 records; fast full
	// ones grow back). A poll returns what is buffered, so at low input
	// rates transactions stay small anyway.
	TransactionRecords int `yaml:"transaction_records"`
	// Compression of the records cdcjoin produces (keyed and index
	// topics, epoch markers, dead letters): none, gzip, snappy, lz4 or zstd
	// (default lz4).
	Compression string `yaml:"compression"`
	// Linger is how long the keying stage's producer waits to fill a batch
	// (default 10ms, 1ms..1s). Batches also fill while a transaction's
	// records are produced, so it matters little under load.
	Linger time.Duration `yaml:"linger"`
	// SessionTimeout of both consumer groups (default 15s): how long a dead
	// instance keeps its partitions.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// RebalanceTimeout of both consumer groups (default 60s): how long a
	// rebalance waits for every member to rejoin (a member killed while
	// the group rebalances can hold the others up this long).
	RebalanceTimeout time.Duration `yaml:"rebalance_timeout"`
	// CommitInterval is how often the join stage commits its positions to
	// Kafka for lag monitoring (default 1s); its pebble state is the truth.
	CommitInterval time.Duration `yaml:"commit_interval"`
	// DrainTimeout bounds how long a join partition that stops (a
	// rebalance revokes it, or shutdown) may take to finish and commit its
	// batch in progress (default 10s); past it the batch is abandoned
	// uncommitted, and its next owner redoes it. Keep it well below the
	// group's rebalance timeout, during which a revoke must complete.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// SnapshotRecords: a time join's join partition writes a snapshot of
	// its operator state to the topic "<group>.tsnap" after this many
	// keyed records since its last one (default 100000; -1: never, and the
	// keyed topic is never trimmed), and then deletes the keyed records
	// below it (at most up to the group's committed offset): a partition
	// that moves is rebuilt from the snapshot and the log after it.
	SnapshotRecords int `yaml:"snapshot_records"`
	// SnapshotInterval: a time join's partition also writes a snapshot
	// at the first commit this long after its last one when it applied
	// any record since (default 5m; at least 10ms).
	SnapshotInterval time.Duration `yaml:"snapshot_interval"`
	// MetricsAddr is the host:port of the /metrics, /healthz and /readyz
	// HTTP server (default: none).
	MetricsAddr string `yaml:"metrics_addr"`
	// TLS encrypts connections to the brokers.
	TLS KafkaTLS `yaml:"tls"`
	// SASL authenticates to the brokers.
	SASL KafkaSASL `yaml:"sasl"`
}

// KafkaTLS configures TLS to the brokers.
type KafkaTLS struct {
	Enabled            bool   `yaml:"enabled"`
	CAFile             string `yaml:"ca_file"`   // PEM CA bundle; system roots when empty
	CertFile           string `yaml:"cert_file"` // client certificate (with KeyFile)
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// KafkaSASL configures SASL authentication.
type KafkaSASL struct {
	// Mechanism is plain, scram-sha-256 or scram-sha-512 (empty: no SASL).
	Mechanism string `yaml:"mechanism"`
	Username  string `yaml:"username"`
	Password  string `yaml:"password"`
}

// SASL mechanisms.
const (
	SASLPlain       = "plain"
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"
)

// Producer defaults and limits (Kafka.TransactionRecords, Compression,
// Linger).
const (
	DefaultTransactionRecords = 10000
	MaxTransactionRecords     = 1000000
	DefaultCompression        = "lz4"
	DefaultLinger             = 10 * time.Millisecond
)

// Compressions returns the accepted values of kafka.compression.
func Compressions() []string { return []string{"none", "gzip", "snappy", "lz4", "zstd"} }

// MaxEpoch is the largest legacy Kafka.Epoch (legacy versions keep 48 bits for offsets).
const MaxEpoch = 1<<16 - 1

// KeyedTopic is the internal keyed (repartition) topic.
func (k *Kafka) KeyedTopic() string { return k.Group + ".keyed" }

// ChildIndexTopic is the keying stage's compacted child-index changelog.
func (k *Kafka) ChildIndexTopic() string { return k.Group + ".child-index" }

// ParentIndexTopic is the keying stage's compacted parent-index changelog
// (parent key → last row, to complete TOAST placeholders).
func (k *Kafka) ParentIndexTopic() string { return k.Group + ".parent-index" }

// KeyingGroup is the keying stage's consumer group.
func (k *Kafka) KeyingGroup() string { return k.Group + "-keying" }

// JoinGroup is the join stage's consumer group.
func (k *Kafka) JoinGroup() string { return k.Group + "-join" }

func (k *Kafka) defaults(c *Config) {
	if k.ClientID == "" {
		k.ClientID = "cdcjoin"
	}
	if k.Group == "" {
		k.Group = c.Name
	}
	if k.InstanceID == "" {
		k.InstanceID = DefaultInstanceID(c.State.Dir)
	}
	if k.ReplicationFactor == 0 {
		k.ReplicationFactor = -1
	}
	if k.MinCompactionLag == 0 {
		k.MinCompactionLag = 24 * time.Hour
	}
	if k.TransactionTimeout == 0 {
		k.TransactionTimeout = 30 * time.Second
	}
	if k.TransactionRecords == 0 {
		k.TransactionRecords = DefaultTransactionRecords
	}
	if k.Compression == "" {
		k.Compression = DefaultCompression
	}
	if k.Linger == 0 {
		k.Linger = DefaultLinger
	}
	if k.SessionTimeout == 0 {
		k.SessionTimeout = 15 * time.Second
	}
	if k.CommitInterval == 0 {
		k.CommitInterval = time.Second
	}
	if k.RebalanceTimeout == 0 {
		k.RebalanceTimeout = time.Minute
	}
	if k.DrainTimeout == 0 {
		k.DrainTimeout = min(10*time.Second, k.RebalanceTimeout/2)
	}
	if k.SnapshotRecords == 0 {
		k.SnapshotRecords = DefaultSnapshotRecords
	}
	if k.SnapshotInterval == 0 {
		k.SnapshotInterval = DefaultSnapshotInterval
	}
}

// Time-join snapshot defaults (Kafka.SnapshotRecords, SnapshotInterval).
const (
	DefaultSnapshotRecords  = 100000
	DefaultSnapshotInterval = 5 * time.Minute
)

// SnapshotTopic is a time join's topic of operator-state snapshots, one
// partition per keyed partition.
func (k *Kafka) SnapshotTopic() string { return k.Group + ".tsnap" }

func (k *Kafka) validate(c *Config, p *Problems) {
	const s = "kafka"
	for _, b := range k.Brokers {
		host, port, err := net.SplitHostPort(b)
		if err != nil || host == "" {
			c.add(p, fmt.Sprintf("kafka.brokers: %q is not host:port", b), s, "brokers")
			continue
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			c.add(p, fmt.Sprintf("kafka.brokers: %q: port %q is not a number in 1..65535", b, port), s, "brokers")
		}
	}
	if k.Group != "" && !groupRE.MatchString(k.Group) {
		c.add(p, fmt.Sprintf("kafka.group %q: use only letters, digits, '.', '_' and '-'", k.Group), s, "group")
	}
	if strings.ContainsAny(k.InstanceID, " \t\n") {
		c.add(p, fmt.Sprintf("kafka.instance_id %q must not contain spaces", k.InstanceID), s, "instance_id")
	}
	if k.KeyedPartitions < 0 || k.KeyedPartitions > 1<<15 {
		c.add(p, fmt.Sprintf("kafka.keyed_partitions %d: use 0 (the larger source topic's count) or 1..32768", k.KeyedPartitions), s, "keyed_partitions")
	}
	if k.ReplicationFactor == 0 || k.ReplicationFactor < -1 || k.ReplicationFactor > 32767 {
		c.add(p, fmt.Sprintf("kafka.replication_factor %d: use -1 (broker default) or a positive count", k.ReplicationFactor), s, "replication_factor")
	}
	if k.TransactionRecords < 1 || k.TransactionRecords > MaxTransactionRecords {
		c.add(p, fmt.Sprintf("kafka.transaction_records %d: use 1..%d", k.TransactionRecords, MaxTransactionRecords), s, "transaction_records")
	}
	if !slices.Contains(Compressions(), k.Compression) {
		c.add(p, fmt.Sprintf("kafka.compression %q: use one of %s", k.Compression, strings.Join(Compressions(), ", ")), s, "compression")
	}
	if k.Linger < time.Millisecond || k.Linger > time.Second {
		c.add(p, fmt.Sprintf("kafka.linger %v: use 1ms..1s", k.Linger), s, "linger")
	}
	if k.SnapshotRecords < -1 {
		c.add(p, fmt.Sprintf("kafka.snapshot_records %d: use -1 (never) or a positive count", k.SnapshotRecords), s, "snapshot_records")
	}
	if k.Epoch < 0 || k.Epoch > MaxEpoch {
		c.add(p, fmt.Sprintf("kafka.epoch %d: use 0..%d", k.Epoch, MaxEpoch), s, "epoch")
	}
	for _, d := range []struct {
		key string
		v   time.Duration
		min time.Duration
	}{
		{"min_compaction_lag", k.MinCompactionLag, 0},
		{"transaction_timeout", k.TransactionTimeout, time.Second},
		{"session_timeout", k.SessionTimeout, time.Second},
		{"commit_interval", k.CommitInterval, time.Millisecond},
		{"drain_timeout", k.DrainTimeout, time.Millisecond},
		{"rebalance_timeout", k.RebalanceTimeout, time.Second},
		{"snapshot_interval", k.SnapshotInterval, 10 * time.Millisecond},
	} {
		if d.v < d.min || d.v < 0 {
			c.add(p, fmt.Sprintf("kafka.%s %v: must be at least %v", d.key, d.v, d.min), s, d.key)
		}
	}
	if k.DrainTimeout >= k.RebalanceTimeout && k.RebalanceTimeout > 0 {
		c.add(p, fmt.Sprintf("kafka.drain_timeout %v must be shorter than kafka.rebalance_timeout %v (a revoked partition drains during the rebalance)", k.DrainTimeout, k.RebalanceTimeout), s, "drain_timeout")
	}
	if k.MetricsAddr != "" {
		if _, port, err := net.SplitHostPort(k.MetricsAddr); err != nil {
			c.add(p, fmt.Sprintf("kafka.metrics_addr %q is not host:port (e.g. 127.0.0.1:9464)", k.MetricsAddr), s, "metrics_addr")
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			c.add(p, fmt.Sprintf("kafka.metrics_addr %q: port %q is not a number in 0..65535", k.MetricsAddr, port), s, "metrics_addr")
		}
	}
	t := &k.TLS
	if !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.InsecureSkipVerify) {
		c.add(p, "kafka.tls settings are given but tls.enabled is false; set enabled: true or remove them", s, "tls")
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		c.add(p, "kafka.tls.cert_file and tls.key_file go together (a client certificate needs its key)", s, "tls", "cert_file")
	}
	if t.InsecureSkipVerify && t.CAFile != "" {
		c.add(p, "kafka.tls.insecure_skip_verify disables the verification that tls.ca_file configures; use one of them", s, "tls", "insecure_skip_verify")
	}
	for _, f := range []struct{ key, path string }{{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			c.add(p, fmt.Sprintf("kafka.tls.%s: %v", f.key, err), s, "tls", f.key)
		}
	}
	a := &k.SASL
	switch a.Mechanism {
	case "":
		if a.Username != "" || a.Password != "" {
			c.add(p, "kafka.sasl.username/password are set without sasl.mechanism (plain, scram-sha-256 or scram-sha-512)", s, "sasl")
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if a.Username == "" {
			c.add(p, fmt.Sprintf("kafka.sasl.mechanism %s needs sasl.username", a.Mechanism), s, "sasl", "username")
		}
		if a.Password == "" {
			c.add(p, fmt.Sprintf("kafka.sasl.mechanism %s needs sasl.password", a.Mechanism), s, "sasl", "password")
		}
	default:
		c.add(p, fmt.Sprintf("kafka.sasl.mechanism %q: use plain, scram-sha-256 or scram-sha-512", a.Mechanism), s, "sasl", "mechanism")
	}
}

var groupRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// DefaultInstanceID is the default kafka.instance_id of a job whose state
// lives in stateDir: the host name and the first 8 hex digits of the
// SHA-256 of the absolute state directory. Two instances on one host need
// their own state directories anyway, so they get their own ids, and a
// restarted instance gets its old one back.
func DefaultInstanceID(stateDir string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "cdcjoin"
	}
	host = strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' || r == '\n' {
			return '-'
		}
		return r
	}, host)
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	sum := sha256.Sum256([]byte(filepath.Clean(stateDir)))
	return host + "-" + hex.EncodeToString(sum[:4])
}

// ValidateForKafka reports what the Kafka runtime needs beyond what Load
// checks (Load accepts files without a kafka section, for `replay`). The
// error is a *Problems.
func (c *Config) ValidateForKafka() error {
	p := &Problems{File: "config"}
	if len(c.Kafka.Brokers) == 0 {
		c.add(p, "kafka.brokers is required to run on Kafka (e.g. brokers: [127.0.0.1:9092])", "kafka", "brokers")
	}
	if c.Kafka.Group == "" {
		c.add(p, "kafka.group is empty (set name or kafka.group)", "kafka", "group")
	}
	if len(p.Items) > 0 {
		return p
	}
	return nil
}

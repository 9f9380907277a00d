package config

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ClickHouse configures the ClickHouse sink. Nil when the file has no
// clickhouse section. Defaults are filled in by Load; see each field.
type ClickHouse struct {
	// Addr lists host:port addresses of ClickHouse's native protocol
	// (required).
	Addr []string `yaml:"addr"`
	// Database holds the table (default "default").
	Database string `yaml:"database"`
	// Table is the output table (default: the job name with every character
	// other than letters, digits and '_' replaced by '_').
	Table string `yaml:"table"`
	// Mode is "upsert" (default; ReplacingMergeTree + a <table>_current view)
	// or "changelog" (VersionedCollapsingMergeTree with _sign); a time
	// join's is "insert" (its default and only mode: a MergeTree of the
	// emitted rows).
	Mode string `yaml:"mode"`
	// Username and Password authenticate (default user "default", no
	// password).
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// TLS configures an encrypted connection.
	TLS ClickHouseTLS `yaml:"tls"`
	// Batch bounds each INSERT.
	Batch ClickHouseBatch `yaml:"batch"`
	// CreateTable creates the table (and view) when absent (default true).
	// An existing table is checked either way.
	CreateTable *bool `yaml:"create_table"`
	// Columns overrides the ClickHouse type of output columns, by select
	// output name, e.g. {amount: "Decimal(18, 2)"}.
	Columns map[string]string `yaml:"columns"`
	// MaxInFlight is how many INSERTs may run at once (default 2). Write
	// blocks while that many batches are in flight and another is full.
	MaxInFlight int `yaml:"max_in_flight"`
	// Retry bounds retries of a failed INSERT.
	Retry ClickHouseRetry `yaml:"retry"`
	// Cluster, when set, names the ClickHouse cluster (remote_servers) the
	// output lives on: the DDL runs ON CLUSTER and the table is Replicated*
	// (one shard, a replica per server; a sharded table is not supported:
	// every version of a row must reach the same replicas).
	Cluster string `yaml:"cluster"`
	// ReplicaPath is the Keeper path of a Replicated* table (default
	// "/clickhouse/tables/{shard}/<database>/<table>"; {shard} and {replica}
	// are the servers' macros). Only with Cluster.
	ReplicaPath string `yaml:"replica_path"`
}

// ClickHouseTLS configures TLS to ClickHouse.
type ClickHouseTLS struct {
	Enabled            bool   `yaml:"enabled"`
	CAFile             string `yaml:"ca_file"`   // PEM CA bundle; system roots when empty
	CertFile           string `yaml:"cert_file"` // client certificate (with KeyFile)
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// ClickHouseBatch bounds a batch: it is sent when it holds Rows rows or
// about Bytes bytes, or Interval after its first row, whichever comes first.
type ClickHouseBatch struct {
	Rows     int             `yaml:"rows"`     // default 50000
	Bytes    ClickHouseBytes `yaml:"bytes"`    // default 16MiB
	Interval time.Duration   `yaml:"interval"` // default 200ms
}

// ClickHouseRetry is the exponential backoff (with jitter) for retryable
// INSERT failures: delays start at Initial and double up to Max; after
// MaxElapsed of failing the sink gives up with a fatal error.
type ClickHouseRetry struct {
	MaxElapsed time.Duration `yaml:"max_elapsed"` // default 5m
	Initial    time.Duration `yaml:"initial"`     // default 100ms
	Max        time.Duration `yaml:"max"`         // default 10s
}

// ClickHouseBytes is a byte count; in YAML an integer or a string with a
// unit: "16MiB", "512KiB", "1GiB", "64MB", "1000B".
type ClickHouseBytes int64

// byteUnit returns the multiplier of a (lower-case) byte unit.
func byteUnit(u string) (int64, bool) {
	switch u {
	case "", "b":
		return 1, true
	case "kb":
		return 1000, true
	case "mb":
		return 1000 * 1000, true
	case "gb":
		return 1000 * 1000 * 1000, true
	case "k", "kib":
		return 1 << 10, true
	case "m", "mib":
		return 1 << 20, true
	case "g", "gib":
		return 1 << 30, true
	}
	return 0, false
}

var byteRE = regexp.MustCompile(`^\s*([0-9]+)\s*([A-Za-z]*)\s*$`)

// UnmarshalYAML accepts an integer or a number with a unit. A bad value is
// reported as a *yaml.TypeError so that decoding goes on and every problem is
// reported at once.
func (b *ClickHouseBytes) UnmarshalYAML(n *yaml.Node) error {
	bad := func(format string, args ...any) error {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: ", n.Line) + fmt.Sprintf(format, args...)}}
	}
	if n.Kind != yaml.ScalarNode {
		return bad("expected a byte size like 16MiB")
	}
	m := byteRE.FindStringSubmatch(n.Value)
	if m == nil {
		return bad("%q is not a byte size (e.g. 16MiB, 512KiB, 1000000)", n.Value)
	}
	unit, ok := byteUnit(strings.ToLower(m[2]))
	if !ok {
		return bad("%q: unknown unit %q (use B, KB, MB, GB, KiB, MiB, GiB)", n.Value, m[2])
	}
	v, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || v > (1<<62)/unit {
		return bad("%q is too large", n.Value)
	}
	*b = ClickHouseBytes(v * unit)
	return nil
}

// ClickHouse output modes.
const (
	ModeUpsert    = "upsert"
	ModeChangelog = "changelog"
)

// CreateTableEnabled reports whether the sink may create the table.
func (ch *ClickHouse) CreateTableEnabled() bool { return ch.CreateTable == nil || *ch.CreateTable }

var nonIdent = regexp.MustCompile(`[^A-Za-z0-9_]`)

func (ch *ClickHouse) defaults(c *Config) {
	if ch.Database == "" {
		ch.Database = "default"
	}
	if ch.Table == "" && c.Name != "" {
		ch.Table = nonIdent.ReplaceAllString(c.Name, "_")
		if ch.Table[0] >= '0' && ch.Table[0] <= '9' {
			ch.Table = "_" + ch.Table
		}
	}
	if ch.Mode == "" {
		ch.Mode = ModeUpsert
		if c.timeJob() {
			ch.Mode = ModeInsert
		}
	}
	if ch.Username == "" {
		ch.Username = "default"
	}
	if ch.Batch.Rows == 0 {
		ch.Batch.Rows = 50000
	}
	if ch.Batch.Bytes == 0 {
		ch.Batch.Bytes = 16 << 20
	}
	if ch.Batch.Interval == 0 {
		ch.Batch.Interval = 200 * time.Millisecond
	}
	if ch.CreateTable == nil {
		t := true
		ch.CreateTable = &t
	}
	if ch.MaxInFlight == 0 {
		ch.MaxInFlight = 2
	}
	if ch.Retry.MaxElapsed == 0 {
		ch.Retry.MaxElapsed = 5 * time.Minute
	}
	if ch.Retry.Initial == 0 {
		ch.Retry.Initial = 100 * time.Millisecond
	}
	if ch.Retry.Max == 0 {
		ch.Retry.Max = 10 * time.Second
	}
	if ch.Cluster != "" && ch.ReplicaPath == "" {
		ch.ReplicaPath = "/clickhouse/tables/{shard}/" + ch.Database + "/" + ch.Table
	}
}

// clusterRE is what a cluster name in remote_servers may look like here.
var clusterRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

var chIdentRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// chTypeRE accepts a ClickHouse type expression's shape: a name with an
// optional parenthesized argument list; the sink checks that it can write it.
var chTypeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*(\s*\(.*\))?$`)

func (ch *ClickHouse) validate(c *Config, p *Problems) {
	const s = "clickhouse"
	if len(ch.Addr) == 0 {
		c.add(p, "clickhouse.addr is required (host:port of the native protocol, e.g. 127.0.0.1:9000)", s, "addr")
	}
	for _, a := range ch.Addr {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" {
			c.add(p, fmt.Sprintf("clickhouse.addr: %q is not host:port", a), s, "addr")
			continue
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			c.add(p, fmt.Sprintf("clickhouse.addr: %q: port %q is not a number in 1..65535", a, port), s, "addr")
		}
	}
	if !chIdentRE.MatchString(ch.Database) {
		c.add(p, fmt.Sprintf("clickhouse.database %q: use letters, digits and '_' (not starting with a digit)", ch.Database), s, "database")
	}
	if ch.Table == "" {
		c.add(p, "clickhouse.table is required (or set name, from which it defaults)", s, "table")
	} else if !chIdentRE.MatchString(ch.Table) {
		c.add(p, fmt.Sprintf("clickhouse.table %q: use letters, digits and '_' (not starting with a digit)", ch.Table), s, "table")
	}
	switch ch.Mode {
	case ModeUpsert, ModeChangelog:
	case ModeInsert:
		if !c.timeJob() {
			c.add(p, "clickhouse.mode insert is for time joins (time_join); use upsert or changelog", s, "mode")
		}
	default:
		if !c.timeJob() {
			c.add(p, fmt.Sprintf("clickhouse.mode %q: use upsert or changelog", ch.Mode), s, "mode")
		}
	}
	if ch.Password != "" && ch.Username == "" {
		c.add(p, "clickhouse.password is set without clickhouse.username", s, "password")
	}
	t := &ch.TLS
	if !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.InsecureSkipVerify) {
		c.add(p, "clickhouse.tls settings are given but tls.enabled is false; set enabled: true or remove them", s, "tls")
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		c.add(p, "clickhouse.tls.cert_file and tls.key_file go together (a client certificate needs its key)", s, "tls", "cert_file")
	}
	if t.InsecureSkipVerify && t.CAFile != "" {
		c.add(p, "clickhouse.tls.insecure_skip_verify disables the verification that tls.ca_file configures; use one of them", s, "tls", "insecure_skip_verify")
	}
	for _, f := range []struct{ key, path string }{{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			c.add(p, fmt.Sprintf("clickhouse.tls.%s: %v", f.key, err), s, "tls", f.key)
		}
	}
	if ch.Batch.Rows < 0 {
		c.add(p, "clickhouse.batch.rows must be positive", s, "batch", "rows")
	}
	if ch.Batch.Bytes < 0 {
		c.add(p, "clickhouse.batch.bytes must be positive", s, "batch", "bytes")
	}
	if ch.Batch.Interval < 0 {
		c.add(p, "clickhouse.batch.interval must be positive", s, "batch", "interval")
	} else if ch.Batch.Interval > 0 && ch.Batch.Interval < time.Millisecond {
		c.add(p, fmt.Sprintf("clickhouse.batch.interval %v is below 1ms", ch.Batch.Interval), s, "batch", "interval")
	}
	if ch.MaxInFlight < 0 || ch.MaxInFlight > 64 {
		c.add(p, fmt.Sprintf("clickhouse.max_in_flight %d: use 1..64", ch.MaxInFlight), s, "max_in_flight")
	}
	r := ch.Retry
	if r.Initial < 0 {
		c.add(p, "clickhouse.retry.initial must be positive", s, "retry", "initial")
	}
	if r.Max < 0 {
		c.add(p, "clickhouse.retry.max must be positive", s, "retry", "max")
	} else if r.Initial > 0 && r.Max > 0 && r.Max < r.Initial {
		c.add(p, fmt.Sprintf("clickhouse.retry.max (%v) is below retry.initial (%v)", r.Max, r.Initial), s, "retry", "max")
	}
	if r.MaxElapsed < 0 {
		c.add(p, "clickhouse.retry.max_elapsed must be positive", s, "retry", "max_elapsed")
	}
	if ch.Cluster != "" && !clusterRE.MatchString(ch.Cluster) {
		c.add(p, fmt.Sprintf("clickhouse.cluster %q: use letters, digits, '_', '-' and '.'", ch.Cluster), s, "cluster")
	}
	if ch.Cluster == "" && ch.ReplicaPath != "" {
		c.add(p, "clickhouse.replica_path is set without clickhouse.cluster (a replicated table lives on a cluster)", s, "replica_path")
	}
	if strings.ContainsAny(ch.ReplicaPath, "'\\") {
		c.add(p, fmt.Sprintf("clickhouse.replica_path %q: no quotes or backslashes", ch.ReplicaPath), s, "replica_path")
	}
	names := set(c.OutputNames())
	for _, k := range sortedKeys(ch.Columns) {
		if !names[k] {
			c.add(p, fmt.Sprintf("clickhouse.columns: %q is not a select output name (have %s)", k, strings.Join(c.OutputNames(), ", ")), s, "columns", k)
		}
		if typ := strings.TrimSpace(ch.Columns[k]); !chTypeRE.MatchString(typ) {
			c.add(p, fmt.Sprintf("clickhouse.columns.%s: %q is not a ClickHouse type (e.g. Int64, Nullable(String), Decimal(18, 2))", k, ch.Columns[k]), s, "columns", k)
		}
	}
}

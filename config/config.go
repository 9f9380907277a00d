// Package config loads and validates a cdcjoin job description (YAML).
//
// Load reports every problem at once, each with the line it is on, so that a
// user fixes a file in one round trip. Sections owned by later stages (kafka,
// clickhouse) live in their own files of this package and plug into the same
// validation.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/cdcjoin/cdcjoin/plan"
	"github.com/cdcjoin/cdcjoin/row"
)

// JoinKind is INNER or LEFT (parent rows without children are kept, padded
// with NULLs).
type JoinKind string

// Join kinds.
const (
	Inner JoinKind = "inner"
	Left  JoinKind = "left"
)

// Columns is a list of column names; in YAML either a scalar "id" (or
// "a, b") or a sequence [a, b].
type Columns []string

// UnmarshalYAML accepts a scalar (comma-separated) or a sequence.
func (c *Columns) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*c = splitList(n.Value)
		return nil
	case yaml.SequenceNode:
		var s []string
		if err := n.Decode(&s); err != nil {
			return err
		}
		*c = s
		return nil
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: expected a column name or a list of column names", n.Line)}}
}

// Table is one source table: its Debezium topic and primary key columns.
type Table struct {
	Topic string  `yaml:"topic"`
	Key   Columns `yaml:"key"`
	// ParentKey (child only) is the foreign key column(s) referencing the
	// parent's key, in the same order.
	ParentKey Columns `yaml:"parent_key"`
	// Types declares column types by column name, as PostgreSQL types
	// ("bigint", "numeric(12,2)", "timestamptz", "text[]", "enum", with an
	// optional "not null"). Records without a schema are decoded by them
	// (read with the settings of the debezium section), records with one
	// must agree with them, and the ClickHouse table is typed by them.
	Types map[string]string `yaml:"types"`
	// Format is the record format of this table's topic (json, avro,
	// protobuf), overriding the job's Config.Format. In a time join written
	// as SQL (Time set) it is the time-join side's format instead: debezium
	// (the default) or json (plain JSON events), as TimeSide.Format.
	Format string `yaml:"format"`
	// Time is the event-time column of a table of a time join written as
	// SQL (see timesql.go); declaring it makes the job a time join.
	// Types declares its type as TimeSide.Types does.
	Time string `yaml:"time"`
}

// SelectItem is one output column: Side.Column AS Name.
type SelectItem struct {
	Side   row.Side
	Column string
	Name   string
	// Table is the prefix as written, lower-cased: parent or child, or in
	// a time join left (Side row.Parent), right (row.Child) or window
	// (Side 0, Column start or end).
	Table string
}

// Select is the output column list; in YAML a comma-separated string
// ("parent.id AS user_id, child.domain_name") or a sequence of such items.
type Select []SelectItem

// UnmarshalYAML parses the select list; syntax errors carry the line.
func (s *Select) UnmarshalYAML(n *yaml.Node) error {
	var items []string
	switch n.Kind {
	case yaml.ScalarNode:
		items = splitList(n.Value)
	case yaml.SequenceNode:
		if err := n.Decode(&items); err != nil {
			return err
		}
	default:
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: select: expected \"parent.col [AS name], child.col …\"", n.Line)}}
	}
	var errs []string
	for _, it := range items {
		m := selectRE.FindStringSubmatch(strings.TrimSpace(it))
		if m == nil {
			errs = append(errs, fmt.Sprintf("line %d: select: %q is not parent.<column> or child.<column> (left.<column>, right.<column>, window.start or window.end in a time join), with an optional AS <name>", n.Line, it))
			continue
		}
		si := SelectItem{Column: m[2], Name: m[2], Table: strings.ToLower(m[1])}
		switch si.Table {
		case "parent", "left":
			si.Side = row.Parent
		case "child", "right":
			si.Side = row.Child
		default: // window.start, window.end
			si.Name = "window_" + m[2]
		}
		if m[3] != "" {
			si.Name = m[3]
		}
		*s = append(*s, si)
	}
	if len(errs) > 0 {
		// A *yaml.TypeError lets the decoder go on and report other problems.
		return &yaml.TypeError{Errors: errs}
	}
	return nil
}

var selectRE = regexp.MustCompile(`^(?i:(parent|child|left|right|window))\.([A-Za-z_][A-Za-z0-9_$]*)(?:\s+(?i:as)\s+([A-Za-z_][A-Za-z0-9_]*))?$`)

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]*$`)

// State configures the local pebble state.
type State struct {
	// Dir is the pebble directory (required).
	Dir string `yaml:"dir"`
	// CacheMB is pebble's block cache size in MiB, per state store. Unset
	// (0): 64 per store of `run` (one per owned keyed partition, and
	// their number changes with assignments); the in-process engine
	// (`replay`, the bench) has one store and sizes its cache from the
	// memory instead (engine.AutoCacheBytes: a sixteenth, 64 MiB to 4 GiB).
	CacheMB int `yaml:"cache_mb"`
	// RowCacheMB bounds the in-memory cache of state entries in front of
	// pebble's point lookups, per state store (default 64; -1 disables).
	RowCacheMB int `yaml:"row_cache_mb"`
	// MemTableMB is pebble's memtable size in MiB (default 8: a memtable
	// lookup and insert walk a skiplist whose depth grows with its size).
	MemTableMB int `yaml:"memtable_mb"`
	// BatchEvents is how many input events are applied per pebble batch
	// (default 1000). Larger batches amortize the commit; smaller ones bound
	// the work redone after a crash.
	BatchEvents int `yaml:"batch_events"`
	// BulkLoadMB is the memory, in MiB, of a bulk load's sort buffers
	// (default 256; -1 turns bulk loading off). A new state loads its
	// initial snapshot (op=r records before streaming starts), and a keyed
	// partition is rebuilt from the keyed topic, by sorting instead of row
	// by row: records are sorted in buffers of this size, spilled to disk
	// in sorted runs (under state.dir), merged, and written as sorted
	// tables. A load holds at most this much plus 256 KiB per spilled run
	// while merging, and needs about twice the input's projected size in
	// free disk for its runs.
	BulkLoadMB int `yaml:"bulk_load_mb"`
	// Sync makes every batch commit fsync pebble's WAL (default false).
	// Without it a crash (kill -9 included: pebble writes its WAL from a
	// buffer) or power loss may drop the newest batches; state and
	// positions still roll back together, and reprocessing from the older
	// positions emits the same changes with the same versions, which the
	// sinks absorb (upsert by version, changelog by delivery markers). Turn
	// it on to bound that replay, at the cost of an fsync per batch.
	// The single-process engine (replay, bench) fsyncs behind its commits:
	// a commit is durable before the next one completes, so at most the
	// newest batch may be lost, and processing goes on during the fsync.
	Sync bool `yaml:"sync"`
	// Parallelism is how many goroutines decode input records ahead of
	// the one that keys and joins them, in `replay` (default: the number
	// of cores, runtime.NumCPU; at least 1). Records are still applied in
	// input order on one goroutine, so the output, its versions and the
	// state are the same whatever the parallelism (ARCHITECTURE.md,
	// "Parallelism").
	Parallelism int `yaml:"parallelism"`
}

// Errors is the bad-record policy.
type Errors struct {
	// Policy is "stop" (default: halt, naming topic/partition/offset) or "dlq"
	// (write the record to DLQTopic with provenance headers and go on).
	Policy string `yaml:"policy"`
	// DLQTopic is the dead-letter topic (required with policy dlq).
	DLQTopic string `yaml:"dlq_topic"`
	// MaxRecordBytes rejects larger records as oversized (default 10 MiB).
	MaxRecordBytes int `yaml:"max_record_bytes"`
}

// Error policies.
const (
	PolicyStop = "stop"
	PolicyDLQ  = "dlq"
)

// Config is one join job.
type Config struct {
	Name       string      `yaml:"name"`
	Parent     Table       `yaml:"parent"`
	Child      Table       `yaml:"child"`
	Join       JoinKind    `yaml:"join"`
	Select     Select      `yaml:"select"`
	State      State       `yaml:"state"`
	Errors     Errors      `yaml:"errors"`
	Debezium   Debezium    `yaml:"debezium"`
	Kafka      Kafka       `yaml:"kafka"`
	ClickHouse *ClickHouse `yaml:"clickhouse"`
	Skew       Skew        `yaml:"skew"`
	// TimeJoin, when set, makes the job a time-bounded join of event
	// streams instead of the parent/child join (timejoin.go).
	TimeJoin *TimeJoin `yaml:"time_join"`
	// Tables and Query: the job written as SQL (see sql.go), instead of
	// Parent, Child, Join and Select.
	Tables map[string]Table `yaml:"tables"`
	Query  string           `yaml:"query"`
	// Watermark holds the watermark settings of a time join written as
	// SQL (timesql.go).
	Watermark *Watermark `yaml:"watermark"`
	// Format is the record format of both topics' keys and values: json
	// (Kafka Connect's JsonConverter, the default), avro or protobuf
	// (a converter writing through SchemaRegistry). A side's own format
	// overrides it.
	Format string `yaml:"format"`
	// SchemaRegistry is where avro and protobuf records name their
	// schemas (required with those formats).
	SchemaRegistry *SchemaRegistry `yaml:"schema_registry"`

	root     *yaml.Node
	compiled *plan.Plan // a SQL job's compiled query
	plan     *plan.Plan // … when it does not run as parent/child
}

// Problems is every problem found in a configuration, each with its line.
type Problems struct {
	File  string
	Items []Problem
}

// Problem is one configuration problem.
type Problem struct {
	Line int // 0 when not tied to a line
	Msg  string
}

func (p *Problems) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cdcjoin: %s: %d configuration problem(s):", p.File, len(p.Items))
	for _, it := range p.Items {
		if it.Line > 0 {
			fmt.Fprintf(&b, "\n  line %d: %s", it.Line, it.Msg)
		} else {
			fmt.Fprintf(&b, "\n  %s", it.Msg)
		}
	}
	return b.String()
}

// add records a problem at the line of the YAML path (e.g. "parent", "topic"),
// falling back to the nearest existing ancestor's line.
func (c *Config) add(p *Problems, msg string, path ...string) {
	p.Items = append(p.Items, Problem{Line: c.line(path...), Msg: msg})
}

// line returns the line of the value at path, or of its deepest existing
// ancestor, or 0.
func (c *Config) line(path ...string) int {
	n := c.root
	if n == nil {
		return 0
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := 0
	for _, k := range path {
		if n.Kind != yaml.MappingNode {
			break
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				line = n.Content[i].Line
				next = n.Content[i+1]
				break
			}
		}
		if next == nil {
			break
		}
		n = next
	}
	return line
}

// Load reads and validates the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: read config: %w", err)
	}
	return Parse(data, path)
}

var lineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// Parse parses and validates a configuration; name is used in messages.
// ${NAME} in a string value is the environment variable NAME (see
// expandEnv).
// The error, if any, is a *Problems listing every problem found.
func Parse(data []byte, name string) (*Config, error) {
	c := &Config{}
	probs := &Problems{File: name}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		probs.Items = append(probs.Items, yamlProblems(err)...)
		return nil, probs
	}
	c.root = &root
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		probs.Items = append(probs.Items, yamlProblems(err)...)
	} else if expandEnv(&root, os.LookupEnv, probs) {
		// The fields were checked above; decode again with ${NAME} expanded.
		c = &Config{}
		if err := root.Decode(c); err != nil {
			probs.Items = append(probs.Items, yamlProblems(err)...)
		}
	}
	c.root = &root
	c.EnsureDefaults()
	c.validate(probs)
	if len(probs.Items) > 0 {
		sort.SliceStable(probs.Items, func(i, j int) bool { return probs.Items[i].Line < probs.Items[j].Line })
		return nil, probs
	}
	return c, nil
}

func yamlProblems(err error) []Problem {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		for _, e := range te.Errors {
			msgs = append(msgs, strings.Split(e, "\n")...)
		}
	} else {
		msgs = strings.Split(err.Error(), "\n")
	}
	var out []Problem
	for _, m := range msgs {
		if mm := lineRE.FindStringSubmatch(strings.TrimSpace(m)); mm != nil {
			var l int
			fmt.Sscanf(mm[1], "%d", &l)
			out = append(out, Problem{Line: l, Msg: mm[2]})
		} else if strings.TrimSpace(m) != "" {
			out = append(out, Problem{Msg: strings.TrimSpace(m)})
		}
	}
	return out
}

// EnsureDefaults fills in the documented defaults of unset settings. Parse
// and Load call it; a Config built in code calls it (then Validate) before
// use.
func (c *Config) EnsureDefaults() {
	if c.Join == "" {
		c.Join = Inner
	}
	if c.State.RowCacheMB == 0 {
		c.State.RowCacheMB = 64
	}
	if c.State.BatchEvents == 0 {
		c.State.BatchEvents = 1000
	}
	if c.State.BulkLoadMB == 0 {
		c.State.BulkLoadMB = 256
	}
	if c.State.Parallelism == 0 {
		c.State.Parallelism = runtime.NumCPU()
	}
	if c.Errors.Policy == "" {
		c.Errors.Policy = PolicyStop
	}
	if c.Errors.MaxRecordBytes == 0 {
		c.Errors.MaxRecordBytes = 10 << 20
	}
	if c.TimeJoin != nil {
		c.TimeJoin.defaults(c)
	}
	c.Kafka.defaults(c)
	if c.ClickHouse != nil {
		c.ClickHouse.defaults(c)
	}
	c.Skew.defaults()
}

// Validate reports every problem of a Config built in code (a *Problems),
// as Parse does for a file.
func (c *Config) Validate() error {
	p := &Problems{File: "config"}
	c.validate(p)
	if len(p.Items) > 0 {
		return p
	}
	return nil
}

func (c *Config) validate(p *Problems) {
	if c.Name == "" {
		c.add(p, "name is required (it names the state, internal topics and consumer group)", "name")
	} else if !regexp.MustCompile(`^[A-Za-z0-9._-]+$`).MatchString(c.Name) {
		c.add(p, fmt.Sprintf("name %q: use only letters, digits, '.', '_' and '-'", c.Name), "name")
	}
	switch {
	case c.TimeJoin != nil:
		if c.SQL() {
			c.add(p, "time_join and tables/query are two forms of a job: use one of them (a time join's select names left.<column> and right.<column>)", "time_join")
		}
		if c.Watermark != nil {
			c.add(p, "watermark is for the SQL form of a time join; with time_join, set out_of_orderness, idle_timeout and allowed_lateness in time_join", "watermark")
		}
		c.validateTimeJoin(p)
		c.validateSelect(p)
		c.validateTypes(p)
	case c.SQL():
		c.validateSQL(p)
	case c.Watermark != nil:
		c.add(p, "watermark is a setting of time joins written as SQL (tables with time + query); the parent/child form has no event time", "watermark")
		c.validateParentChild(p)
	default:
		c.validateParentChild(p)
	}
	c.validateCommon(p)
}

func (c *Config) validateParentChild(p *Problems) {
	c.validateTable(p, "parent", &c.Parent, false)
	c.validateTable(p, "child", &c.Child, true)
	if c.Parent.Topic != "" && c.Parent.Topic == c.Child.Topic {
		c.add(p, "parent.topic and child.topic are the same topic; a self-join is not supported", "child", "topic")
	}
	if len(c.Child.ParentKey) > 0 && len(c.Parent.Key) > 0 && len(c.Child.ParentKey) != len(c.Parent.Key) {
		c.add(p, fmt.Sprintf("child.parent_key has %d column(s) but parent.key has %d; they must match one to one", len(c.Child.ParentKey), len(c.Parent.Key)), "child", "parent_key")
	}
	switch c.Join {
	case Inner, Left:
	default:
		c.add(p, fmt.Sprintf("join %q: use inner or left", c.Join), "join")
	}
	for _, s := range c.Select {
		if s.Table != "parent" && s.Table != "child" {
			c.add(p, fmt.Sprintf("select: %s.%s: left., right. and window. are for time_join jobs; use parent.<column> or child.<column>", s.Table, s.Column), "select")
		}
	}
	c.validateSelect(p)
	c.validateTypes(p)
}

// validateSelect checks the select list's output names.
func (c *Config) validateSelect(p *Problems) {
	if len(c.Select) == 0 {
		c.add(p, "select is required, e.g. \"parent.id AS user_id, child.domain_name\"", "select")
	}
	seen := map[string]bool{}
	for _, s := range c.Select {
		low := strings.ToLower(s.Name)
		if seen[low] {
			c.add(p, fmt.Sprintf("select: output name %q appears twice; rename one with AS", s.Name), "select")
		}
		if strings.HasPrefix(s.Name, "_") {
			c.add(p, fmt.Sprintf("select: output name %q: names starting with '_' are reserved for cdcjoin's columns", s.Name), "select")
		}
		seen[low] = true
	}
}

func (c *Config) validateCommon(p *Problems) {
	c.validateDebezium(p)
	if c.State.Dir == "" {
		c.add(p, "state.dir is required (a local directory for the join state)", "state", "dir")
	}
	if c.State.RowCacheMB < -1 {
		c.add(p, "state.row_cache_mb must be positive, or -1 to disable the cache", "state", "row_cache_mb")
	}
	if c.State.MemTableMB < 0 {
		c.add(p, "state.memtable_mb must be positive", "state", "memtable_mb")
	}
	if c.State.CacheMB < 0 {
		c.add(p, "state.cache_mb must be positive", "state", "cache_mb")
	}
	if c.State.BatchEvents < 0 {
		c.add(p, "state.batch_events must be positive", "state", "batch_events")
	}
	if c.State.Parallelism < 0 {
		c.add(p, "state.parallelism must be at least 1 (0 or unset: the number of cores)", "state", "parallelism")
	}
	if c.State.BulkLoadMB < -1 {
		c.add(p, "state.bulk_load_mb must be positive, or -1 to turn bulk loading off", "state", "bulk_load_mb")
	}
	switch c.Errors.Policy {
	case PolicyStop:
		if c.Errors.DLQTopic != "" {
			c.add(p, "errors.dlq_topic is set but errors.policy is stop; set policy: dlq to use it", "errors", "dlq_topic")
		}
	case PolicyDLQ:
		if c.Errors.DLQTopic == "" {
			c.add(p, "errors.policy dlq needs errors.dlq_topic", "errors", "policy")
		}
	default:
		c.add(p, fmt.Sprintf("errors.policy %q: use stop or dlq", c.Errors.Policy), "errors", "policy")
	}
	if c.Errors.MaxRecordBytes < 0 {
		c.add(p, "errors.max_record_bytes must be positive", "errors", "max_record_bytes")
	}
	c.validateFormat(p)
	c.Kafka.validate(c, p)
	if c.ClickHouse != nil {
		c.ClickHouse.validate(c, p)
	}
	c.Skew.validate(c, p)
}

func (c *Config) validateTable(p *Problems, side string, t *Table, child bool) {
	if t.Topic == "" {
		c.add(p, side+".topic is required (the Debezium topic of the "+side+" table)", side, "topic")
	}
	if len(t.Key) == 0 {
		c.add(p, side+".key is required (the primary key column(s))", side, "key")
	}
	for _, k := range t.Key {
		if !identRE.MatchString(k) {
			c.add(p, fmt.Sprintf("%s.key: %q is not a column name", side, k), side, "key")
		}
	}
	if t.Time != "" {
		c.add(p, fmt.Sprintf("%s.time: a regular join has no event time (a time join is time_join, or tables with time + query)", side), side, "time")
	}
	if child {
		if len(t.ParentKey) == 0 {
			c.add(p, "child.parent_key is required (the child's column(s) referencing parent.key)", side, "parent_key")
		}
		for _, k := range t.ParentKey {
			if !identRE.MatchString(k) {
				c.add(p, fmt.Sprintf("child.parent_key: %q is not a column name", k), side, "parent_key")
			}
		}
	} else if len(t.ParentKey) > 0 {
		c.add(p, "parent.parent_key is not a parent setting (it belongs under child)", side, "parent_key")
	}
}

// Line returns the line of the YAML value at path (or of its deepest existing
// ancestor), 0 if unknown. Sections in other files use it for messages.
func (c *Config) Line(path ...string) int { return c.line(path...) }

// OutputNames are the select-list output column names, in order.
func (c *Config) OutputNames() []string {
	if c.plan != nil {
		return c.plan.Names()
	}
	out := make([]string, len(c.Select))
	for i, s := range c.Select {
		out[i] = s.Name
	}
	return out
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// WithClickHouse returns a copy of c whose clickhouse section targets addrs
// (comma-separated host:port list), creating a section with defaults when c
// has none, and validates the result.
func (c *Config) WithClickHouse(addrs string) (*Config, error) {
	out := *c
	ch := ClickHouse{}
	if c.ClickHouse != nil {
		ch = *c.ClickHouse
	}
	ch.Addr = splitList(addrs)
	out.ClickHouse = &ch
	out.ClickHouse.defaults(&out)
	p := &Problems{File: "--clickhouse"}
	out.ClickHouse.validate(&out, p)
	if len(p.Items) > 0 {
		return nil, p
	}
	return &out, nil
}

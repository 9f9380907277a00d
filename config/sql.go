package config

import (
	"fmt"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/cdcjoin/cdcjoin/pgschema"
	"github.com/cdcjoin/cdcjoin/plan"
	"github.com/cdcjoin/cdcjoin/query"
	"github.com/cdcjoin/cdcjoin/row"
)

// The job written as SQL: `tables` (every table the query names, with its
// Debezium topic, primary key and declared types) and `query` (PostgreSQL's
// dialect, see package query). A two-table query of today's parent/child
// shape (FROM parent [LEFT] JOIN child ON child.fk = parent.key, nothing
// else) is run exactly as that form: Parse fills Parent, Child, Join and
// Select from it. Any other query compiles to a multi-stage plan (Plan).

// SQL reports whether the job is written as tables + query.
func (c *Config) SQL() bool { return c.Query != "" || len(c.Tables) > 0 }

// Plan returns the compiled plan of a SQL job that is not of the
// parent/child shape; nil otherwise (the job runs as parent/child).
func (c *Config) Plan() *plan.Plan { return c.plan }

// Compiled returns the compiled query of a SQL job, also when it runs as
// parent/child (for explain); nil for the parent/child form.
func (c *Config) Compiled() *plan.Plan { return c.compiled }

// TableNames returns the names of `tables`, sorted.
func (c *Config) TableNames() []string {
	names := make([]string, 0, len(c.Tables))
	for n := range c.Tables {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TableTypes returns the declared types of table name's columns cols, in
// that order (zero entries where nothing is declared; key columns never
// Optional); nil when the table declares nothing.
func (c *Config) TableTypes(name string, cols []string) []row.ColumnType {
	t, ok := c.Tables[name]
	if !ok {
		return nil
	}
	return c.declaredTypes(&t, cols, nil)
}

// valueNode returns the YAML value node at path, or nil.
func (c *Config) valueNode(path ...string) *yaml.Node {
	n := c.root
	if n == nil {
		return nil
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, k := range path {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// queryLine is the YAML line of line l of the query text.
func (c *Config) queryLine(l int) int {
	n := c.valueNode("query")
	if n == nil {
		return c.line("query")
	}
	if n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return n.Line + l
	}
	return n.Line + l - 1
}

// queryProblems adds errs of the query (parser, planner) to p, each at
// its line in the config file (the query key's line when it has none).
func (c *Config) queryProblems(p *Problems, errs []*query.Error) {
	for _, e := range errs {
		line := c.line("query")
		if e.Pos.Line > 0 {
			line = c.queryLine(e.Pos.Line)
		}
		p.Items = append(p.Items, Problem{Line: line, Msg: "query: " + e.Error()})
	}
}

func (c *Config) validateSQL(p *Problems) {
	if c.Parent.Topic != "" || len(c.Parent.Key) > 0 || c.Child.Topic != "" || len(c.Child.Key) > 0 || len(c.Select) > 0 || c.valueNode("join") != nil {
		c.add(p, "tables/query and parent/child/join/select are two forms of a job: use one of them", "tables")
	}
	if len(c.Tables) == 0 {
		c.add(p, "tables is required with query: every table the query names, e.g. users: {topic: dbserver1.public.users, key: id}", "tables")
	}
	if strings.TrimSpace(c.Query) == "" {
		c.add(p, "query is required with tables: the join as a SELECT (see README, Supported SQL)", "query")
	}
	if c.timeSQL() {
		c.validateTimeSQL(p)
		return
	}
	if c.Watermark != nil {
		c.add(p, "watermark is a setting of time joins: declare tables.<t>.time on both tables of a time join, or remove watermark", "watermark")
	}
	before := len(p.Items)
	topics := map[string]string{}
	for _, name := range c.TableNames() {
		t := c.Tables[name]
		where := "tables." + name
		if t.Topic == "" {
			c.add(p, where+".topic is required (the table's Debezium topic)", "tables", name, "topic")
		} else if other, dup := topics[t.Topic]; dup {
			c.add(p, fmt.Sprintf("%s.topic: %s is also tables.%s's topic (a table appears once in tables; alias it twice in the query for a self-join)", where, t.Topic, other), "tables", name, "topic")
		} else {
			topics[t.Topic] = name
		}
		if len(t.Key) == 0 {
			c.add(p, where+".key is required (the primary key column(s))", "tables", name, "key")
		}
		for _, k := range t.Key {
			if !identRE.MatchString(k) {
				c.add(p, fmt.Sprintf("%s.key: %q is not a column name", where, k), "tables", name, "key")
			}
		}
		if len(t.ParentKey) > 0 {
			c.add(p, where+".parent_key is not a setting of tables (the query's ON says how tables join)", "tables", name, "parent_key")
		}
		for _, col := range sortedKeys(t.Types) {
			if _, err := pgschema.Column(t.Types[col], c.Debezium.Modes()); err != nil {
				c.add(p, fmt.Sprintf("%s.types.%s: %v", where, col, strings.TrimPrefix(err.Error(), "cdcjoin: ")), "tables", name, "types", col)
			}
		}
	}
	if len(p.Items) > before || strings.TrimSpace(c.Query) == "" {
		return
	}
	qt := map[string]*query.Table{}
	for name, t := range c.Tables {
		kinds := map[string]row.Kind{}
		for col, decl := range t.Types {
			if ct, err := pgschema.Column(decl, c.Debezium.Modes()); err == nil {
				kinds[col] = ct.Kind
			}
		}
		qt[name] = &query.Table{Key: t.Key, Kinds: kinds}
	}
	q, errs := query.Parse(c.Query, qt)
	if errs == nil {
		c.compiled, errs = plan.Compile(q)
	}
	c.queryProblems(p, errs)
	if errs != nil {
		return
	}
	pl := c.compiled
	used := map[string]map[string]bool{}
	for _, t := range pl.Tables {
		if used[t.Name] == nil {
			used[t.Name] = map[string]bool{}
		}
		for _, col := range t.Columns {
			used[t.Name][col] = true
		}
	}
	for _, name := range c.TableNames() {
		if used[name] == nil {
			c.add(p, fmt.Sprintf("tables.%s is not used by the query", name), "tables", name)
			continue
		}
		for _, col := range sortedKeys(c.Tables[name].Types) {
			if !used[name][col] {
				c.add(p, fmt.Sprintf("tables.%s.types.%s: the query does not use %s (declaring it has no effect)", name, col, col), "tables", name, "types", col)
			}
		}
	}
	if len(p.Items) > 0 {
		return
	}
	if sh, ok := pl.Legacy(); ok && pl.Tables[0].Name != pl.Tables[1].Name {
		c.asParentChild(pl, sh)
		return
	}
	for _, name := range c.TableNames() {
		if f := c.Tables[name].Format; (f != "" && f != FormatJSON) || (c.Format != "" && c.Format != FormatJSON) {
			c.add(p, "format: a multi-stage plan reads JSON records (Kafka Connect's JsonConverter) only so far; avro and protobuf work for the two-table parent/child shape", "tables", name)
			return
		}
	}
	c.plan = pl
}

// asParentChild fills the parent/child form from a query of its shape.
func (c *Config) asParentChild(pl *plan.Plan, sh plan.LegacyShape) {
	pt, ct := c.Tables[pl.Tables[0].Name], c.Tables[pl.Tables[1].Name]
	c.Parent = Table{Topic: pt.Topic, Key: pt.Key, Types: pt.Types, Format: pt.Format}
	c.Child = Table{Topic: ct.Topic, Key: ct.Key, ParentKey: sh.ChildFK, Types: ct.Types, Format: ct.Format}
	c.Join = Inner
	if sh.Left {
		c.Join = Left
	}
	c.Select = nil
	for _, s := range sh.Select {
		side := row.Parent
		if s.Child {
			side = row.Child
		}
		c.Select = append(c.Select, SelectItem{Side: side, Column: s.Column, Name: s.Name})
	}
}

// planOutputTypes is DeclaredOutputTypes of a plan: plain columns get
// their table's declared type; expressions the type their operands give.
func (c *Config) planOutputTypes() []row.ColumnType {
	pl := c.plan
	return plan.OutputTypes(pl, func(t int, col string) row.ColumnType {
		d := c.TableTypes(pl.Tables[t].Name, []string{col})
		if d == nil {
			return row.ColumnType{}
		}
		return d[0]
	})
}

// AsPlan returns a copy of a SQL job of the parent/child shape that runs
// it as a multi-stage plan instead (tests and benchmarks comparing the two
// cores on one query); other configurations are returned as they are.
func (c *Config) AsPlan() *Config {
	if c.compiled == nil || c.plan != nil {
		return c
	}
	out := *c
	out.plan = c.compiled
	out.Parent, out.Child, out.Select = Table{}, Table{}, nil
	return &out
}

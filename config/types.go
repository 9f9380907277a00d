package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cdcjoin/cdcjoin/pgschema"
	"github.com/cdcjoin/cdcjoin/row"
)

// Debezium repeats the connector settings that decide how values are
// encoded, under the connector's own property names, so that declared
// column types (Table.Types) are read the way the connector wrote them.
// Empty values are Debezium's defaults.
type Debezium struct {
	// DecimalHandlingMode: precise (default; exact), string, double.
	DecimalHandlingMode string `yaml:"decimal.handling.mode"`
	// TimePrecisionMode: adaptive (default), adaptive_time_microseconds,
	// connect, isostring.
	TimePrecisionMode string `yaml:"time.precision.mode"`
	// BinaryHandlingMode: bytes (default; exact), base64, base64-url-safe,
	// hex.
	BinaryHandlingMode string `yaml:"binary.handling.mode"`
	// IntervalHandlingMode: numeric (default; microseconds), string.
	IntervalHandlingMode string `yaml:"interval.handling.mode"`
	// UnavailableValuePlaceholder: the unchanged-TOAST placeholder
	// (default __debezium_unavailable_value).
	UnavailableValuePlaceholder string `yaml:"unavailable.value.placeholder"`
}

// Modes returns the encoding settings.
func (d *Debezium) Modes() pgschema.Modes {
	return pgschema.Modes{Decimal: d.DecimalHandlingMode, Time: d.TimePrecisionMode,
		Binary: d.BinaryHandlingMode, Interval: d.IntervalHandlingMode}
}

func (c *Config) validateDebezium(p *Problems) {
	for _, msg := range c.Debezium.Modes().Problems() {
		key := strings.Fields(msg)[0]
		c.add(p, "debezium."+msg, "debezium", key)
	}
}

func (c *Config) validateTypes(p *Problems) {
	for _, side := range []row.Side{row.Parent, row.Child} {
		t, name := c.table(side)
		path := []string{name}
		if c.TimeJoin != nil {
			path = []string{"time_join", name}
			name = "time_join." + name
		}
		projected := c.projected(side)
		for _, col := range sortedKeys(t.Types) {
			if _, err := pgschema.Column(t.Types[col], c.Debezium.Modes()); err != nil {
				c.add(p, fmt.Sprintf("%s.types.%s: %v", name, col, strings.TrimPrefix(err.Error(), "cdcjoin: ")), append(path, "types", col)...)
			}
			if !projected[col] {
				what := "a key or selected column"
				if c.TimeJoin != nil {
					what = "a key, time or selected column"
				}
				c.add(p, fmt.Sprintf("%s.types.%s: %s is not %s of the %s (declaring it has no effect)", name, col, col, what, name), append(path, "types", col)...)
			}
		}
	}
}

// sortedKeys returns m's keys in order (problems are listed in a stable
// order).
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func set(items []string) map[string]bool {
	s := make(map[string]bool, len(items))
	for _, it := range items {
		s[it] = true
	}
	return s
}

func (c *Config) table(side row.Side) (*Table, string) {
	if side == row.Parent {
		if c.TimeJoin != nil {
			return &c.Parent, "left"
		}
		return &c.Parent, "parent"
	}
	if c.TimeJoin != nil {
		return &c.Child, "right"
	}
	return &c.Child, "child"
}

// projected returns the columns of side the join reads: its keys and its
// selected columns.
func (c *Config) projected(side row.Side) map[string]bool {
	t, _ := c.table(side)
	cols := set(append(append([]string(nil), t.Key...), t.ParentKey...))
	if c.TimeJoin != nil {
		cols[c.TimeSide(side).Time] = true
	}
	for _, s := range c.Select {
		if s.Side == side {
			cols[s.Column] = true
		}
	}
	return cols
}

// DeclaredTypes returns the declared types (Table.Types) of side's columns
// cols, in that order: a zero entry where nothing is declared; primary key
// columns are never Optional. nil when side declares nothing. The
// configuration must be valid.
func (c *Config) DeclaredTypes(side row.Side, cols []string) []row.ColumnType {
	t, _ := c.table(side)
	return c.declaredTypes(t, cols, c.linkedKeyTypes(side))
}

// declaredTypes is DeclaredTypes of table t, whose key columns linked to
// another table's have that table's declared types where t declares none
// (linked: column → declared type).
func (c *Config) declaredTypes(t *Table, cols []string, linked map[string]string) []row.ColumnType {
	if len(t.Types) == 0 && len(linked) == 0 {
		return nil
	}
	pk := set(t.Key)
	out := make([]row.ColumnType, len(cols))
	for i, col := range cols {
		decl, ok := t.Types[col]
		if !ok {
			// A foreign key column without a type of its own has its
			// parent key's declared type, and the other way round: the
			// two must hold the same values.
			if decl, ok = linked[col]; !ok {
				continue
			}
			decl = strings.TrimSpace(decl)
			if l := strings.ToLower(decl); strings.HasSuffix(l, " not null") {
				decl = strings.TrimSpace(decl[:len(decl)-len(" not null")])
			}
		}
		ct, err := pgschema.Column(decl, c.Debezium.Modes())
		if err != nil {
			continue // reported by validate
		}
		if pk[col] {
			ct.Optional = false
		}
		out[i] = ct
	}
	return out
}

// KeyColumns returns how many of cols (a projection of side, which starts
// with side's key columns as the join's projections do) are keys: the
// primary key, then the child's foreign key.
func (c *Config) KeyColumns(side row.Side, cols []string) int {
	t, _ := c.table(side)
	keys := set(append(append([]string(nil), t.Key...), t.ParentKey...))
	n := 0
	for n < len(cols) && keys[cols[n]] {
		n++
	}
	return n
}

// DeclaredOutputTypes returns the declared types of the select list's
// columns, in select order (zero entries where nothing is declared), for
// sinks that create tables before any record was read.
func (c *Config) DeclaredOutputTypes() []row.ColumnType {
	if c.plan != nil {
		return c.planOutputTypes()
	}
	out := make([]row.ColumnType, len(c.Select))
	for i, s := range c.Select {
		if s.Table == "window" {
			out[i] = WindowBoundType()
			continue
		}
		if d := c.DeclaredTypes(s.Side, []string{s.Column}); d != nil {
			out[i] = d[0]
		}
	}
	return out
}

// WindowBoundType is the type of a window join's window.start and
// window.end: a timestamp of microseconds.
func WindowBoundType() row.ColumnType {
	return row.ColumnType{Kind: row.KindTimestamp, Connect: "int64", Logical: "io.debezium.time.MicroTimestamp"}
}

// linkedKeyTypes returns, for side's key columns linked to the other
// side's (the child's foreign key and the parent's key, one to one), the
// other side's declared types.
func (c *Config) linkedKeyTypes(side row.Side) map[string]string {
	if len(c.Child.ParentKey) != len(c.Parent.Key) {
		return nil
	}
	out := map[string]string{}
	for i, fk := range c.Child.ParentKey {
		pk := c.Parent.Key[i]
		if side == row.Child {
			if d, ok := c.Parent.Types[pk]; ok {
				out[fk] = d
			}
		} else if d, ok := c.Child.Types[fk]; ok {
			out[pk] = d
		}
	}
	return out
}

// OutputPadded reports, per output column, whether a padded (outer-joined)
// row can make it NULL although its source column is NOT NULL: a LEFT
// join's child columns (a time join's: see Padded); in a plan, the columns
// of tables an outer join pads, and every expression.
func (c *Config) OutputPadded() []bool {
	if c.plan != nil {
		out := make([]bool, len(c.plan.Select))
		for i, o := range c.plan.Select {
			out[i] = o.Nullable
		}
		return out
	}
	out := make([]bool, len(c.Select))
	for i, s := range c.Select {
		out[i] = c.Padded(s.Side)
	}
	return out
}

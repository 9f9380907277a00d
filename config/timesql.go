package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/cdcjoin/cdcjoin/pgschema"
	"github.com/cdcjoin/cdcjoin/query"
	"github.com/cdcjoin/cdcjoin/row"
)

// The SQL form of a time join (interval kind): tables that declare their
// event-time column, a query whose ON holds the key equalities and a
// time bound, and the watermark settings in a watermark block:
//
//	tables:
//	  impressions: {topic: ads.impressions, time: impression_time, types: {impression_time: timestamp}}
//	  clicks:      {topic: ads.clicks, time: click_time, types: {click_time: timestamp}, format: json}
//	query: |
//	  SELECT i.impression_id, i.ad_id, c.click_id, c.click_time
//	  FROM impressions i LEFT JOIN clicks c
//	    ON i.ad_id = c.ad_id
//	   AND c.click_time BETWEEN i.impression_time AND i.impression_time + INTERVAL '30' MINUTE
//	watermark: {out_of_orderness: 10s, idle_timeout: 1m, allowed_lateness: 0s}
//
// A job is a time join written as SQL when a table of tables declares
// time. Validation compiles it into exactly the TimeJoin the time_join
// YAML form would give (the FROM table is left, the joined table right;
// the key is the ON equalities, in the order of tables.<t>.key when given;
// lower and upper come from the bound), with Join and Select filled in,
// so that everything downstream runs the one time join.

// Watermark holds a time join's watermark settings in the SQL form (the
// time_join YAML form has them in time_join). See TimeJoin for their
// meaning; all default to 0.
type Watermark struct {
	OutOfOrderness  time.Duration `yaml:"out_of_orderness"`
	IdleTimeout     time.Duration `yaml:"idle_timeout"`
	AllowedLateness time.Duration `yaml:"allowed_lateness"`
}

// timeSQL reports whether the job is a time join written as SQL: a
// table of tables declares its time column.
func (c *Config) timeSQL() bool {
	for _, t := range c.Tables {
		if t.Time != "" {
			return true
		}
	}
	return false
}

// timeJob reports whether the job is a time join in either form (before
// validation has compiled the SQL form).
func (c *Config) timeJob() bool { return c.TimeJoin != nil || c.timeSQL() }

// TimeSQL reports whether the job is a time join written as SQL (tables
// with time + query); IsTimeJoin is true for it too once validated.
func (c *Config) TimeSQL() bool { return c.timeSQL() && c.TimeJoin != nil }

// validateTimeSQL validates the SQL form of a time join and, when it has
// no problem, compiles it into c.TimeJoin, c.Join and c.Select.
func (c *Config) validateTimeSQL(p *Problems) {
	before := len(p.Items)
	if len(c.Tables) != 2 {
		c.add(p, fmt.Sprintf("tables: a time join joins two tables, not %d (a join of three or more tables with a time bound is not supported)", len(c.Tables)), "tables")
	}
	qt := map[string]*query.TimeTable{}
	for _, name := range c.TableNames() {
		t := c.Tables[name]
		where := "tables." + name
		if t.Topic == "" {
			c.add(p, where+".topic is required (the table's topic)", "tables", name, "topic")
		}
		switch {
		case t.Time == "":
			c.add(p, fmt.Sprintf("%s.time is required: both tables of a time join declare their event-time column (another table declares time)", where), "tables", name)
		case t.Time == TimeSource:
			c.add(p, fmt.Sprintf("%s.time source.ts_ms is for temporal joins, which the SQL form does not express: write the job as time_join: YAML (kind: temporal)", where), "tables", name, "time")
		case !identRE.MatchString(t.Time):
			c.add(p, fmt.Sprintf("%s.time: %q is not a column name", where, t.Time), "tables", name, "time")
		}
		for _, k := range t.Key {
			if !identRE.MatchString(k) {
				c.add(p, fmt.Sprintf("%s.key: %q is not a column name", where, k), "tables", name, "key")
			}
		}
		if len(t.ParentKey) > 0 {
			c.add(p, where+".parent_key is not a setting of tables (the query's ON says how tables join)", "tables", name, "parent_key")
		}
		switch t.Format {
		case "", TimeFormatDebezium, TimeFormatPlain:
		default:
			c.add(p, fmt.Sprintf("%s.format %q: a time join's table is debezium (Debezium envelopes of an insert-only table, the default) or json (plain JSON events)", where, t.Format), "tables", name, "format")
		}
		for _, col := range sortedKeys(t.Types) {
			if _, err := pgschema.Column(t.Types[col], c.Debezium.Modes()); err != nil {
				c.add(p, fmt.Sprintf("%s.types.%s: %v", where, col, strings.TrimPrefix(err.Error(), "cdcjoin: ")), "tables", name, "types", col)
			}
		}
		if d, ok := t.Types[t.Time]; ok && t.Time != "" {
			switch d {
			case "timestamp", "timestamp without time zone", "timestamptz", "timestamp with time zone", "date", "bigint", "int8":
			default:
				c.add(p, fmt.Sprintf("%s.types.%s: %q cannot be an event time (use timestamp, timestamptz, date or bigint for epoch milliseconds)", where, t.Time, d), "tables", name, "types", t.Time)
			}
		}
		qt[name] = &query.TimeTable{Time: t.Time}
	}
	if c.Format != "" && c.Format != FormatJSON {
		c.add(p, fmt.Sprintf("format %s: a time join reads JSON records (Debezium envelopes through JsonConverter, or plain JSON events: tables.<t>.format json)", c.Format), "format")
	}
	if w := c.Watermark; w != nil {
		for _, d := range []struct {
			name string
			v    time.Duration
		}{{"out_of_orderness", w.OutOfOrderness}, {"idle_timeout", w.IdleTimeout}, {"allowed_lateness", w.AllowedLateness}} {
			if d.v < 0 {
				c.add(p, fmt.Sprintf("watermark.%s must not be negative", d.name), "watermark", d.name)
			}
		}
	}
	if c.ClickHouse != nil && c.ClickHouse.Mode != ModeInsert {
		c.add(p, fmt.Sprintf("clickhouse.mode %q: a time join's output is insert-only (mode insert: a MergeTree of emitted rows)", c.ClickHouse.Mode), "clickhouse", "mode")
	}
	if len(p.Items) > before || len(c.Tables) != 2 || strings.TrimSpace(c.Query) == "" {
		return
	}
	tq, errs := query.ParseTimeJoin(c.Query, qt)
	c.queryProblems(p, errs)
	if errs != nil {
		return
	}
	tj := &TimeJoin{Kind: KindInterval, Lower: &tq.Lower, Upper: &tq.Upper}
	if w := c.Watermark; w != nil {
		tj.OutOfOrderness, tj.IdleTimeout, tj.AllowedLateness = w.OutOfOrderness, w.IdleTimeout, w.AllowedLateness
	}
	for _, s := range []struct {
		from query.From
		keys []string
		side *TimeSide
	}{{tq.Left, tq.LeftKey, &tj.Left}, {tq.Right, tq.RightKey, &tj.Right}} {
		t := c.Tables[s.from.Table]
		key := s.keys
		if len(t.Key) > 0 {
			if !sameSet(t.Key, s.keys) {
				c.add(p, fmt.Sprintf("tables.%s.key %v: in a time join the key is the join key, the columns the query's ON equates (%v); give those, in any order, or leave key out", s.from.Table, []string(t.Key), s.keys), "tables", s.from.Table, "key")
				continue
			}
			key = t.Key
		}
		*s.side = TimeSide{Topic: t.Topic, Key: append(Columns(nil), key...), Time: t.Time, Types: t.Types, Format: t.Format}
	}
	// Key pairs keep their ON pairing when a side's key order is given.
	if len(p.Items) > before {
		return
	}
	tj.Right.Key = pairKey(tj.Left.Key, tq.LeftKey, tq.RightKey)
	if k := c.Tables[tq.Right.Table].Key; len(k) > 0 && len(c.Tables[tq.Left.Table].Key) > 0 && !samePairing(tj.Left.Key, k, tq.LeftKey, tq.RightKey) {
		c.add(p, fmt.Sprintf("tables.%s.key %v and tables.%s.key %v pair their columns differently from the query's ON; list them in the same order", tq.Left.Table, []string(c.Tables[tq.Left.Table].Key), tq.Right.Table, []string(k)), "tables", tq.Right.Table, "key")
		return
	}
	for _, it := range tq.Select {
		si := SelectItem{Side: row.Parent, Column: it.Column, Name: it.Name, Table: "left"}
		if it.Right {
			si.Side, si.Table = row.Child, "right"
		}
		if strings.HasPrefix(si.Name, "_") {
			p.Items = append(p.Items, Problem{Line: c.queryLine(it.Pos.Line), Msg: fmt.Sprintf("query line %d, column %d: output name %q: names starting with '_' are reserved for cdcjoin's columns", it.Pos.Line, it.Pos.Column, si.Name)})
		}
		c.Select = append(c.Select, si)
	}
	c.Join = map[query.JoinKind]JoinKind{query.Inner: Inner, query.Left: Left, query.Right: Right, query.Full: Full}[tq.Kind]
	for _, name := range c.TableNames() {
		t := c.Tables[name]
		side := &tj.Left
		if name == tq.Right.Table {
			side = &tj.Right
		}
		used := map[string]bool{side.Time: true}
		for _, k := range side.Key {
			used[k] = true
		}
		for _, s := range c.Select {
			if (s.Side == row.Parent) == (side == &tj.Left) {
				used[s.Column] = true
			}
		}
		for _, col := range sortedKeys(t.Types) {
			if !used[col] {
				c.add(p, fmt.Sprintf("tables.%s.types.%s: the query does not use %s (declaring it has no effect)", name, col, col), "tables", name, "types", col)
			}
		}
	}
	if len(p.Items) > before {
		return
	}
	c.TimeJoin = tj
	tj.defaults(c)
	// A backstop: the time_join checks hold by construction.
	c.validateTimeJoin(p)
}

// pairKey returns the right key that pairs with leftKey as the ON
// equalities pair onL[i] with onR[i].
func pairKey(leftKey, onL, onR []string) Columns {
	out := make(Columns, 0, len(leftKey))
	for _, l := range leftKey {
		for i := range onL {
			if onL[i] == l {
				out = append(out, onR[i])
				break
			}
		}
	}
	return out
}

// samePairing reports whether leftKey[i] and rightKey[i] are equated by
// the ON for every i.
func samePairing(leftKey, rightKey Columns, onL, onR []string) bool {
	if len(leftKey) != len(rightKey) {
		return false
	}
	for i := range leftKey {
		found := false
		for j := range onL {
			if onL[j] == leftKey[i] && onR[j] == rightKey[i] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func sameSet(a Columns, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]bool{}
	for _, x := range b {
		m[x] = true
	}
	for _, x := range a {
		if !m[x] {
			return false
		}
	}
	return true
}

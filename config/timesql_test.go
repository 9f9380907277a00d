package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestTimeSQLIsTheYAMLJob: the job written as SQL compiles to
// exactly the TimeJoin, join type and select list of its time_join form.
func TestTimeSQLIsTheYAMLJob(t *testing.T) {
	load := func(path string) *Config {
		t.Helper()
		c, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	y, s := load("../testdata/timejoin/ad_clicks.yaml"), load("../testdata/timejoin/ad_clicks_sql.yaml")
	if !s.IsTimeJoin() || !s.TimeSQL() || y.TimeSQL() {
		t.Fatalf("IsTimeJoin %v TimeSQL %v/%v", s.IsTimeJoin(), s.TimeSQL(), y.TimeSQL())
	}
	if !reflect.DeepEqual(y.TimeJoin, s.TimeJoin) {
		t.Errorf("time_join\n yaml %+v\n sql  %+v", *y.TimeJoin, *s.TimeJoin)
	}
	if y.Join != s.Join || !reflect.DeepEqual(y.Select, s.Select) || !reflect.DeepEqual(y.Parent, s.Parent) || !reflect.DeepEqual(y.Child, s.Child) {
		t.Errorf("join %v/%v select\n %+v\n %+v\nparent %+v/%+v", y.Join, s.Join, y.Select, s.Select, y.Parent, s.Parent)
	}
	if !reflect.DeepEqual(y.OutputNames(), s.OutputNames()) || !reflect.DeepEqual(y.DeclaredOutputTypes(), s.DeclaredOutputTypes()) {
		t.Errorf("outputs %v / %v", y.OutputNames(), s.OutputNames())
	}
}

const timeSQLBase = `name: tj
tables:
  l: {topic: tl, time: t, types: {t: timestamp}}
  r: {topic: tr, time: t, types: {t: timestamp}, format: json}
query: |
  SELECT a.v AS lv, b.v AS rv
  FROM l a %s r b
    ON %s
state: {dir: /tmp/tj}
`

// TestTimeSQLBounds: every way of writing the bound gives its lower and
// upper, and each join type its join.
func TestTimeSQLBounds(t *testing.T) {
	for _, tc := range []struct {
		join, on     string
		kind         JoinKind
		lower, upper time.Duration
	}{
		{"JOIN", "a.k = b.k AND b.t BETWEEN a.t AND a.t + INTERVAL '30' MINUTE", Inner, 0, 30 * time.Minute},
		{"INNER JOIN", "b.t BETWEEN a.t - INTERVAL '2 seconds' AND a.t + INTERVAL '5' SECOND AND b.k = a.k", Inner, -2 * time.Second, 5 * time.Second},
		{"LEFT JOIN", "a.k = b.k AND b.t >= a.t - INTERVAL '1' HOUR AND b.t <= a.t + INTERVAL '90 minutes'", Left, -time.Hour, 90 * time.Minute},
		{"LEFT OUTER JOIN", "a.k = b.k AND a.t <= b.t + INTERVAL '2s' AND a.t >= b.t - INTERVAL '5 ms'", Left, -2 * time.Second, 5 * time.Millisecond},
		{"RIGHT JOIN", "a.k = b.k AND a.t BETWEEN b.t - INTERVAL '5 seconds' AND b.t + INTERVAL '2 seconds'", Right, -2 * time.Second, 5 * time.Second},
		{"FULL OUTER JOIN", "a.k = b.k AND b.t + INTERVAL '1' DAY >= a.t AND b.t <= a.t + INTERVAL '1 day 250 microseconds'", Full, -24 * time.Hour, 24*time.Hour + 250*time.Microsecond},
		{"FULL JOIN", "a.k = b.k AND b.t = a.t", Full, 0, 0},
	} {
		c, err := Parse([]byte(strings.Replace(strings.Replace(timeSQLBase, "%s", tc.join, 1), "%s", tc.on, 1)), "x.yaml")
		if err != nil {
			t.Errorf("%s ON %s: %v", tc.join, tc.on, err)
			continue
		}
		tj := c.TimeJoin
		if c.Join != tc.kind || tj.Kind != KindInterval || *tj.Lower != tc.lower || *tj.Upper != tc.upper {
			t.Errorf("%s ON %s: join %s lower %v upper %v", tc.join, tc.on, c.Join, *tj.Lower, *tj.Upper)
		}
		if tj.Left.Topic != "tl" || tj.Right.Topic != "tr" || tj.Right.Format != TimeFormatPlain || tj.Left.Format != TimeFormatDebezium ||
			!reflect.DeepEqual(tj.Left.Key, Columns{"k"}) || !reflect.DeepEqual(tj.Right.Key, Columns{"k"}) {
			t.Errorf("%s: sides %+v %+v", tc.on, tj.Left, tj.Right)
		}
		if c.ClickHouse != nil || strings.Join(c.OutputNames(), ",") != "lv,rv" {
			t.Errorf("outputs %v", c.OutputNames())
		}
	}
}

// TestTimeSQLRefusals: what the SQL form does not express is refused up
// front, each problem with the query's line and column (as YAML lines)
// and the alternative, all at once.
func TestTimeSQLRefusals(t *testing.T) {
	for _, tc := range []struct {
		join, on string
		want     []string
	}{
		{"JOIN", "a.k = b.k", []string{"line 8: query: query line 3, column 10: the time bound needs a lower and an upper bound on b.t"}},
		{"JOIN", "a.k = b.k AND b.t >= a.t", []string{"needs an upper bound"}},
		{"JOIN", "a.k = b.k AND b.t BETWEEN a.t AND a.t + INTERVAL '1' MINUTE AND b.x <> a.x",
			[]string{"column 74: a time join's ON is ANDed key equalities", "a time join, in either form, has no filters"}},
		{"JOIN", "a.k = b.k AND b.t BETWEEN a.t AND a.t + INTERVAL '1' MINUTE AND b.k = a.z",
			[]string{"column 74: a column is in two key equalities"}},
		{"JOIN", "a.k = b.k AND b.t BETWEEN a.t AND a.t + INTERVAL '1' MINUTE AND b.x >= a.t", []string{"column 70: b.x is not the time column of r (tables.r.time is t)"}},
		{"JOIN", "a.k = b.k AND b.t BETWEEN a.t AND a.t + INTERVAL '1' MINUTE AND a.v > 3", []string{"a strict > is not supported"}},
		{"JOIN", "a.k = b.k AND b.t BETWEEN a.t AND a.t + INTERVAL '1' MINUTE OR a.k = 1", []string{"column 66: a time join's ON is ANDed key equalities (a.k = b.k) and a time bound; this condition is not supported"}},
		{"JOIN", "a.k = b.k AND b.t BETWEEN a.t AND a.t + INTERVAL '1' MONTH", []string{"INTERVAL '…' with this field is not supported"}},
		{"JOIN", "a.k = b.k AND b.t BETWEEN a.t AND a.t + INTERVAL '1 month'", []string{`INTERVAL "1 month": write a number and a unit`}},
		{"JOIN", "a.k = b.k AND b.t BETWEEN a.t + INTERVAL '1' MINUTE AND a.t", []string{"the time bound is empty"}},
		{"JOIN", "a.k = b.k AND b.t BETWEEN b.t AND a.t + INTERVAL '1' MINUTE", []string{"both sides here are b's"}},
		{"JOIN", "a.k = b.k AND b.t BETWEEN a.t AND a.t + 60", []string{"an INTERVAL literal"}},
		{"CROSS JOIN", "", nil},
		{"JOIN", "a.k = b.k AND b.t BETWEEN a.t AND a.t + INTERVAL '1' MINUTE JOIN l c ON c.k = a.k", []string{"a join of three or more tables with a time bound is not supported"}},
		{"JOIN", "a.k = b.k AND b.t BETWEEN a.t AND a.t + INTERVAL '1' MINUTE GROUP BY a.v", []string{"window and temporal joins are written as time_join: YAML"}},
	} {
		q := strings.Replace(strings.Replace(timeSQLBase, "%s", tc.join, 1), "%s", tc.on, 1)
		if tc.join == "CROSS JOIN" {
			q = strings.Replace(q, "    ON \n", "", 1)
			tc.want = []string{"a time join is written JOIN b [alias] ON"}
		}
		_, err := Parse([]byte(q), "x.yaml")
		if err == nil {
			t.Errorf("ON %s: accepted", tc.on)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ON %s: missing %q in\n%v", tc.on, w, err)
			}
		}
	}
	// Everything at once: table settings, watermark, select, WHERE.
	bad := `name: tj
tables:
  l: {topic: tl, key: [k, z], time: t, types: {t: text, w: integer}, format: avro}
  r: {topic: tr, time: source.ts_ms}
query: |
  SELECT a.v + 1 AS lv, b.v AS rv FROM l a JOIN r b ON a.k = b.k AND b.t BETWEEN a.t AND a.t + INTERVAL '1' MINUTE
watermark: {out_of_orderness: -1s}
state: {dir: /tmp/tj}
clickhouse: {addr: [127.0.0.1:9000], mode: upsert}
`
	_, err := Parse([]byte(bad), "bad.yaml")
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range []string{
		`line 3: tables.l.types.t: "text" cannot be an event time`,
		`line 3: tables.l.format "avro": a time join's table is debezium`,
		"line 4: tables.r.time source.ts_ms is for temporal joins, which the SQL form does not express: write the job as time_join: YAML (kind: temporal)",
		"line 7: watermark.out_of_orderness must not be negative",
		`line 9: clickhouse.mode "upsert": a time join's output is insert-only`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("missing %q in\n%v", w, err)
		}
	}
	// The query's own problems, together: an expression, WHERE, a key
	// that is not the ON's.
	bad2 := strings.Replace(timeSQLBase, "SELECT a.v AS lv", "SELECT a.v || 'x' AS lv", 1)
	bad2 = strings.Replace(strings.Replace(bad2, "%s", "JOIN", 1), "%s", "a.k = b.k AND b.t BETWEEN a.t AND a.t + INTERVAL '1' MINUTE WHERE a.v IS NULL", 1)
	_, err = Parse([]byte(bad2), "bad2.yaml")
	for _, w := range []string{"line 6: query: query line 1, column 12: a time join selects columns", "WHERE is not supported in a time join"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("missing %q in\n%v", w, err)
		}
	}
	bad3 := strings.Replace(strings.Replace(strings.Replace(timeSQLBase, "{topic: tl,", "{topic: tl, key: z,", 1), "%s", "JOIN", 1), "%s", "a.k = b.k AND b.t BETWEEN a.t AND a.t + INTERVAL '1' MINUTE", 1)
	if _, err := Parse([]byte(bad3), "bad3.yaml"); err == nil || !strings.Contains(err.Error(), "line 3: tables.l.key [z]: in a time join the key is the join key") {
		t.Errorf("key not the ON's: %v", err)
	}
	// Only one table with time; watermark without a time join; INTERVAL in a
	// join of CDC tables.
	one := strings.Replace(strings.Replace(strings.Replace(timeSQLBase, "r: {topic: tr, time: t,", "r: {topic: tr, key: id,", 1), "%s", "JOIN", 1), "%s", "a.k = b.k AND b.t BETWEEN a.t AND a.t + INTERVAL '1' MINUTE", 1)
	if _, err := Parse([]byte(one), "one.yaml"); err == nil || !strings.Contains(err.Error(), "line 4: tables.r.time is required: both tables of a time join") {
		t.Errorf("one table with time: %v", err)
	}
	cdc := `name: x
tables:
  users: {topic: u, key: id}
  domains: {topic: d, key: id}
query: SELECT u.id FROM users u JOIN domains d ON d.user_id = u.id AND d.t <= u.t + INTERVAL '1' MINUTE
watermark: {idle_timeout: 1m}
state: {dir: /tmp/x}
`
	_, err = Parse([]byte(cdc), "cdc.yaml")
	for _, w := range []string{"line 6: watermark is a setting of time joins", "INTERVAL belongs to the time bound of a time join: declare tables.<t>.time"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("missing %q in\n%v", w, err)
		}
	}
	pc := "name: x\nparent: {topic: u, key: id, time: t}\nchild: {topic: d, key: id, parent_key: uid}\nselect: parent.id\nstate: {dir: /tmp/x}\n"
	if _, err := Parse([]byte(pc), "pc.yaml"); err == nil || !strings.Contains(err.Error(), "line 2: parent.time: a regular join has no event time") {
		t.Errorf("time on a parent: %v", err)
	}
	withYAML, _ := os.ReadFile("../testdata/timejoin/ad_clicks.yaml")
	if _, err := Parse(append(withYAML, "watermark: {idle_timeout: 1m}\n"...), "y.yaml"); err == nil || !strings.Contains(err.Error(), "watermark is for the SQL form of a time join") {
		t.Errorf("watermark with time_join: %v", err)
	}
}

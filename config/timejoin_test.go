package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

// adClicks is the job, verbatim (testdata/timejoin/ad_clicks.yaml).
func adClicksJob(t *testing.T) string {
	data, err := os.ReadFile("../testdata/timejoin/ad_clicks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestTimeJoinContract(t *testing.T) {
	adClicks := adClicksJob(t)
	c, err := Parse([]byte(adClicks), "ad_clicks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tj := c.TimeJoin
	if !c.IsTimeJoin() || tj.Kind != KindInterval || *tj.Lower != 0 || *tj.Upper != 30*time.Minute ||
		tj.OutOfOrderness != 10*time.Second || tj.IdleTimeout != time.Minute || tj.AllowedLateness != 0 {
		t.Fatalf("parsed %+v", tj)
	}
	if tj.Left.Format != TimeFormatDebezium || tj.Left.Time != "impression_time" || strings.Join(tj.Right.Key, ",") != "ad_id,user_id" {
		t.Errorf("sides %+v %+v", tj.Left, tj.Right)
	}
	if got := strings.Join(c.OutputNames(), ","); got != "impression_id,ad_id,user_id,click_id,click_time" {
		t.Errorf("output names %s", got)
	}
	if c.Parent.Topic != "ads.impressions" || c.Child.Topic != "ads.clicks" {
		t.Errorf("sides as tables: %+v %+v", c.Parent, c.Child)
	}
	if err := c.ValidateForKafka(); err != nil && strings.Contains(err.Error(), "time_join") {
		t.Errorf("run of a time join: %v", err)
	}
	ch, err := c.WithClickHouse("127.0.0.1:9000")
	if err != nil {
		t.Fatal(err)
	}
	if ch.ClickHouse.Mode != ModeInsert {
		t.Errorf("clickhouse mode %q", ch.ClickHouse.Mode)
	}
	win := strings.Replace(adClicks, "kind: interval", "kind: window\n  window: {size: 1h}", 1)
	win = strings.Replace(strings.Replace(win, "  lower: 0s", "", 1), "  upper: 30m", "", 1)
	win = strings.Replace(win, "select: left.impression_id", "select: window.start, window.end AS until, left.impression_id", 1)
	c, err = Parse([]byte(win), "window.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.TimeJoin.Window.Slide != time.Hour || c.OutputNames()[0] != "window_start" || c.OutputNames()[1] != "until" {
		t.Errorf("window %+v, names %v", c.TimeJoin.Window, c.OutputNames())
	}
	temporal := `name: orders_users
join: left
time_join:
  kind: temporal
  left: {topic: shop.orders, key: user_id, time: ordered_at, format: json, types: {ordered_at: bigint}}
  right: {topic: dbserver1.public.users, key: id, time: source.ts_ms}
select: left.order_id, right.firstname
state: {dir: /tmp/ou}
`
	if _, err := Parse([]byte(temporal), "temporal.yaml"); err != nil {
		t.Fatal(err)
	}
}

func TestTimeJoinProblems(t *testing.T) {
	bad := `name: bad
parent: {topic: a, key: id}
join: outer
time_join:
  kind: temporal
  left: {topic: x, key: [a, b], time: t, format: avro, types: {t: text}}
  right: {topic: x, key: a, format: json, time: source.ts_ms}
  upper: 5m
  out_of_orderness: -1s
select: left.a, parent.b, window.start
state: {dir: /tmp/bad}
clickhouse: {addr: [127.0.0.1:9000], mode: upsert}
`
	_, err := Parse([]byte(bad), "bad.yaml")
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"time_join replaces parent and child",
		`join "outer": use inner, left, right or full`,
		`time_join.left.types.t: "text" cannot be an event time`,
		`time_join.left.format "avro"`,
		"source.ts_ms needs Debezium envelopes",
		"left.key has 2 column(s), right.key 1",
		"same topic",
		"a CDC table: format debezium",
		"lower and upper are for interval joins",
		"out_of_orderness must not be negative",
		`clickhouse.mode "upsert": a time join's output is insert-only`,
		"select: parent.b: a time join selects left.",
		"window.start belongs to window joins",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	regular := strings.Replace(good, "child.domain_name", "right.domain_name", 1)
	if _, err := Parse([]byte(regular), "regular.yaml"); err == nil || !strings.Contains(err.Error(), "are for time_join jobs") {
		t.Errorf("a right. item in a regular join: %v", err)
	}
}

package clickhouse

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/row"
)

func TestKeyEncodingInjective(t *testing.T) {
	keys := [][]row.Value{
		nil,
		{row.String("")},
		{row.String("a"), row.String("b")},
		{row.String("a','b")},
		{row.String("a"), row.String("b'")},
		{row.String("a\\"), row.String("b")},
		{row.String("a\\',b")},
		{row.Int(1)},
		{row.String("1")},
		{row.Decimal("1")},
		{row.Null()},
		{row.String("NULL")},
		{row.Int(1), row.Int(2)},
		{row.Int(12)},
		{row.String("x\x00y")},
		{row.String("x\\0y")},
		{row.Date(1)},
		{row.Timestamp(1)},
	}
	seen := map[string]int{}
	for i, k := range keys {
		e := keyText(k)
		if k != nil && e == "" {
			t.Errorf("key %v encodes to the empty string (reserved for the padded row)", k)
		}
		if strings.IndexByte(e, 0) >= 0 {
			t.Errorf("key %v: encoding %q has a NUL byte", k, e)
		}
		if j, ok := seen[e]; ok {
			t.Errorf("keys %v and %v both encode to %q", keys[j], k, e)
		}
		seen[e] = i
	}
}

func TestParseType(t *testing.T) {
	ok := map[string]colType{
		"Int64":                             {base: tInt64},
		"Nullable(String)":                  {base: tString, nullable: true},
		"Nullable(Decimal(38, 2))":          {base: tDecimal, nullable: true},
		"DateTime64(6, 'UTC')":              {base: tDateTime64},
		"Nullable(DateTime('Europe/Rome'))": {base: tDateTime, nullable: true},
		"UUID":                              {base: tUUID},
		"Bool":                              {base: tBool},
		"Date32":                            {base: tDate32},
		"Array(Nullable(Int32))":            {base: tArray},
		"Decimal64(4)":                      {base: tDecimal},
	}
	for s, want := range ok {
		got, err := parseType(s)
		if err != nil || got.base != want.base || got.nullable != want.nullable {
			t.Errorf("parseType(%q) = %+v, %v; want %+v", s, got, err, want)
		}
	}
	for _, s := range []string{"Array(Array(String))", "Array", "DateTime64(x)", "Decimal(40, 2)", "Decimal(2, 3)", "LowCardinality(String)", "Map(String, String)", "Strin", "Nullable(Array(Int8))", "Decimal(38, 2"} {
		if _, err := parseType(s); err == nil {
			t.Errorf("parseType(%q): no error", s)
		}
	}
}

func TestColumnConversions(t *testing.T) {
	c := newColumn(colType{base: tInt8})
	if err := c.put(0, row.Int(300)); err == nil {
		t.Error("Int8 accepted 300")
	}
	if err := c.put(0, row.Null()); err == nil {
		t.Error("non-Nullable Int8 accepted NULL")
	}
	if err := c.put(0, row.String("x")); err == nil {
		t.Error("Int8 accepted a string")
	}
	if err := c.put(0, row.Int(-5)); err != nil {
		t.Error(err)
	}
	n := newColumn(colType{base: tInt64, nullable: true})
	for _, v := range []row.Value{row.Int(1), row.Null(), row.Int(3)} {
		if err := n.put(len(n.(*typed[int64]).vals), v); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.put(0, row.Int(7)); err != nil { // overwrite (fold)
		t.Fatal(err)
	}
	ptrs := n.data().([]*int64)
	if len(ptrs) != 3 || *ptrs[0] != 7 || ptrs[1] != nil || *ptrs[2] != 3 {
		t.Errorf("nullable data = %v", ptrs)
	}
	s := newColumn(colType{base: tString})
	if err := s.put(0, row.Unavailable()); err == nil {
		t.Error("String accepted the TOAST placeholder")
	}
	tc := newColumn(colType{base: tDateTime64, prec: 6})
	if err := tc.put(0, row.Timestamp(1_700_000_000_123_456)); err != nil {
		t.Fatal(err)
	}
	if got := tc.data().([]time.Time)[0]; got.UnixMicro() != 1_700_000_000_123_456 {
		t.Errorf("timestamp round trip: %v", got)
	}
}

func TestRetryable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&ch.Exception{Code: 252}, true},
		{&ch.Exception{Code: 210}, true},
		{&ch.Exception{Code: 159}, true},
		{fmt.Errorf("wrapped: %w", &ch.Exception{Code: 252}), true},
		{&ch.Exception{Code: 16}, false},
		{&ch.Exception{Code: 47}, false},
		{&ch.Exception{Code: 60}, false},
		{&ch.Exception{Code: 516}, false},
		{&ch.Exception{Code: 192}, false},
		{&ch.Exception{Code: 193}, false},
		{syscall.ECONNREFUSED, true},
		{fmt.Errorf("dial: %w", syscall.ECONNRESET), true},
		{io.EOF, true},
		{errors.New("something else"), false},
	} {
		if got := Retryable(c.err); got != c.want {
			t.Errorf("Retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	b := backoff{next: 100 * time.Millisecond, max: time.Second}
	prevCap := time.Duration(0)
	for i := range 10 {
		cap := b.next
		d := b.delay()
		if d < cap/2 || d > cap {
			t.Fatalf("attempt %d: delay %v outside [%v, %v]", i, d, cap/2, cap)
		}
		if cap < prevCap || cap > time.Second {
			t.Fatalf("attempt %d: cap %v after %v", i, cap, prevCap)
		}
		prevCap = cap
	}
}

func TestDDLText(t *testing.T) {
	y := `
name: shop-join
join: left
parent: {topic: users, key: id}
child: {topic: domains, key: id, parent_key: user_id}
select: parent.id AS user_id, child.domain, child.amount, child.created
state: {dir: /tmp/x}
clickhouse:
  addr: [127.0.0.1:9000]
  columns: {amount: "Decimal(18, 4)"}
`
	cfg, err := config.Parse([]byte(y), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	types := []row.ColumnType{
		{Kind: row.KindInt, Connect: "int64"},
		{Kind: row.KindString, Connect: "string"},
		{Kind: row.KindDecimal, Scale: 2},
		{Kind: row.KindTimestamp, Connect: "int64"},
	}
	old, err := DDL(cfg, types, Server{18, 16})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := DDL(cfg, types, LatestServer())
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(old, ";\n")
	for _, want := range []string{
		"CREATE DATABASE IF NOT EXISTS `default`",
		"CREATE TABLE IF NOT EXISTS `default`.`shop_join`",
		"`user_id` Int64,", "`domain` Nullable(String),", "`amount` Decimal(18, 4),", "`created` Nullable(Int64),",
		"ENGINE = ReplacingMergeTree(_version)\nORDER BY (_pk, _ck)",
		"CREATE VIEW IF NOT EXISTS `default`.`shop_join_current`", "FINAL\nWHERE _deleted = 0",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("18.16 DDL lacks %q:\n%s", want, all)
		}
	}
	all = strings.Join(cur, ";\n")
	for _, want := range []string{"`created` Nullable(DateTime64(6, 'UTC')),", "ReplacingMergeTree(_version, _deleted)"} {
		if !strings.Contains(all, want) {
			t.Errorf("current DDL lacks %q:\n%s", want, all)
		}
	}
	cfg.ClickHouse.Mode = config.ModeChangelog
	cl, _ := DDL(cfg, types, LatestServer())
	if all := strings.Join(cl, ";\n"); !strings.Contains(all, "VersionedCollapsingMergeTree(_sign, _version)") ||
		!strings.Contains(all, "non_replicated_deduplication_window") || strings.Contains(all, "VIEW") {
		t.Errorf("changelog DDL:\n%s", all)
	}
}

func TestConfigProblems(t *testing.T) {
	y := `
name: j
parent: {topic: users, key: id}
child: {topic: domains, key: id, parent_key: user_id}
select: parent.id AS user_id
state: {dir: /tmp/x}
clickhouse:
  addr: [nohostport, "h:99999"]
  database: "bad-db"
  mode: merge
  tls: {ca_file: /nonexistent/ca.pem, cert_file: c.pem}
  batch: {rows: -1, bytes: 1XB, interval: -1s}
  max_in_flight: 100
  retry: {initial: 2s, max: 1s}
  columns: {nope: Int64, user_id: "Int64)"}
`
	_, err := config.Parse([]byte(y), "t.yaml")
	var p *config.Problems
	if !errors.As(err, &p) {
		t.Fatalf("err = %v", err)
	}
	msg := err.Error()
	for _, want := range []string{
		`"nohostport" is not host:port`, `port "99999"`, `database "bad-db"`, `mode "merge"`,
		"tls settings are given but tls.enabled is false", "cert_file and tls.key_file go together",
		"/nonexistent/ca.pem", `unknown unit "XB"`, "batch.interval must be positive",
		"max_in_flight 100", "retry.max (1s) is below retry.initial (2s)", `"nope" is not a select output name`,
		`"Int64)" is not a ClickHouse type`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("problems lack %q:\n%s", want, msg)
		}
	}
	for _, it := range p.Items {
		if it.Line == 0 {
			t.Errorf("problem without a line: %s", it.Msg)
		}
	}

	ok := `
name: j
parent: {topic: users, key: id}
child: {topic: domains, key: id, parent_key: user_id}
select: parent.id AS user_id
state: {dir: /tmp/x}
clickhouse: {addr: ["127.0.0.1:9000"], batch: {bytes: 4MiB}}
`
	cfg, err := config.Parse([]byte(ok), "ok.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.ClickHouse
	if c.Table != "j" || c.Database != "default" || c.Mode != config.ModeUpsert || c.Batch.Rows != 50000 ||
		c.Batch.Bytes != 4<<20 || c.Batch.Interval != 200*time.Millisecond || !c.CreateTableEnabled() || c.MaxInFlight != 2 {
		t.Errorf("defaults: %+v", c)
	}
}

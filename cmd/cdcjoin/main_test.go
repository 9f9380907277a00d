package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := realMain(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func exampleConfig(t *testing.T, dir, extra string) string {
	data, err := os.ReadFile("../../testdata/example/user_domains.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(data), "./state/user_domains", filepath.Join(dir, "state"), 1) + extra
	return writeFile(t, dir, "job.yaml", cfg)
}

func TestReplayExample(t *testing.T) {
	dir := t.TempDir()
	cfg := exampleConfig(t, dir, "")
	code, out, errs := run(t, "replay", "--config", cfg, "--input", "../../testdata/example/snapshot.jsonl", "--final", "-", "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	want := `{"user_id":1,"firstname":"Egor","lastname":"Myasnik","domain_id":1,"domain_name":"Approval"}
{"user_id":1,"firstname":"Egor","lastname":"Myasnik","domain_id":2,"domain_name":"Rejection"}
{"user_id":1,"firstname":"Egor","lastname":"Myasnik","domain_id":3,"domain_name":"Stoppage"}
{"user_id":3,"firstname":"Mitya","lastname":"Volk","domain_id":4,"domain_name":"Cancellation"}
`
	if out != want {
		t.Errorf("final join:\n%s\nwant:\n%s", out, want)
	}
	// Running again on the same state without --resume is refused.
	code, _, errs = run(t, "replay", "--config", cfg, "--input", "../../testdata/example/snapshot.jsonl", "--quiet")
	if code == 0 || !strings.Contains(errs, "--resume") {
		t.Errorf("want a refusal naming --resume, got %d %q", code, errs)
	}
	// With --resume everything is skipped and the result is the same.
	code, out, errs = run(t, "replay", "--config", cfg, "--input", "../../testdata/example/snapshot.jsonl", "--resume", "--final", "-", "--quiet")
	if code != 0 || out != want {
		t.Errorf("resume: exit %d, %s %s", code, out, errs)
	}
}

const poison = `{"topic":"dbserver1.public.users","partition":0,"offset":0,"key":{"id":1},"value":{"op":"c","after":{"id":1,"firstname":"A","lastname":"B"}}}
{"topic":"dbserver1.public.users","partition":0,"offset":1,"key":{"id":2},"value":{"op":"x","after":{"id":2,"firstname":"A","lastname":"B"}}}
{"topic":"dbserver1.public.domains","partition":0,"offset":0,"key":{"id":1},"value":{"op":"c","after":{"id":1,"user_id":1,"domain_name":"a.com"}}}
`

func TestReplayBadRecordStops(t *testing.T) {
	dir := t.TempDir()
	cfg := exampleConfig(t, dir, "")
	in := writeFile(t, dir, "in.jsonl", poison)
	code, _, errs := run(t, "replay", "--config", cfg, "--input", in, "--quiet")
	if code != 1 || !strings.Contains(errs, "dbserver1.public.users/0@1") || !strings.Contains(errs, "unknown_op") {
		t.Fatalf("want exit 1 naming the record and the reason, got %d %q", code, errs)
	}
}

func TestReplayBadRecordDLQ(t *testing.T) {
	dir := t.TempDir()
	cfg := exampleConfig(t, dir, "errors: {policy: dlq, dlq_topic: user_domains.dlq}\n")
	in := writeFile(t, dir, "in.jsonl", poison)
	bad := filepath.Join(dir, "bad.jsonl")
	code, out, errs := run(t, "replay", "--config", cfg, "--input", in, "--bad-records", bad, "--final", "-", "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, `"domain_name":"a.com"`) {
		t.Errorf("the good records were not joined: %s", out)
	}
	b, err := os.ReadFile(bad)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"offset":1`) || !strings.Contains(string(b), "unknown_op") || strings.Count(string(b), "\n") != 1 {
		t.Errorf("bad-records file: %s", b)
	}
}

func TestBadConfigExit(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "bad.yaml", "name: x\njoin: sideways\n")
	code, _, errs := run(t, "replay", "--config", cfg, "--input", "-")
	if code != 1 || !strings.Contains(errs, "line 2") || !strings.Contains(errs, "parent.topic is required") {
		t.Fatalf("got %d %q", code, errs)
	}
}

func TestUsage(t *testing.T) {
	if code, out, _ := run(t, "help"); code != 0 || !strings.Contains(out, "replay") || !strings.Contains(out, "demo") {
		t.Errorf("help: %d %s", code, out)
	}
	if code, _, errs := run(t, "replay"); code != 2 || !strings.Contains(errs, "--config") {
		t.Errorf("missing flags: %d %s", code, errs)
	}
	if code, _, _ := run(t, "nope"); code != 2 {
		t.Errorf("unknown command: %d", code)
	}
}

// A replay whose state outgrows state.row_cache_mb says so, and what to do.
func TestReplayRowCacheHint(t *testing.T) {
	dir := t.TempDir()
	var in strings.Builder
	for i := 1; i <= 30000; i++ {
		fmt.Fprintf(&in, `{"topic":"u","partition":0,"offset":%d,"key":{"id":%d},"value":{"op":"c","after":{"id":%d,"name":"user number %d"}}}`+"\n", i, i, i, i)
	}
	input := writeFile(t, dir, "in.jsonl", in.String())
	for _, tc := range []struct {
		rowCacheMB int
		hint       bool
	}{{1, true}, {64, false}} {
		cfg := writeFile(t, dir, "job.yaml", fmt.Sprintf(`name: hint
parent: {topic: u, key: id}
child: {topic: d, key: id, parent_key: user_id}
select: parent.id, parent.name, child.id AS domain_id
state: {dir: %s, row_cache_mb: %d}
`, filepath.Join(dir, fmt.Sprint("state", tc.rowCacheMB)), tc.rowCacheMB))
		code, _, errs := run(t, "replay", "--config", cfg, "--input", input)
		if code != 0 {
			t.Fatalf("row_cache_mb %d: exit %d: %s", tc.rowCacheMB, code, errs)
		}
		if got := strings.Contains(errs, "outgrew state.row_cache_mb"); got != tc.hint {
			t.Errorf("row_cache_mb %d: hint shown %v, want %v:\n%s", tc.rowCacheMB, got, tc.hint, errs)
		}
	}
}

// Without schemas, a key column holds one type: a foreign key "258" (a
// string) for a parent key 258 (a number) is a bad record that stops the
// replay, never a child silently missing from the inner join; and equal
// numbers in any spelling (258, 258.0, 2.58e2) are one key.
func TestReplayKeyTypes(t *testing.T) {
	parent := `{"topic":"dbserver1.public.users","partition":0,"offset":0,"key":{"id":258},"value":{"op":"c","after":{"id":258,"firstname":"A","lastname":"B"}}}` + "\n"
	child := func(off int, fk string) string {
		return fmt.Sprintf(`{"topic":"dbserver1.public.domains","partition":0,"offset":%d,"key":{"id":%d},"value":{"op":"c","after":{"id":%d,"user_id":%s,"domain_name":"d%d"}}}`+"\n", off, off+1, off+1, fk, off+1)
	}
	dir := t.TempDir()
	in := writeFile(t, dir, "split.jsonl", parent+child(0, `258`)+child(1, `"258"`))
	code, out, errs := run(t, "replay", "--config", exampleConfig(t, dir, ""), "--input", in, "--final", "-", "--quiet")
	if code != 1 || !strings.Contains(errs, "dbserver1.public.domains/0@1") || !strings.Contains(errs, "type_mismatch") {
		t.Fatalf("a string foreign key after numeric ones: exit %d, out %q, err %q; want a bad record naming domains/0@1", code, out, errs)
	}
	dir = t.TempDir()
	in = writeFile(t, dir, "spellings.jsonl", parent+child(0, `258`)+child(1, `258.0`)+child(2, `2.58e2`))
	code, out, errs = run(t, "replay", "--config", exampleConfig(t, dir, ""), "--input", in, "--final", "-", "--quiet")
	if code != 0 || strings.Count(out, `"user_id":258,`) != 3 {
		t.Fatalf("exit %d: %s %s; want the three children joined to parent 258", code, out, errs)
	}
	// What the decoder learned is committed with the state: a resumed
	// replay still rejects the string spelling.
	more := writeFile(t, dir, "more.jsonl", child(3, `"258"`))
	code, out, errs = run(t, "replay", "--config", exampleConfig(t, dir, ""), "--input", more, "--resume", "--quiet")
	if code != 1 || !strings.Contains(errs, "dbserver1.public.domains/0@3") || !strings.Contains(errs, "type_mismatch") {
		t.Fatalf("a string foreign key after a resume: exit %d, out %q, err %q; want a bad record naming domains/0@3", code, out, errs)
	}
}

// A decimal column without schemas: with its type declared (and
// Debezium's decimal.handling.mode precise), the base64 bytes are the
// number, exactly as with schemas on; one column never holds two formats.
func TestReplayDeclaredDecimal(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "job.yaml", `name: prices
parent: {topic: users, key: id, types: {id: bigint}}
child: {topic: domains, key: id, parent_key: user_id, types: {id: bigint, user_id: bigint, price: "numeric(10,2)"}}
select: parent.id AS user_id, child.id AS domain_id, child.price
state: {dir: `+filepath.Join(dir, "state")+`}
`)
	schema := `{"type":"struct","fields":[{"type":"struct","optional":true,"field":"after","fields":[` +
		`{"type":"int64","field":"id"},{"type":"int64","field":"user_id"},` +
		`{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2","connect.decimal.precision":"10"},"field":"price"}]},` +
		`{"type":"string","field":"op"}]}`
	in := writeFile(t, dir, "in.jsonl",
		`{"topic":"users","partition":0,"offset":0,"key":{"id":1},"value":{"op":"c","after":{"id":1}}}`+"\n"+
			`{"topic":"domains","partition":0,"offset":0,"key":{"id":1},"value":{"op":"c","after":{"id":1,"user_id":1,"price":"BNI="}}}`+"\n"+
			`{"topic":"domains","partition":0,"offset":1,"key":{"id":2},"value":{"schema":`+schema+`,"payload":{"op":"c","after":{"id":2,"user_id":1,"price":"BNI="}}}}`+"\n")
	code, out, errs := run(t, "replay", "--config", cfg, "--input", in, "--final", "-", "--quiet")
	want := `{"user_id":1,"domain_id":1,"price":"12.34"}
{"user_id":1,"domain_id":2,"price":"12.34"}
`
	if code != 0 || out != want {
		t.Fatalf("exit %d, %s\n%s\nwant:\n%s", code, errs, out, want)
	}
}

// cdcjoin ddl types the table by the declared column types, for current
// servers and for 18.16.
func TestDDLDeclaredTypes(t *testing.T) {
	for srv, want := range map[string][]string{
		"latest": {"`id` Int64,", "`d` Nullable(Date32),", "`f4` Nullable(Float32),", "`ok` Nullable(Bool),", "`ai` Array(Nullable(Int32)),", "`ts` Nullable(DateTime64(6, 'UTC')),", "`u` Nullable(UUID),"},
		"18.16":  {"`id` Int64,", "`d` Nullable(Int32),", "`ok` Nullable(UInt8),", "`days` Array(Nullable(Int32)),", "`ts` Nullable(Int64),", "`num` Nullable(Decimal(12, 4)),"},
	} {
		code, out, errs := run(t, "ddl", "--config", "../../deploy/local/e2e-types-off.yaml", "--server", srv)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("--server %s: no %q in\n%s", srv, w, out)
			}
		}
	}
}

package engine

import (
	"strings"
	"testing"
)

func TestReadJSONL(t *testing.T) {
	in := strings.Join([]string{
		`{"topic":"a.b","partition":2,"offset":7,"key":{"id":1},"value":{"op":"c","after":{"id":1}}}`,
		``,
		`  { "value" : null , "key": [1, "x"], "offset": 8, "topic": "a.b" }  `,
		`{"topic":"t\u00e9","offset":-1,"partition":null,"key":null,"extra":{"n":[1,2]},"value":"s"}`,
	}, "\n")
	type got struct {
		topic      string
		part       int32
		off        int64
		key, value string
	}
	var recs []got
	err := ReadJSONL(strings.NewReader(in), "in", func(r *Record) error {
		recs = append(recs, got{r.Topic, r.Partition, r.Offset, string(r.Key), string(r.Value)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []got{
		{"a.b", 2, 7, `{"id":1}`, `{"op":"c","after":{"id":1}}`},
		{"a.b", 0, 8, `[1, "x"]`, ""},
		{"té", 0, -1, "", `"s"`},
	}
	if len(recs) != len(want) {
		t.Fatalf("got %d records %+v, want %d", len(recs), recs, len(want))
	}
	for i := range want {
		if recs[i] != want[i] {
			t.Errorf("record %d: got %+v, want %+v", i, recs[i], want[i])
		}
	}
}

func TestReadJSONLErrors(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{`{"topic":"a","partition":1}`, `line 2: record needs "topic" and "offset"`},
		{`{"offset":1}`, `line 2: record needs "topic" and "offset"`},
		{`{"topic":"a","offset":"1"}`, `"offset" is not a 64-bit integer`},
		{`{"topic":"a","offset":1,"partition":4294967296}`, `"partition" is not a 32-bit integer`},
		{`{"topic":1,"offset":1}`, `"topic" is not a string`},
		{`{"topic":"a","offset":1,"value":{"x":1}`, `line 2: not a replay record`},
		{`{"topic":"a","offset":1} x`, `data after the object`},
		{`[1]`, `expected object`},
	} {
		in := `{"topic":"ok","offset":0}` + "\n" + tc.line + "\n"
		n := 0
		err := ReadJSONL(strings.NewReader(in), "in", func(*Record) error { n++; return nil })
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "in line 2") {
			t.Errorf("%s: got error %v, want one naming line 2 and containing %q", tc.line, err, tc.want)
		}
		if n != 1 {
			t.Errorf("%s: %d records before the error, want 1", tc.line, n)
		}
	}
}

// TestReadJSONLLongLines: lines longer than the reader's buffer are
// assembled whole, between lines read in place, and the last line needs
// no newline.
func TestReadJSONLLongLines(t *testing.T) {
	long := strings.Repeat("x", 3<<19) // 1.5 MiB: more than the 1 MiB buffer
	short := func(off int) string {
		return `{"topic":"t","offset":` + strings.Repeat(" ", off%7) + string(rune('0'+off)) + `,"value":{"s":"v"}}`
	}
	lines := []string{short(0), `{"topic":"t","offset":1,"value":{"s":"` + long + `"}}`, short(2), short(3)}
	var got []string
	err := ReadJSONL(strings.NewReader(strings.Join(lines, "\n")), "in", func(r *Record) error {
		got = append(got, string(r.Value))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`{"s":"v"}`, `{"s":"` + long + `"}`, `{"s":"v"}`, `{"s":"v"}`}
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("record %d: got %.60q (%d bytes), want %.60q (%d bytes)", i, got[i], len(got[i]), want[i], len(want[i]))
		}
	}
}

// BenchmarkReadJSONL: reading replay lines of a Debezium users insert (the
// history's record shape) from memory, without decoding them.
func BenchmarkReadJSONL(b *testing.B) {
	line := `{"topic":"dbserver1.public.users","partition":0,"offset":1,"key":{"id":1},"value":{"before":null,"after":{"id":1,"firstname":"Ada","lastname":"Lovelace","email":"user1.1@example.com","balance":"H9fAUQ==","created_at":"2024-06-04T03:14:06.891968Z","pad_1":"ng2fjjxil190","pad_2":"f4sw2ipjtr7q"},"source":{"version":"3.6.1.Final","connector":"postgresql","name":"dbserver1","ts_ms":1767053452539,"snapshot":"first","db":"shop","sequence":"[null,\"23694712\"]","ts_us":1767053452539275,"ts_ns":1767053452539275000,"schema":"public","table":"users","txId":1274,"lsn":23694712,"xmin":null,"origin":null,"origin_lsn":null},"transaction":null,"op":"r","ts_ms":1767053452539,"ts_us":1767053452539275,"ts_ns":1767053452539275000}}` + "\n"
	in := strings.Repeat(line, 4096)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		if err := ReadJSONL(strings.NewReader(in), "in", func(r *Record) error { n += len(r.Value); return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

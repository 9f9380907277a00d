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

package jsonl_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	json "github.com/goccy/go-json"

	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink/jsonl"
)

func TestFormat(t *testing.T) {
	var buf bytes.Buffer
	s := jsonl.New(&buf, []string{"user_id", "name", "price", "at", "ok", "gone"})
	cs := []row.Change{
		{Op: row.Upsert, Version: 7, PrevVersion: 3,
			ParentKey: []row.Value{row.Int(1)}, ChildKey: []row.Value{row.String("a\"b")},
			Values: []row.Value{row.Int(1), row.String("Egor\n\x01"), row.Decimal("12.50"),
				row.Timestamp(1700000000000000), row.Bool(true), row.Null()}},
		{Op: row.Retract, Version: 9, ParentKey: []row.Value{row.Int(2)},
			Values: []row.Value{row.Int(2), row.Null(), row.Null(), row.Null(), row.Bool(false), row.Null()}},
	}
	if err := s.Write(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Fatal("Write reached the writer before Flush")
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := `{"op":"upsert","version":7,"prev_version":3,"parent_key":[1],"child_key":["a\"b"],"values":{"user_id":1,"name":"Egor\n\u0001","price":"12.50","at":"2023-11-14T22:13:20.000000Z","ok":true,"gone":null}}
{"op":"retract","version":9,"parent_key":[2],"child_key":null,"values":{"user_id":2,"name":null,"price":null,"at":null,"ok":false,"gone":null}}
`
	if buf.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), want)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		if !json.Valid(line) {
			t.Errorf("invalid JSON: %s", line)
		}
	}
}

func TestConcurrentWriters(t *testing.T) {
	var buf bytes.Buffer
	s := jsonl.New(&buf, []string{"v"})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				c := row.Change{Op: row.Upsert, Version: uint64(i), ParentKey: []row.Value{row.Int(int64(g))},
					Values: []row.Value{row.String("x")}}
				s.Write(context.Background(), []row.Change{c})
				if i%10 == 0 {
					s.Flush(context.Background())
				}
			}
		}()
	}
	wg.Wait()
	s.Flush(context.Background())
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 400 {
		t.Fatalf("%d lines, want 400", len(lines))
	}
	for _, l := range lines {
		if !json.Valid(l) {
			t.Fatalf("interleaved line: %s", l)
		}
	}
}

func TestInvalidUTF8(t *testing.T) {
	got := string(row.AppendJSONString(nil, "a\xffb"))
	if got != "\"a\ufffdb\"" || !json.Valid([]byte(got)) {
		t.Fatalf("got %q", got)
	}
}

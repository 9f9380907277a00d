package debezium

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"testing"

	json "github.com/goccy/go-json"

	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/row"
)

// TestRealCaptures decodes every record captured from a real Debezium 3.6
// (testdata/real, see its README) with schemas on and off, and checks a few
// values the README documents.
func TestRealCaptures(t *testing.T) {
	cols := map[string][]string{
		"users":   {"id", "firstname", "balance", "created_at", "birthday", "bio"},
		"domains": {"id", "user_id", "domain_name", "registered_at", "price"},
	}
	for _, file := range []string{"schema-on.jsonl", "schema-off.jsonl"} {
		f, err := os.Open("testdata/real/" + file)
		if os.IsNotExist(err) {
			testenv.Unavailable(t, "%s not present", file)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		decoders := map[string]*Decoder{}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var rec struct {
				Topic  string
				Offset int64
				Key    json.RawMessage
				Value  json.RawMessage
			}
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				t.Fatal(err)
			}
			table := rec.Topic[strings.LastIndexByte(rec.Topic, '.')+1:]
			d := decoders[table]
			if d == nil {
				d = NewDecoder(cols[table], Options{})
				decoders[table] = d
			}
			var ev Event
			ok, err := d.Decode(rec.Key, rec.Value, &ev)
			if err != nil {
				t.Fatalf("%s %s@%d: %v", file, rec.Topic, rec.Offset, err)
			}
			if tomb := bytes.Equal(rec.Value, []byte("null")); ok == tomb {
				t.Fatalf("%s %s@%d: ok=%v for value %.40s", file, rec.Topic, rec.Offset, ok, rec.Value)
			}
			if !ok {
				continue
			}
			if (ev.Op == OpTruncate) != !ev.Key.Present {
				t.Errorf("%s %s@%d: op %v with key present=%v", file, rec.Topic, rec.Offset, ev.Op, ev.Key.Present)
			}
			if ev.Source.Table != table || ev.Source.Sequence == "" {
				t.Errorf("%s %s@%d: source %+v", file, rec.Topic, rec.Offset, ev.Source)
			}
			schemaOn := file == "schema-on.jsonl"
			switch {
			case table == "users" && rec.Offset == 3 && schemaOn:
				if v := ev.After.Values[2]; !v.Equal(row.Decimal("9999999999.99")) {
					t.Errorf("users@3 balance = %v %q", v.Kind, v.Str)
				}
				if v := ev.After.Values[3]; v.Text() != "2024-05-01T00:00:00.123456Z" {
					t.Errorf("users@3 created_at = %s", v.Text())
				}
			case table == "domains" && rec.Offset == 15:
				if ev.After.Values[2].Kind != row.KindUnavailable {
					t.Errorf("domains@15 domain_name = %v, want unavailable", ev.After.Values[2])
				}
			case table == "domains" && rec.Offset == 4 && schemaOn:
				if v := ev.After.Values[3]; v.Text() != "2024-05-02T07:00:00.500000Z" {
					t.Errorf("domains@4 registered_at = %s", v.Text())
				}
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

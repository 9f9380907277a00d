package debezium

import (
	"errors"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

const protoDir = "testdata/protobuf"

// TestProtobufEqualsJSON decodes the Protobuf twins of Debezium 3.6's
// JsonConverter records (testdata/protobuf, written from
// testdata/avro/json.jsonl by cdcgen.ProtobufEncoder: see
// cdcgen's TestProtobufFixtures)
// and requires every record to decode to the same event as the JSON one:
// op, source positions, column types and values in every logical type,
// across the captures' evolving schemas (one schema id per Connect schema).
func TestProtobufEqualsJSON(t *testing.T) {
	want := decodeCapture(t, "testdata/avro/json.jsonl", FormatJSON, nil)
	src := loadSchemas(t, filepath.Join(protoDir, "confluent.schemas.json"))
	got := decodeCapture(t, filepath.Join(protoDir, "confluent.jsonl"), FormatProtobuf, src)
	tables := make([]string, 0, len(want))
	for table := range want {
		tables = append(tables, table)
	}
	sort.Strings(tables)
	n, emptied := 0, 0
	for _, table := range tables {
		// Records whose arrays have null elements have no Protobuf
		// encoding (repeated fields have no nulls): the fixtures lack them.
		w, g := byOffset(want[table]), byOffset(got[table])
		if len(g) < len(w)-3 {
			t.Errorf("%s: %d JSON records, only %d Protobuf records", table, len(w), len(g))
		}
		for off, gl := range g {
			n++
			// Protobuf has no null apart from an empty repeated field:
			// an empty array in an optional array column reads as null.
			wl := emptyArray.ReplaceAllString(w[off], "${1}null")
			emptied += len(emptyArray.FindAllString(w[off], -1))
			if wl != gl {
				t.Errorf("%s record %s:\njson:     %s\nprotobuf: %s", table, off, w[off], gl)
			}
		}
	}
	for id, calls := range src.calls {
		if calls != 1 {
			t.Errorf("%s fetched %d times, want once per decoder", id, calls)
		}
	}
	if len(src.calls) < 8 {
		t.Errorf("only %d schema ids used", len(src.calls))
	}
	t.Logf("%d records equal, %d schema ids, %d empty arrays read as null", n, len(src.calls), emptied)
}

var emptyArray = regexp.MustCompile(`( (?:ai|at|tags|ids|days)=)array:\[\]`)

// TestProtobufGolden renders the decoded Protobuf records into
// testdata/protobuf/confluent.golden (-update rewrites it).
func TestProtobufGolden(t *testing.T) {
	src := loadSchemas(t, filepath.Join(protoDir, "confluent.schemas.json"))
	got := decodeCapture(t, filepath.Join(protoDir, "confluent.jsonl"), FormatProtobuf, src)
	checkGolden(t, got, filepath.Join(protoDir, "confluent.golden"))
}

// TestProtobufBadRecords: an unknown id is a bad record naming the id; a
// body that does not decode, bad message indexes and an Avro schema id are
// bad records; a registry failure is not.
func TestProtobufBadRecords(t *testing.T) {
	src := loadSchemas(t, filepath.Join(protoDir, "confluent.schemas.json"))
	var key, value []byte
	for _, c := range readCaptured(t, filepath.Join(protoDir, "confluent.jsonl")) {
		if tableOf(c.Topic) == "users" && c.ValueB64 != nil {
			key, value = c.bytes(c.KeyB64), c.bytes(c.ValueB64)
			break
		}
	}
	cols := []string{"id", "firstname", "balance"}
	decode := func(v []byte, s SchemaSource) error {
		d := NewDecoder(cols, Options{Format: FormatProtobuf, Schemas: s})
		var ev Event
		_, err := d.DecodeRecord(key, v, nil, &ev)
		return err
	}
	if err := decode(value, src); err != nil {
		t.Fatal(err)
	}
	var de *DecodeError
	unknown := append([]byte{0, 0, 0, 0x30, 0x39}, value[5:]...) // id 12345
	if err := decode(unknown, src); !errors.As(err, &de) || de.Kind != ErrUnknownSchema || de.SchemaID != 12345 || !strings.Contains(err.Error(), "12345") {
		t.Errorf("unknown id: %v", err)
	}
	for _, cut := range []int{len(value) / 2, len(value) - 1} {
		if err := decode(value[:cut], src); !errors.As(err, &de) || de.Kind != ErrMalformed || !strings.Contains(err.Error(), "does not decode") {
			t.Errorf("truncated at %d: %v", cut, err)
		}
	}
	badIdx := append(append([]byte{}, value[:5]...), 2, 14) // message index [7]: no such message
	badIdx = append(badIdx, value[6:]...)
	if err := decode(badIdx, src); !errors.As(err, &de) || !strings.Contains(err.Error(), "message index") {
		t.Errorf("bad message index: %v", err)
	}
	avroSrc := loadSchemas(t, "testdata/avro/confluent.schemas.json")
	if err := decode(value, avroSrc); !errors.As(err, &de) || !strings.Contains(err.Error(), "not PROTOBUF") {
		t.Errorf("an Avro schema: %v", err)
	}
	var se *SourceError
	if err := decode(value, failingSource{errors.New("connection refused")}); !errors.As(err, &se) || errors.As(err, &de) {
		t.Errorf("registry failure: %v, want a *SourceError", err)
	}
}

// byOffset indexes decodeCapture's lines by their "@offset".
func byOffset(lines []string) map[string]string {
	m := map[string]string{}
	for _, l := range lines {
		m[l[:strings.IndexByte(l, ' ')]] = l
	}
	return m
}

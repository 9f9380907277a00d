package debezium

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"

	"github.com/cdcjoin/cdcjoin/row"
)

// captured is one line of the capture tool's files (testdata/avro).
type captured struct {
	Topic     string
	Partition int32
	Offset    int64
	KeyB64    *string `json:"key_b64"`
	ValueB64  *string `json:"value_b64"`
	Headers   []struct {
		Key      string `json:"key"`
		ValueB64 string `json:"value_b64"`
	}
}

func (c *captured) bytes(s *string) []byte {
	if s == nil {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(*s)
	if err != nil {
		panic(err)
	}
	return b
}

func (c *captured) headers() []Header {
	var hs []Header
	for _, h := range c.Headers {
		v, _ := base64.StdEncoding.DecodeString(h.ValueB64)
		hs = append(hs, Header{h.Key, v})
	}
	return hs
}

func readCaptured(t testing.TB, path string) []captured {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []captured
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var c captured
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// fixtureSchemas is a SchemaSource holding the schemas a capture's
// records name, as the registry answered them (testdata/avro/*.schemas.json).
type fixtureSchemas struct {
	byID  map[SchemaID]RegisteredSchema
	calls map[SchemaID]int
}

func loadSchemas(t testing.TB, path string) *fixtureSchemas {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]map[string]struct {
		SchemaType string
		Schema     string
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	fs := &fixtureSchemas{byID: map[SchemaID]RegisteredSchema{}, calls: map[SchemaID]int{}}
	spaces := map[string]IDSpace{"confluent": IDConfluent, "globalIds": IDGlobal, "contentIds": IDContent}
	for space, ids := range m {
		for id, s := range ids {
			n, _ := strconv.ParseInt(id, 10, 64)
			typ := s.SchemaType
			if typ == "" {
				typ = "AVRO"
			}
			fs.byID[SchemaID{spaces[space], n}] = RegisteredSchema{Type: typ, Text: s.Schema}
		}
	}
	return fs
}

func (f *fixtureSchemas) Schema(id SchemaID) (RegisteredSchema, error) {
	f.calls[id]++
	s, ok := f.byID[id]
	if !ok {
		return s, fmt.Errorf("%s: %w", id, ErrNoSuchSchema)
	}
	return s, nil
}

// avroColumns project every column the captured tables ever had.
var avroColumns = map[string][]string{
	"users":         {"id", "firstname", "lastname", "email", "balance", "created_at", "birthday", "bio", "nickname"},
	"domains":       {"id", "user_id", "domain_name", "registered_at", "price"},
	"type_parents":  {"id", "i2", "i4", "i8", "num", "num_free", "f4", "f8", "ok", "txt", "vc", "d", "t", "ts", "tstz", "iv", "u", "j", "jb", "b", "m", "ai", "at"},
	"type_children": {"region", "no", "parent_id", "amount", "born", "tags", "blob", "ids", "days"},
}

func tableOf(topic string) string { return topic[strings.LastIndexByte(topic, '.')+1:] }

// decodeCapture decodes every record of a capture file, per table.
func decodeCapture(t *testing.T, file string, format Format, src SchemaSource) map[string][]string {
	out := map[string][]string{}
	decs := map[string]*Decoder{}
	for _, c := range readCaptured(t, file) {
		table := tableOf(c.Topic)
		cols := avroColumns[table]
		d := decs[table]
		if d == nil {
			d = NewDecoder(cols, Options{Format: format, Schemas: src, KeyColumns: 1})
			decs[table] = d
		}
		var ev Event
		ok, err := d.DecodeRecord(c.bytes(c.KeyB64), c.bytes(c.ValueB64), c.headers(), &ev)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("%s %s@%d: not a *DecodeError: %v", file, c.Topic, c.Offset, err)
			}
		}
		out[table] = append(out[table], fmt.Sprintf("@%d %s", c.Offset, outcomeText(cols, ok, err, &ev)))
	}
	return out
}

// outcomeText renders a decoded record without what differs between two
// connectors of one database (timestamps of the connector, the topic).
func outcomeText(cols []string, ok bool, err error, ev *Event) string {
	var de *DecodeError
	if errors.As(err, &de) {
		// The formats name fields differently (payload.after.x, value.after.x).
		return fmt.Sprintf("error: kind=%s column=%s\n", de.Kind, de.Field[strings.LastIndexByte(de.Field, '.')+1:])
	}
	if err != nil || !ok {
		return render(cols, ok, err, ev)
	}
	e := *ev
	e.TsMs, e.Source.TsMs = 0, 0
	if e.Op == OpRead { // each connector snapshots at its own position
		e.Source.LSN, e.Source.Sequence, e.Source.TxID = 0, "", 0
	}
	return render(cols, ok, err, &e)
}

// TestAvroEqualsJSON decodes the records Debezium 3.6 wrote for the same
// changes (deploy/local/capture-avro-fixtures.sh: schema.sql, fixture-dml,
// types-dml and evolve-dml, which adds, widens and drops columns) through
// JsonConverter and through Apicurio's AvroConverter in each wire format,
// and requires every record to decode to the same event: same op, source
// positions, column types and values, in every logical type.
func TestAvroEqualsJSON(t *testing.T) {
	dir := "testdata/avro"
	if _, err := os.Stat(filepath.Join(dir, "json.jsonl")); err != nil {
		t.Fatalf("captures missing: %v (deploy/local/capture-avro-fixtures.sh writes them)", err)
	}
	want := decodeCapture(t, filepath.Join(dir, "json.jsonl"), FormatJSON, nil)
	for _, wire := range []string{"confluent", "global", "headers"} {
		t.Run(wire, func(t *testing.T) {
			src := loadSchemas(t, filepath.Join(dir, wire+".schemas.json"))
			got := decodeCapture(t, filepath.Join(dir, wire+".jsonl"), FormatAvro, src)
			tables := make([]string, 0, len(want))
			for table := range want {
				tables = append(tables, table)
			}
			sort.Strings(tables)
			n := 0
			for _, table := range tables {
				w, g := want[table], got[table]
				if len(w) != len(g) {
					t.Fatalf("%s: %d JSON records, %d Avro records", table, len(w), len(g))
				}
				for i := range w {
					n++
					if w[i] != g[i] {
						t.Errorf("%s record %d:\njson: %s\navro: %s", table, i, w[i], g[i])
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
			t.Logf("%d records equal, %d schema ids", n, len(src.calls))
		})
	}
}

// TestAvroGolden renders the decoded Avro records of the Confluent
// capture into testdata/avro/confluent.golden (-update rewrites it).
func TestAvroGolden(t *testing.T) {
	dir := "testdata/avro"
	src := loadSchemas(t, filepath.Join(dir, "confluent.schemas.json"))
	got := decodeCapture(t, filepath.Join(dir, "confluent.jsonl"), FormatAvro, src)
	checkGolden(t, got, filepath.Join(dir, "confluent.golden"))
}

// checkGolden renders decodeCapture's records per table into golden
// (-update rewrites it) and compares.
func checkGolden(t *testing.T, got map[string][]string, golden string) {
	var b strings.Builder
	for _, table := range []string{"users", "domains", "type_parents", "type_children"} {
		for _, l := range got[table] {
			fmt.Fprintf(&b, "%s %s", table, l)
		}
	}
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(w) != b.String() {
		t.Errorf("decoded records differ from %s (run with -update and review the diff)", golden)
	}
}

// TestAvroBadRecords: an unknown id is a bad record naming the id; a body
// that does not decode is a bad record; a registry failure is not.
func TestAvroBadRecords(t *testing.T) {
	dir := "testdata/avro"
	src := loadSchemas(t, filepath.Join(dir, "confluent.schemas.json"))
	recs := readCaptured(t, filepath.Join(dir, "confluent.jsonl"))
	var c *captured
	for i := range recs {
		if tableOf(recs[i].Topic) == "users" && recs[i].ValueB64 != nil {
			c = &recs[i]
			break
		}
	}
	cols := []string{"id", "firstname", "balance"}
	value := c.bytes(c.ValueB64)
	decode := func(v []byte, s SchemaSource) error {
		d := NewDecoder(cols, Options{Format: FormatAvro, Schemas: s})
		var ev Event
		_, err := d.DecodeRecord(c.bytes(c.KeyB64), v, nil, &ev)
		return err
	}
	unknown := append([]byte{0, 0, 0, 0x30, 0x39}, value[5:]...) // id 12345
	err := decode(unknown, src)
	var de *DecodeError
	if !errors.As(err, &de) || de.Kind != ErrUnknownSchema || de.SchemaID != 12345 || !strings.Contains(err.Error(), "12345") {
		t.Errorf("unknown id: %v (%+v)", err, de)
	}
	for _, cut := range []int{6, len(value) / 2, len(value) - 1} {
		err := decode(value[:cut], src)
		if !errors.As(err, &de) || de.Kind != ErrMalformed || !strings.Contains(err.Error(), "does not decode") {
			t.Errorf("truncated at %d: %v", cut, err)
		}
	}
	if err := decode(append(append([]byte{}, value...), 1, 2), src); !errors.As(err, &de) {
		t.Errorf("trailing bytes: %v", err)
	}
	if err := decode([]byte(`{"op":"c"}`), src); !errors.As(err, &de) || !strings.Contains(err.Error(), "format: json") {
		t.Errorf("JSON in an Avro topic: %v", err)
	}
	fail := failingSource{errors.New("connection refused")}
	err = decode(value, fail)
	var se *SourceError
	if !errors.As(err, &se) || errors.As(err, &de) {
		t.Errorf("registry failure: %v, want a *SourceError", err)
	}
}

type failingSource struct{ err error }

func (f failingSource) Schema(SchemaID) (RegisteredSchema, error) { return RegisteredSchema{}, f.err }

// TestAvroDecodeAllocs: decoding allocates nothing per record, in Avro and
// in JSON, for the rows of BenchmarkDecodeFormats (the type row has arrays,
// decimals, timestamps, JSON text of structs).
func TestAvroDecodeAllocs(t *testing.T) {
	dir := "testdata/avro"
	for _, c := range decodeFormatsCases {
		for _, f := range decodeFormatsFiles {
			src := loadSchemas(t, filepath.Join(dir, f.schemas))
			key, value, hs := sameRecord(t, dir, f.file, c.table, c.op)
			d := NewDecoder(c.cols, Options{Format: f.format, Schemas: src, KeyColumns: 1})
			var ev Event
			if _, err := d.DecodeRecord(key, value, hs, &ev); err != nil {
				t.Fatal(err)
			}
			if n := testing.AllocsPerRun(1000, func() { d.DecodeRecord(key, value, hs, &ev) }); n > 0.01 {
				t.Errorf("%s/%s: %.2f allocations per record", c.name, f.name, n)
			}
		}
	}
}

// captureRecord returns the first record of table with op in a capture file.
func captureRecord(t testing.TB, file, table string, op string) (key, value []byte, headers []Header) {
	for _, c := range readCaptured(t, file) {
		if tableOf(c.Topic) != table || c.ValueB64 == nil {
			continue
		}
		v := c.bytes(c.ValueB64)
		if !strings.Contains(string(v), `"op":"`+op+`"`) && !avroOp(v, op) {
			continue
		}
		return c.bytes(c.KeyB64), v, c.headers()
	}
	t.Fatalf("%s: no %s record with op %s", file, table, op)
	return nil, nil, nil
}

// sameRecord returns the record of a capture file at the offset of the
// first record of table with op in the JSON capture that the Protobuf
// capture has too (it lacks those with null array elements), so that
// every format decodes the same change.
func sameRecord(t testing.TB, dir, file, table, op string) (key, value []byte, headers []Header) {
	has := map[int64]bool{}
	for _, c := range readCaptured(t, filepath.Join(dir, "../protobuf/confluent.jsonl")) {
		if tableOf(c.Topic) == table {
			has[c.Offset] = true
		}
	}
	var off int64 = -1
	for _, c := range readCaptured(t, filepath.Join(dir, "json.jsonl")) {
		if tableOf(c.Topic) == table && has[c.Offset] && c.ValueB64 != nil && strings.Contains(string(c.bytes(c.ValueB64)), `"op":"`+op+`"`) {
			off = c.Offset
			break
		}
	}
	for _, c := range readCaptured(t, filepath.Join(dir, file)) {
		if tableOf(c.Topic) == table && c.Offset == off {
			return c.bytes(c.KeyB64), c.bytes(c.ValueB64), c.headers()
		}
	}
	t.Fatalf("%s: no %s record at offset %d (op %s)", file, table, off, op)
	return nil, nil, nil
}

// avroOp reports whether an Avro value (any wire format) holds op: its
// op string ("\x02" + op, Avro's length 1) is in the body.
func avroOp(v []byte, op string) bool {
	return len(v) > 0 && v[0] == 0 && strings.Contains(string(v), "\x02"+op+"\x02")
}

// BenchmarkDecodeFormats decodes the same rows (Debezium 3.6's records of
// one change, captured through JsonConverter with schemas and through
// Apicurio's AvroConverter) in both formats: a users update (full before
// image, 8 columns, 3 projected), and the type table's insert (23 columns,
// all projected).
func BenchmarkDecodeFormats(b *testing.B) {
	dir := "testdata/avro"
	for _, c := range decodeFormatsCases {
		for _, f := range decodeFormatsFiles {
			b.Run(c.name+"/"+f.name, func(b *testing.B) {
				src := loadSchemas(b, filepath.Join(dir, f.schemas))
				key, value, hs := sameRecord(b, dir, f.file, c.table, c.op)
				d := NewDecoder(c.cols, Options{Format: f.format, Schemas: src, KeyColumns: 1})
				var ev Event
				if ok, err := d.DecodeRecord(key, value, hs, &ev); !ok || err != nil {
					b.Fatalf("decode: ok=%v err=%v", ok, err)
				}
				b.SetBytes(int64(len(key) + len(value)))
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := processCPU()
				for i := 0; i < b.N; i++ {
					d.DecodeRecord(key, value, hs, &ev)
				}
				// Wall time on a shared machine includes waiting for a
				// core; CPU time (single-threaded, no allocation) does not.
				if cpu := processCPU() - cpu0; cpu > 0 {
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				}
			})
		}
	}
}

// decodeFormatsCases are the rows of BenchmarkDecodeFormats.
var decodeFormatsCases = []struct {
	name, table, op string
	cols            []string
}{
	{"users-update-3cols", "users", "u", []string{"id", "firstname", "balance"}},
	{"types-insert-23cols", "type_parents", "c", avroColumns["type_parents"]},
}

// decodeFormatsFiles are the captures of the same records in each format.
var decodeFormatsFiles = []struct {
	name    string
	file    string
	schemas string
	format  Format
}{
	{"json", "json.jsonl", "confluent.schemas.json", FormatJSON},
	{"avro", "confluent.jsonl", "confluent.schemas.json", FormatAvro},
	{"protobuf", "../protobuf/confluent.jsonl", "../protobuf/confluent.schemas.json", FormatProtobuf},
}

// BenchmarkDecodeHamba decodes the same Avro records with
// github.com/hamba/avro/v2 into generic values (map[string]any: what a
// config-driven projection would use), for comparison with the
// projection decoder (BenchmarkDecodeFormats/*/avro).
func BenchmarkDecodeHamba(b *testing.B) {
	dir := "testdata/avro"
	src := loadSchemas(b, filepath.Join(dir, "confluent.schemas.json"))
	for _, c := range []struct{ name, table, op string }{{"users-update", "users", "u"}, {"types-insert", "type_parents", "c"}} {
		b.Run(c.name, func(b *testing.B) {
			_, value, _ := captureRecord(b, filepath.Join(dir, "confluent.jsonl"), c.table, c.op)
			id, payload, _ := SchemaOf(value, nil, "value")
			s, _ := src.Schema(id)
			schema, err := avro.ParseWithCache(s.Text, "", &avro.SchemaCache{})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var m map[string]any
				if err := avro.Unmarshal(schema, payload, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSchemaChangeMessages: a selected column dropped (or renamed) in the
// source is a bad record naming the column, the type it had and what to
// do, in both formats; a widened column outgrowing a declared type says to
// update the declaration.
func TestSchemaChangeMessages(t *testing.T) {
	dir := "testdata/avro"
	src := loadSchemas(t, filepath.Join(dir, "confluent.schemas.json"))
	for _, f := range []struct {
		file   string
		format Format
	}{{"json.jsonl", FormatJSON}, {"confluent.jsonl", FormatAvro}} {
		d := NewDecoder([]string{"id", "firstname", "email"}, Options{Format: f.format, Schemas: src, KeyColumns: 1})
		var last error
		for _, c := range readCaptured(t, filepath.Join(dir, f.file)) {
			if tableOf(c.Topic) != "users" {
				continue
			}
			var ev Event
			if _, err := d.DecodeRecord(c.bytes(c.KeyB64), c.bytes(c.ValueB64), c.headers(), &ev); err != nil {
				last = err
			}
		}
		var de *DecodeError
		if !errors.As(last, &de) || de.Kind != ErrMissingColumn || !strings.Contains(de.Reason, "column email") ||
			!strings.Contains(de.Reason, "earlier records had it as string") || !strings.Contains(de.Reason, "DROP COLUMN") {
			t.Errorf("%s: after the DROP COLUMN: %v", f.file, last)
		}
	}
	i4 := row.ColumnType{Kind: row.KindInt, Connect: "int32", Optional: true}
	d := NewDecoder([]string{"id", "i4"}, Options{Types: []row.ColumnType{{Kind: row.KindInt, Connect: "int64"}, i4}})
	var ev Event
	_, err := d.Decode(nil, []byte(`{"op":"c","after":{"id":1,"i4":3000000000},"source":{}}`), &ev)
	if err == nil || !strings.Contains(err.Error(), "expected int32, got number 3000000000") || !strings.Contains(err.Error(), "update the declaration") {
		t.Errorf("widened past the declared type: %v", err)
	}
}

package registry

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
)

// mapSource serves the fixtures' schemas as their registry answered them.
type mapSource map[int64]debezium.RegisteredSchema

func (m mapSource) Schema(id debezium.SchemaID) (debezium.RegisteredSchema, error) {
	s, ok := m[id.ID]
	if !ok {
		return s, fmt.Errorf("%s: %w", id, debezium.ErrNoSuchSchema)
	}
	return s, nil
}

// TestRealRegistryProtobuf registers the Protobuf fixtures' .proto files
// (debezium/testdata/protobuf, which import confluent/meta.proto and
// confluent/type/decimal.proto) in a real registry (Apicurio's
// Confluent-compatible API, with the imports as references), rewrites the
// records' schema ids to the ids it assigned, and requires every record
// decoded through the registry to equal the same record decoded with the
// fixtures' schemas.
func TestRealRegistryProtobuf(t *testing.T) {
	url := testenv.Require(t, testenv.RegistryEnv, "schema registry")
	dir := "../debezium/testdata/protobuf"
	b, err := os.ReadFile(dir + "/confluent.schemas.json")
	if err != nil {
		t.Fatal(err)
	}
	var fixture map[string]map[string]struct{ Schema string }
	if err := json.Unmarshal(b, &fixture); err != nil {
		t.Fatal(err)
	}
	c, err := New(&config.SchemaRegistry{URL: url}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	local := mapSource{}
	ids := map[uint32]uint32{}
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	for idText, s := range fixture["confluent"] {
		id, _ := strconv.ParseInt(idText, 10, 64)
		local[id] = debezium.RegisteredSchema{Type: "PROTOBUF", Text: s.Schema}
		imports := map[string]string{}
		for name, text := range debezium.ConfluentProtos() {
			if strings.Contains(s.Schema, `import "`+name+`"`) {
				imports[name] = text
			}
		}
		got, err := c.RegisterProtobuf("cdcjoin-pb-"+stamp+"-"+idText, s.Schema, imports)
		if err != nil {
			t.Fatal(err)
		}
		ids[uint32(id)] = uint32(got)
	}
	reg, err := New(&config.SchemaRegistry{URL: url}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	f, err := os.Open(dir + "/confluent.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cols := map[string][]string{
		"users":         {"id", "firstname", "lastname", "email", "balance", "created_at", "birthday", "bio", "nickname"},
		"domains":       {"id", "user_id", "domain_name", "registered_at", "price"},
		"type_parents":  {"id", "i2", "i4", "i8", "num", "num_free", "f4", "f8", "ok", "txt", "vc", "d", "t", "ts", "tstz", "iv", "u", "j", "jb", "b", "m", "ai", "at"},
		"type_children": {"region", "no", "parent_id", "amount", "born", "tags", "blob", "ids", "days"},
	}
	viaReg, viaLocal := map[string]*debezium.Decoder{}, map[string]*debezium.Decoder{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4<<20)
	n, bad := 0, 0
	for sc.Scan() {
		var rec struct {
			Topic    string
			Offset   int64
			KeyB64   string `json:"key_b64"`
			ValueB64 string `json:"value_b64"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		table := rec.Topic[strings.LastIndexByte(rec.Topic, '.')+1:]
		if viaReg[table] == nil {
			viaReg[table] = debezium.NewDecoder(cols[table], debezium.Options{Format: debezium.FormatProtobuf, Schemas: reg, KeyColumns: 1})
			viaLocal[table] = debezium.NewDecoder(cols[table], debezium.Options{Format: debezium.FormatProtobuf, Schemas: local, KeyColumns: 1})
		}
		key, _ := base64.StdEncoding.DecodeString(rec.KeyB64)
		value, _ := base64.StdEncoding.DecodeString(rec.ValueB64)
		var want, got debezium.Event
		okW, errW := viaLocal[table].DecodeRecord(key, value, nil, &want)
		wantText := eventText(okW, errW, &want)
		for _, part := range [][]byte{key, value} {
			if len(part) >= 5 {
				binary.BigEndian.PutUint32(part[1:5], ids[binary.BigEndian.Uint32(part[1:5])])
			}
		}
		okG, errG := viaReg[table].DecodeRecord(key, value, nil, &got)
		if gotText := eventText(okG, errG, &got); gotText != wantText {
			t.Errorf("%s@%d through the registry:\n%s\nwant\n%s", rec.Topic, rec.Offset, gotText, wantText)
		}
		if errW != nil {
			bad++
		}
		n++
	}
	if n < 60 {
		t.Errorf("only %d records", n)
	}
	t.Logf("%d records (%d bad records, as with the fixtures' schemas), %d schemas registered", n, bad, len(ids))
}

// eventText renders a decoded record for comparison: the error's kind and
// field (its text names the schema id, which differs), the event without
// pointers.
func eventText(ok bool, err error, ev *debezium.Event) string {
	if de, isDE := err.(*debezium.DecodeError); isDE {
		return fmt.Sprintf("error %s %s", de.Kind, de.Field)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%v %v op=%c ts=%d source=%+v before=%+v after=%+v key=%+v types=", ok, err, ev.Op, ev.TsMs, ev.Source, ev.Before, ev.After, ev.Key)
	for _, t := range ev.Types {
		fmt.Fprintf(&b, "%s/%s/%s/%v/%d ", t.Kind, t.Connect, t.Logical, t.Optional, t.Scale)
	}
	return b.String()
}

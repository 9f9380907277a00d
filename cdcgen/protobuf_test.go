package cdcgen

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

var updateFixtures = flag.Bool("update", false, "rewrite ../debezium/testdata/protobuf")

// TestProtobufFixtures re-encodes Debezium 3.6's JsonConverter captures
// (../debezium/testdata/avro/json.jsonl, schemas on) with ProtobufEncoder
// and requires the result to be the committed Protobuf fixtures
// (../debezium/testdata/protobuf) byte for byte (-update rewrites them).
// No Protobuf converter for Kafka Connect resolves from Maven Central
// here, so these stand in for records captured through one. Records with
// a null array element have no Protobuf encoding and are left out.
func TestProtobufFixtures(t *testing.T) {
	dir := "../debezium/testdata/protobuf"
	f, err := os.Open("../debezium/testdata/avro/json.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	enc := NewProtobufEncoder()
	var out bytes.Buffer
	skipped := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var c struct {
			Topic     string
			Partition int32
			Offset    int64
			KeyB64    *string `json:"key_b64"`
			ValueB64  *string `json:"value_b64"`
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		dec := func(s *string) []byte {
			if s == nil {
				return nil
			}
			b, err := base64.StdEncoding.DecodeString(*s)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		r, err := enc.Record(Record{Topic: c.Topic, Partition: c.Partition, Offset: c.Offset, Key: dec(c.KeyB64), Value: dec(c.ValueB64)})
		if errors.Is(err, ErrNoProtobufEncoding) {
			skipped++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		line := map[string]any{"topic": r.Topic, "partition": r.Partition, "offset": r.Offset}
		if r.Key != nil {
			line["key_b64"] = base64.StdEncoding.EncodeToString(r.Key)
		}
		if r.Value != nil {
			line["value_b64"] = base64.StdEncoding.EncodeToString(r.Value)
		}
		b, _ := json.Marshal(line)
		out.Write(append(b, '\n'))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	reg := map[string]map[string]any{"confluent": {}}
	for id, text := range enc.Schemas() {
		reg["confluent"][strconv.FormatInt(id, 10)] = map[string]string{"schemaType": "PROTOBUF", "schema": text}
	}
	rb, _ := json.MarshalIndent(reg, "", " ")
	files := map[string][]byte{"confluent.jsonl": out.Bytes(), "confluent.schemas.json": append(rb, '\n')}
	for name, b := range files {
		path := filepath.Join(dir, name)
		if *updateFixtures {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		old, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(old, b) {
			t.Errorf("%s differs from the re-encoded captures (run with -update and review the diff)", path)
		}
	}
	if skipped != 5 {
		t.Errorf("%d records with null array elements, want the captures' 5", skipped)
	}
	t.Logf("%d schemas, %d records left out (null array elements)", len(enc.Schemas()), skipped)
}

package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/registry"
)

// TestReplayAvroRegistry is the replay input contract for registry
// formats: lines carrying the records' bytes as key_b64/value_b64 (Avro,
// and Protobuf, in the Confluent wire format), resolved through the job's
// schema_registry (a real one: Apicurio, deploy/local/registry.sh). The
// final joins equal the JSON replay's of the same history.
func TestReplayAvroRegistry(t *testing.T) {
	url := testenv.Require(t, testenv.RegistryEnv, "schema registry")
	opts := cdcgen.DefaultOptions(7)
	opts.SchemaMode, opts.Ops = cdcgen.SchemaOn, 2000
	h := generate(t, opts)
	stamp := fmt.Sprintf("%d", time.Now().UnixNano())
	enc := cdcgen.NewAvroEncoder()
	n := 0
	reg, err := registry.New(&config.SchemaRegistry{URL: url}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	enc.Register = func(schema string) (int64, error) {
		n++
		return reg.Register(fmt.Sprintf("replay-%s-%d", stamp, n), schema)
	}
	pbEnc := cdcgen.NewProtobufEncoder()
	pbEnc.Register = func(schema string, imports map[string]string) (int64, error) {
		n++
		return reg.RegisterProtobuf(fmt.Sprintf("replay-pb-%s-%d", stamp, n), schema, imports)
	}
	dir := t.TempDir()
	var jsonIn, avroIn, pbIn bytes.Buffer
	for _, r := range h.Records {
		fmt.Fprintf(&jsonIn, `{"topic":%q,"partition":%d,"offset":%d,"key":%s,"value":%s}`+"\n",
			r.Topic, r.Partition, r.Offset, orNull(r.Key), orNull(r.Value))
		a, err := enc.Record(r)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&avroIn, `{"topic":%q,"partition":%d,"offset":%d,"key_b64":%s,"value_b64":%s}`+"\n",
			r.Topic, r.Partition, r.Offset, b64(a.Key), b64(a.Value))
		p, err := pbEnc.Record(r)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&pbIn, `{"topic":%q,"partition":%d,"offset":%d,"key_b64":%s,"value_b64":%s}`+"\n",
			r.Topic, r.Partition, r.Offset, b64(p.Key), b64(p.Value))
	}
	finals := map[string]string{}
	for _, f := range []struct{ name, extra string }{
		{"json", ""},
		{"avro", "format: avro\nschema_registry: {url: " + url + "}\n"},
		{"protobuf", "format: protobuf\nschema_registry: {url: " + url + "}\n"},
	} {
		cfg := writeFile(t, dir, f.name+".yaml", `name: avro_replay
parent: {topic: `+cdcgen.DefaultParentTopic+`, key: id}
child:  {topic: `+cdcgen.DefaultChildTopic+`, key: id, parent_key: user_id}
join: left
select: parent.id AS user_id, parent.firstname, parent.balance, child.id AS domain_id, child.domain_name, child.price
state: {dir: `+filepath.Join(dir, f.name+"-state")+`}
`+f.extra)
		in := map[string]*bytes.Buffer{"json": &jsonIn, "avro": &avroIn, "protobuf": &pbIn}[f.name]
		path := filepath.Join(dir, f.name+".jsonl")
		if err := os.WriteFile(path, in.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errs := run(t, "replay", "--config", cfg, "--input", path, "--final", "-", "--quiet")
		if code != 0 {
			t.Fatalf("%s replay: exit %d: %s", f.name, code, errs)
		}
		finals[f.name] = out
	}
	if finals["json"] != finals["avro"] || strings.Count(finals["avro"], "\n") < 10 {
		t.Fatalf("the Avro replay's final join differs from JSON's (%d vs %d lines)", strings.Count(finals["avro"], "\n"), strings.Count(finals["json"], "\n"))
	}
	if finals["json"] != finals["protobuf"] {
		t.Fatalf("the Protobuf replay's final join differs from JSON's (%d vs %d lines)", strings.Count(finals["protobuf"], "\n"), strings.Count(finals["json"], "\n"))
	}
	if n < 8 {
		t.Errorf("%d schemas registered", n)
	}
}

func orNull(b []byte) string {
	if b == nil {
		return "null"
	}
	return string(b)
}

func b64(b []byte) string {
	if b == nil {
		return "null"
	}
	return `"` + base64.StdEncoding.EncodeToString(b) + `"`
}

// Command formats writes one seeded CDC history three times as `cdcjoin
// replay` input: JsonConverter records with schemas (json.jsonl) and the
// same records in Avro and in Protobuf through a schema registry
// (avro.jsonl, protobuf.jsonl: key_b64/value_b64, Confluent wire format,
// schemas registered in the registry at --registry, its
// Confluent-compatible API), plus a job config for each, for the
// replay-rate comparison of the formats (bench/README.md, "Avro and JSON").
//
//	go run ./bench/formats --registry http://127.0.0.1:18081/apis/ccompat/v7 --ops 200000 --out DIR
//	/usr/bin/time -v bin/cdcjoin replay --config DIR/json.yaml --input DIR/json.jsonl --quiet
//	/usr/bin/time -v bin/cdcjoin replay --config DIR/avro.yaml --input DIR/avro.jsonl --quiet
//	/usr/bin/time -v bin/cdcjoin replay --config DIR/protobuf.yaml --input DIR/protobuf.jsonl --quiet
package main

import (
	"bufio"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/registry"
)

func main() {
	registry := flag.String("registry", "http://127.0.0.1:18081/apis/ccompat/v7", "schema registry (Confluent-compatible API)")
	ops := flag.Int("ops", 200000, "operations of the history")
	seed := flag.Int64("seed", 1, "history seed")
	out := flag.String("out", "", "output directory (required)")
	flag.Parse()
	if err := run(*registry, *ops, *seed, *out); err != nil {
		fmt.Fprintln(os.Stderr, "formats:", err)
		os.Exit(1)
	}
}

func run(registryURL string, ops int, seed int64, out string) error {
	if out == "" {
		return fmt.Errorf("--out is required")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	o := cdcgen.DefaultOptions(seed)
	o.Ops, o.SchemaMode = ops, cdcgen.SchemaOn
	h, err := cdcgen.Generate(o)
	if err != nil {
		return err
	}
	stamp := time.Now().UnixNano()
	n := 0
	enc := cdcgen.NewAvroEncoder()
	reg, err := registry.New(&config.SchemaRegistry{URL: registryURL}, registry.Options{})
	if err != nil {
		return err
	}
	defer reg.Close()
	enc.Register = func(schema string) (int64, error) {
		n++
		return reg.Register(fmt.Sprintf("bench-%d-%d", stamp, n), schema)
	}
	pbEnc := cdcgen.NewProtobufEncoder()
	pbEnc.Register = func(schema string, imports map[string]string) (int64, error) {
		n++
		return reg.RegisterProtobuf(fmt.Sprintf("bench-pb-%d-%d", stamp, n), schema, imports)
	}
	jf, err := os.Create(filepath.Join(out, "json.jsonl"))
	if err != nil {
		return err
	}
	af, err := os.Create(filepath.Join(out, "avro.jsonl"))
	if err != nil {
		return err
	}
	pf, err := os.Create(filepath.Join(out, "protobuf.jsonl"))
	if err != nil {
		return err
	}
	jw, aw, pw := bufio.NewWriter(jf), bufio.NewWriter(af), bufio.NewWriter(pf)
	if err := cdcgen.WriteJSONL(jw, h.Records); err != nil {
		return err
	}
	b64 := func(b []byte) string {
		if b == nil {
			return "null"
		}
		return `"` + base64.StdEncoding.EncodeToString(b) + `"`
	}
	for _, r := range h.Records {
		a, err := enc.Record(r)
		if err != nil {
			return err
		}
		fmt.Fprintf(aw, `{"topic":%q,"partition":%d,"offset":%d,"key_b64":%s,"value_b64":%s}`+"\n", r.Topic, r.Partition, r.Offset, b64(a.Key), b64(a.Value))
		p, err := pbEnc.Record(r)
		if err != nil {
			return err
		}
		fmt.Fprintf(pw, `{"topic":%q,"partition":%d,"offset":%d,"key_b64":%s,"value_b64":%s}`+"\n", r.Topic, r.Partition, r.Offset, b64(p.Key), b64(p.Value))
	}
	for _, w := range []*bufio.Writer{jw, aw, pw} {
		if err := w.Flush(); err != nil {
			return err
		}
	}
	jf.Close()
	af.Close()
	pf.Close()
	job := `name: formats_%s
parent: {topic: ` + cdcgen.DefaultParentTopic + `, key: id}
child:  {topic: ` + cdcgen.DefaultChildTopic + `, key: id, parent_key: user_id}
select: parent.id AS user_id, parent.firstname, parent.lastname, child.id AS domain_id, child.domain_name
state: {dir: %s}
%s`
	for _, f := range []struct{ name, extra string }{{"json", ""}, {"avro", "format: avro\nschema_registry: {url: " + registryURL + "}\n"},
		{"protobuf", "format: protobuf\nschema_registry: {url: " + registryURL + "}\n"}} {
		y := fmt.Sprintf(job, f.name, filepath.Join(out, f.name+"-state"), f.extra)
		if err := os.WriteFile(filepath.Join(out, f.name+".yaml"), []byte(y), 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("%d records, %d schemas registered, in %s\n", len(h.Records), n, out)
	return nil
}

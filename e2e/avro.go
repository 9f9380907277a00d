package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"

	json "github.com/goccy/go-json"
	"github.com/hamba/avro/v2"
)

// avroReader decodes Debezium Avro values (Confluent wire format) with
// hamba/avro's generic decoder, independently of cdcjoin's decoder, for the
// watcher: op, source.snapshot and source.txId. Schemas are fetched from
// the registry's Confluent-compatible API once per id.
type avroReader struct {
	url     string
	schemas map[uint32]avro.Schema
}

func newAvroReader(url string) *avroReader {
	return &avroReader{url: url, schemas: map[uint32]avro.Schema{}}
}

func (a *avroReader) schema(ctx context.Context, id uint32) (avro.Schema, error) {
	if s := a.schemas[id]; s != nil {
		return s, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/schemas/ids/%d", a.url, id), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("schema %d: %s: %s", id, resp.Status, b)
	}
	var body struct{ Schema string }
	if err := json.Unmarshal(b, &body); err != nil {
		return nil, err
	}
	s, err := avro.ParseWithCache(body.Schema, "", &avro.SchemaCache{})
	if err != nil {
		return nil, err
	}
	a.schemas[id] = s
	return s, nil
}

// payload decodes what the watcher needs of a value.
func (a *avroReader) payload(ctx context.Context, v []byte) (debeziumPayload, error) {
	var p debeziumPayload
	if len(v) < 5 || v[0] != 0 {
		return p, fmt.Errorf("not the Confluent wire format")
	}
	s, err := a.schema(ctx, binary.BigEndian.Uint32(v[1:5]))
	if err != nil {
		return p, err
	}
	var m map[string]any
	if err := avro.Unmarshal(s, v[5:], &m); err != nil {
		return p, err
	}
	p.Op, _ = unionValue(m["op"]).(string)
	if src, ok := unionValue(m["source"]).(map[string]any); ok {
		p.Source.Snapshot = unionValue(src["snapshot"])
		if tx, ok := unionValue(src["txId"]).(int64); ok {
			p.Source.TxID = &tx
		}
	}
	return p, nil
}

// unionValue unwraps hamba's generic union form {"type": value}.
func unionValue(v any) any {
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		for k, x := range m {
			switch k {
			case "string", "long", "int", "boolean":
				return x
			}
			if _, rec := x.(map[string]any); rec {
				return x
			}
		}
	}
	return v
}

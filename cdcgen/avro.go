package cdcgen

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/cdcjoin/cdcjoin/debezium"
)

// AvroEncoder re-encodes JsonConverter records with schemas (SchemaOn) as
// an Avro converter writes them through a schema registry: the Kafka
// Connect schema becomes an Avro schema the way Kafka Connect's AvroData
// maps it ("connect.name", "connect.parameters", "connect.type"; optional
// fields as unions with null; Decimal as bytes with the decimal logical
// type), registered under an id of its own (one per distinct schema), and
// the payload becomes Avro's binary encoding behind the Confluent wire
// format's magic byte and 4-byte id. The same history in both formats must
// decode, and join, identically. It is also the registry: a
// debezium.SchemaSource of the ids it assigned. Safe for concurrent use.
type AvroEncoder struct {
	// Register, if set, registers each new schema (Avro JSON text) in a
	// real registry and returns the id it gave; by default ids count from 1.
	Register func(schema string) (int64, error)

	mu    sync.Mutex
	ids   map[string]int64 // Avro schema text -> id
	texts map[int64]string
	conv  map[string]*avroConv // Connect schema JSON -> its conversion
}

// NewAvroEncoder returns an encoder with no schemas registered.
func NewAvroEncoder() *AvroEncoder {
	return &AvroEncoder{ids: map[string]int64{}, texts: map[int64]string{}, conv: map[string]*avroConv{}}
}

// Schema implements debezium.SchemaSource.
func (e *AvroEncoder) Schema(id debezium.SchemaID) (debezium.RegisteredSchema, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.texts[id.ID]
	if !ok || id.Space != debezium.IDConfluent {
		return debezium.RegisteredSchema{}, fmt.Errorf("%s: %w", id, debezium.ErrNoSuchSchema)
	}
	return debezium.RegisteredSchema{Type: "AVRO", Text: t}, nil
}

// Schemas returns the number of schemas registered.
func (e *AvroEncoder) Schemas() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.texts)
}

// Record returns r with its key and value in Avro (nil stays nil).
func (e *AvroEncoder) Record(r Record) (Record, error) { return encodeRecord(r, e.Encode) }

// encodeRecord returns r with its key and value re-encoded by encode.
func encodeRecord(r Record, encode func([]byte) ([]byte, error)) (Record, error) {
	var err error
	if r.Key, err = encode(r.Key); err != nil {
		return r, fmt.Errorf("key of %s@%d: %w", r.Topic, r.Offset, err)
	}
	if r.Value, err = encode(r.Value); err != nil {
		return r, fmt.Errorf("value of %s@%d: %w", r.Topic, r.Offset, err)
	}
	return r, nil
}

// connectRecord splits a JsonConverter record with a schema into its
// schema and payload; ok=false for a null record or payload.
func connectRecord(b []byte) (schema, payload json.RawMessage, ok bool, err error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil, false, nil
	}
	var env struct {
		Schema  json.RawMessage `json:"schema"`
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(b, &env); err != nil || len(env.Schema) == 0 {
		return nil, nil, false, fmt.Errorf("not a JsonConverter record with a schema: %v", err)
	}
	if string(env.Payload) == "null" {
		return nil, nil, false, nil
	}
	return env.Schema, env.Payload, true, nil
}

// Encode converts one JsonConverter key or value ({"schema":…,"payload":…}
// or null) to the Confluent wire format; nil and JSON null give nil.
func (e *AvroEncoder) Encode(b []byte) ([]byte, error) {
	schema, payload, ok, err := connectRecord(b)
	if !ok {
		return nil, err
	}
	env := struct{ Schema, Payload json.RawMessage }{schema, payload}
	e.mu.Lock()
	c := e.conv[string(env.Schema)]
	if c == nil {
		var s connectSchema
		if err := json.Unmarshal(env.Schema, &s); err != nil {
			e.mu.Unlock()
			return nil, err
		}
		text, err := json.Marshal(avroSchemaOf(&s, map[string]bool{}))
		if err != nil {
			e.mu.Unlock()
			return nil, err
		}
		id, ok := e.ids[string(text)]
		if !ok {
			id = int64(len(e.ids) + 1)
			if e.Register != nil {
				if id, err = e.Register(string(text)); err != nil {
					e.mu.Unlock()
					return nil, fmt.Errorf("register schema: %w", err)
				}
			}
			e.ids[string(text)], e.texts[id] = id, string(text)
		}
		c = &avroConv{schema: &s, id: id}
		e.conv[string(env.Schema)] = c
	}
	e.mu.Unlock()
	dec := json.NewDecoder(bytes.NewReader(env.Payload))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	out := []byte{0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(c.id))
	return appendAvro(out, c.schema, v)
}

type avroConv struct {
	schema *connectSchema
	id     int64
}

// connectSchema is a JsonConverter schema block.
type connectSchema struct {
	Type       string            `json:"type"`
	Optional   bool              `json:"optional"`
	Name       string            `json:"name"`
	Version    int               `json:"version"`
	Parameters map[string]string `json:"parameters"`
	Field      string            `json:"field"`
	Fields     []*connectSchema  `json:"fields"`
	Items      *connectSchema    `json:"items"`
	Keys       *connectSchema    `json:"keys"`
	Values     *connectSchema    `json:"values"`
}

// avroSchemaOf maps a Connect schema to Avro's (as AvroData does).
func avroSchemaOf(s *connectSchema, defined map[string]bool) any {
	t := avroBase(s, defined)
	if s.Optional {
		return []any{"null", t}
	}
	return t
}

func avroBase(s *connectSchema, defined map[string]bool) any {
	m := map[string]any{}
	switch s.Type {
	case "int8", "int16":
		m["type"], m["connect.type"] = "int", s.Type
	case "int32":
		m["type"] = "int"
	case "int64":
		m["type"] = "long"
	case "float", "float32":
		m["type"] = "float"
	case "double", "float64":
		m["type"] = "double"
	case "boolean", "string", "bytes":
		m["type"] = s.Type
	case "array":
		m["type"], m["items"] = "array", avroSchemaOf(s.Items, defined)
	case "map":
		m["type"], m["values"] = "map", avroSchemaOf(s.Values, defined)
	case "struct":
		name := s.Name
		if name == "" {
			name = "ConnectDefault" + strconv.Itoa(len(defined)+1)
		}
		if defined[name] {
			return name
		}
		defined[name] = true
		var fields []any
		for _, f := range s.Fields {
			af := map[string]any{"name": f.Field, "type": avroSchemaOf(f, defined)}
			if f.Optional {
				af["default"] = nil
			}
			fields = append(fields, af)
		}
		m["type"], m["name"], m["fields"] = "record", name, fields
	}
	if s.Name != "" {
		m["connect.name"] = s.Name
	}
	if s.Version != 0 {
		m["connect.version"] = s.Version
	}
	if len(s.Parameters) > 0 {
		m["connect.parameters"] = s.Parameters
	}
	if s.Name == "org.apache.kafka.connect.data.Decimal" {
		sc, _ := strconv.Atoi(s.Parameters["scale"])
		p, _ := strconv.Atoi(s.Parameters["connect.decimal.precision"])
		if p == 0 {
			p = 64
		}
		m["logicalType"], m["scale"], m["precision"] = "decimal", sc, p
	}
	return m
}

// appendAvro appends value v (decoded JSON, numbers as json.Number) of
// Connect schema s in Avro's binary encoding.
func appendAvro(b []byte, s *connectSchema, v any) ([]byte, error) {
	if s.Optional {
		if v == nil {
			return append(b, 0), nil // branch 0: null
		}
		b = append(b, 2) // branch 1 (zigzag)
	} else if v == nil {
		return nil, fmt.Errorf("null in the required field %q", s.Field)
	}
	switch s.Type {
	case "int8", "int16", "int32", "int64":
		n, ok := v.(json.Number)
		if !ok {
			return nil, fmt.Errorf("field %q: %v is not a number", s.Field, v)
		}
		i, err := n.Int64()
		if err != nil {
			return nil, err
		}
		return binary.AppendVarint(b, i), nil
	case "float", "float32", "double", "float64":
		var f float64
		switch x := v.(type) {
		case json.Number:
			var err error
			if f, err = strconv.ParseFloat(string(x), 64); err != nil {
				return nil, err
			}
		case string:
			f, _ = strconv.ParseFloat(map[string]string{"NaN": "NaN", "Infinity": "+Inf", "-Infinity": "-Inf"}[x], 64)
		}
		if s.Type == "float" || s.Type == "float32" {
			return binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(f))), nil
		}
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(f)), nil
	case "boolean":
		if v == true {
			return append(b, 1), nil
		}
		return append(b, 0), nil
	case "string":
		str, _ := v.(string)
		b = binary.AppendVarint(b, int64(len(str)))
		return append(b, str...), nil
	case "bytes":
		str, _ := v.(string)
		raw, err := base64.StdEncoding.DecodeString(str)
		if err != nil {
			return nil, err
		}
		b = binary.AppendVarint(b, int64(len(raw)))
		return append(b, raw...), nil
	case "array":
		items, _ := v.([]any)
		if len(items) > 0 {
			b = binary.AppendVarint(b, int64(len(items)))
			for _, it := range items {
				var err error
				if b, err = appendAvro(b, s.Items, it); err != nil {
					return nil, err
				}
			}
		}
		return append(b, 0), nil
	case "map":
		m, _ := v.(map[string]any)
		if len(m) > 0 {
			b = binary.AppendVarint(b, int64(len(m)))
			for k, it := range m {
				b = binary.AppendVarint(b, int64(len(k)))
				b = append(b, k...)
				var err error
				if b, err = appendAvro(b, s.Values, it); err != nil {
					return nil, err
				}
			}
		}
		return append(b, 0), nil
	case "struct":
		m, _ := v.(map[string]any)
		for _, f := range s.Fields {
			var err error
			if b, err = appendAvro(b, f, m[f.Field]); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	return nil, fmt.Errorf("field %q: Connect type %q", s.Field, s.Type)
}

package debezium

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The Protobuf fixtures (testdata/protobuf) are Debezium 3.6's records of
// testdata/avro/json.jsonl (captured through JsonConverter with schemas:
// the Connect schema and value of every record) written as Confluent's
// ProtobufConverter writes a Connect schema and value (see
// protobufschema.go for the mapping), because no Protobuf converter for
// Kafka Connect resolves from Maven Central here: each distinct Connect
// schema becomes a .proto file with a schema id, each value a dynamic
// message (google.golang.org/protobuf/types/dynamicpb) in the Confluent
// wire format (magic byte, 4-byte id, message indexes). -update rewrites
// them.

// connectJSON is a JsonConverter schema.
type connectJSON struct {
	Type       string            `json:"type"`
	Name       string            `json:"name"`
	Optional   bool              `json:"optional"`
	Field      string            `json:"field"`
	Fields     []*connectJSON    `json:"fields"`
	Items      *connectJSON      `json:"items"`
	Keys       *connectJSON      `json:"keys"`
	Values     *connectJSON      `json:"values"`
	Parameters map[string]string `json:"parameters"`
}

// protoWriter turns Connect schemas into .proto files.
type protoWriter struct {
	b       strings.Builder
	names   map[string]string // Connect struct name → message name
	pending []*connectJSON
	decimal bool
	n       int
}

// protoFile returns the .proto text of a Connect struct schema: one
// top-level message, the nested structs as messages inside it.
func protoFile(root *connectJSON) string {
	w := &protoWriter{names: map[string]string{}}
	top := w.messageName(root)
	w.pending = w.pending[:0]
	var body strings.Builder
	w.message(&body, root, top, "")
	head := "syntax = \"proto3\";\npackage " + protoPackage(root.Name) + ";\nimport \"confluent/meta.proto\";\n"
	if w.decimal {
		head += "import \"confluent/type/decimal.proto\";\n"
	}
	return head + "\n" + body.String()
}

func protoPackage(name string) string {
	parts := strings.Split(name, ".")
	if len(parts) > 1 {
		parts = parts[:len(parts)-1]
	}
	for i, p := range parts {
		parts[i] = strings.Map(func(r rune) rune {
			if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
				return r
			}
			return '_'
		}, p)
	}
	return strings.Join(parts, ".")
}

func (w *protoWriter) messageName(s *connectJSON) string {
	key := s.Name
	if key == "" {
		w.n++
		key = "Struct" + strconv.Itoa(w.n)
	}
	if n, ok := w.names[key]; ok {
		return n
	}
	n := key[strings.LastIndexByte(key, '.')+1:]
	for _, taken := range w.names {
		if taken == n {
			n += strconv.Itoa(len(w.names))
		}
	}
	w.names[key] = n
	w.pending = append(w.pending, s)
	return n
}

// message writes message name for struct s (its nested structs inside).
func (w *protoWriter) message(b *strings.Builder, s *connectJSON, name, indent string) {
	fmt.Fprintf(b, "%smessage %s {\n", indent, name)
	start := len(w.pending)
	var fields strings.Builder
	for i, f := range s.Fields {
		w.field(&fields, f, i+1, indent+"  ")
	}
	nested := append([]*connectJSON(nil), w.pending[start:]...)
	w.pending = w.pending[:start]
	for _, n := range nested {
		w.message(b, n, w.names[nameKey(n)], indent+"  ")
	}
	b.WriteString(fields.String())
	b.WriteString(indent + "}\n")
}

func nameKey(s *connectJSON) string { return s.Name }

// field writes one field.
func (w *protoWriter) field(b *strings.Builder, f *connectJSON, num int, indent string) {
	label := ""
	s := f
	params := map[string]string{}
	switch f.Type {
	case "array":
		label, s = "repeated ", f.Items
		if f.Optional {
			params["connect.optional"] = "true"
		}
	case "map":
		t := "map<" + w.scalar(f.Keys, params) + ", " + w.valueType(f.Values, map[string]string{}) + ">"
		fmt.Fprintf(b, "%s%s %s = %d;\n", indent, t, f.Field, num)
		return
	}
	t := w.valueType(s, params)
	if label == "" && f.Optional && !strings.Contains(t, ".") && w.isScalar(s) {
		label = "optional "
	}
	fmt.Fprintf(b, "%s%s%s %s = %d%s;\n", indent, label, t, f.Field, num, metaOption(params))
}

func (w *protoWriter) isScalar(s *connectJSON) bool {
	return s.Type != "struct" && !(s.Name == logicalDecimal && s.Type == "bytes")
}

// valueType is the Protobuf type of a value of Connect schema s; params
// gets the metadata it needs.
func (w *protoWriter) valueType(s *connectJSON, params map[string]string) string {
	if s.Name != "" && s.Type != "struct" || s.Type == "struct" && s.Name == logicalVarDecimal {
		params["connect.name"] = s.Name
	}
	for k, v := range s.Parameters {
		params[k] = v
	}
	switch {
	case s.Type == "struct":
		if s.Name == "" {
			s.Name = "Struct"
		}
		return w.messageName(s)
	case s.Name == logicalDecimal && s.Type == "bytes":
		w.decimal = true
		delete(params, "connect.name")
		return "confluent.type.Decimal"
	}
	return w.scalar(s, params)
}

func (w *protoWriter) scalar(s *connectJSON, params map[string]string) string {
	switch s.Type {
	case "int8", "int16":
		params["connect.type"] = s.Type
		return "int32"
	case "int32":
		return "int32"
	case "int64":
		return "int64"
	case "float", "float32":
		return "float"
	case "double", "float64":
		return "double"
	case "boolean":
		return "bool"
	case "string":
		return "string"
	case "bytes":
		return "bytes"
	}
	panic("connect type " + s.Type)
}

func metaOption(params map[string]string) string {
	if len(params) == 0 {
		return ""
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(" [(confluent.field_meta) = { params: [")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "{key: %s, value: %s}", strconv.Quote(k), strconv.Quote(params[k]))
	}
	b.WriteString("] }]")
	return b.String()
}

// setMessage fills m from a JsonConverter payload of schema s.
func setMessage(m *dynamicpb.Message, s *connectJSON, v map[string]any) error {
	fds := m.Descriptor().Fields()
	for _, f := range s.Fields {
		x, ok := v[f.Field]
		if !ok || x == nil {
			continue
		}
		fd := fds.ByName(protoreflect.Name(f.Field))
		if fd == nil {
			return fmt.Errorf("no field %s", f.Field)
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for _, e := range x.([]any) {
				if e == nil {
					return fmt.Errorf("field %s: a null array element has no Protobuf encoding", f.Field)
				}
				pv, err := protoValue(m, fd, f.Items, e, l.NewElement)
				if err != nil {
					return err
				}
				l.Append(pv)
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for k, e := range x.(map[string]any) {
				if e == nil {
					return fmt.Errorf("field %s: a null map value", f.Field)
				}
				pv, err := protoValue(m, fd.MapValue(), f.Values, e, mp.NewValue)
				if err != nil {
					return err
				}
				mp.Set(protoreflect.ValueOfString(k).MapKey(), pv)
			}
		default:
			pv, err := protoValue(m, fd, f, x, func() protoreflect.Value { return m.NewField(fd) })
			if err == nil && !pv.IsValid() {
				err = fmt.Errorf("no value")
			}
			if err != nil {
				return fmt.Errorf("field %s: %w", f.Field, err)
			}
			m.Set(fd, pv)
		}
	}
	return nil
}

func protoValue(m *dynamicpb.Message, fd protoreflect.FieldDescriptor, s *connectJSON, x any, newMsg func() protoreflect.Value) (protoreflect.Value, error) {
	num := func() json.Number {
		if s, ok := x.(string); ok { // JsonConverter writes non-finite floats as strings
			return json.Number(s)
		}
		return x.(json.Number)
	}
	switch fd.Kind() {
	case protoreflect.Int32Kind:
		n, err := num().Int64()
		return protoreflect.ValueOfInt32(int32(n)), err
	case protoreflect.Int64Kind:
		n, err := num().Int64()
		return protoreflect.ValueOfInt64(n), err
	case protoreflect.FloatKind:
		f, err := strconv.ParseFloat(string(num()), 32)
		return protoreflect.ValueOfFloat32(float32(f)), err
	case protoreflect.DoubleKind:
		f, err := num().Float64()
		return protoreflect.ValueOfFloat64(f), err
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(x.(bool)), nil
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(x.(string)), nil
	case protoreflect.BytesKind:
		b, err := base64.StdEncoding.DecodeString(x.(string))
		return protoreflect.ValueOfBytes(b), err
	case protoreflect.MessageKind:
		v := newMsg()
		dm := v.Message().(*dynamicpb.Message)
		if fd.Message().FullName() == protoDecimalName {
			b, err := base64.StdEncoding.DecodeString(x.(string))
			if err != nil {
				return v, err
			}
			fs := fd.Message().Fields()
			dm.Set(fs.ByName("value"), protoreflect.ValueOfBytes(b))
			p, _ := strconv.Atoi(s.Parameters[schemaParamPrecision])
			sc, _ := strconv.Atoi(s.Parameters[schemaParamScale])
			dm.Set(fs.ByName("precision"), protoreflect.ValueOfUint32(uint32(p)))
			dm.Set(fs.ByName("scale"), protoreflect.ValueOfInt32(int32(sc)))
			return v, nil
		}
		return v, setMessage(dm, s, x.(map[string]any))
	}
	return protoreflect.Value{}, fmt.Errorf("kind %s", fd.Kind())
}

// protoRecord re-encodes a JsonConverter record (schemas on) as
// Protobuf: its schema's .proto text and the wire-format bytes (nil for a
// null payload).
func protoRecord(jsonRecord []byte, ids map[string]int, schemas map[int]string) ([]byte, error) {
	if len(jsonRecord) == 0 {
		return nil, nil
	}
	var env struct {
		Schema  *connectJSON
		Payload json.RawMessage
	}
	if err := json.Unmarshal(jsonRecord, &env); err != nil {
		return nil, err
	}
	if env.Schema == nil || env.Schema.Type != "struct" {
		return nil, fmt.Errorf("not a struct schema")
	}
	text := protoFile(env.Schema)
	id, ok := ids[text]
	if !ok {
		id = len(ids) + 1
		ids[text], schemas[id] = id, text
	}
	fd, err := compileProto(RegisteredSchema{Type: "PROTOBUF", Text: text})
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, text)
	}
	md := fd.Messages().Get(0)
	dec := json.NewDecoder(bytes.NewReader(env.Payload))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if v == nil {
		return nil, nil
	}
	m := dynamicpb.NewMessage(md)
	if err := setMessage(m, env.Schema, v); err != nil {
		return nil, err
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	out := []byte{0, 0, 0, 0, 0, 0} // magic, id, message indexes [0]
	binary.BigEndian.PutUint32(out[1:5], uint32(id))
	return append(out, body...), nil
}

// writeProtoFixtures writes testdata/protobuf from testdata/avro/json.jsonl.
func writeProtoFixtures(t *testing.T, dir string) {
	ids, schemas := map[string]int{}, map[int]string{}
	var out bytes.Buffer
	skipped := 0
	for _, c := range readCaptured(t, "testdata/avro/json.jsonl") {
		k, err := protoRecord(c.bytes(c.KeyB64), ids, schemas)
		if err != nil {
			t.Fatalf("%s@%d key: %v", c.Topic, c.Offset, err)
		}
		v, err := protoRecord(c.bytes(c.ValueB64), ids, schemas)
		if err != nil {
			if strings.Contains(err.Error(), "no Protobuf encoding") {
				skipped++
				t.Logf("%s@%d: %v: not in the fixtures", c.Topic, c.Offset, err)
				continue
			}
			t.Fatalf("%s@%d value: %v", c.Topic, c.Offset, err)
		}
		line := map[string]any{"topic": c.Topic, "partition": c.Partition, "offset": c.Offset}
		if k != nil {
			line["key_b64"] = base64.StdEncoding.EncodeToString(k)
		}
		if v != nil {
			line["value_b64"] = base64.StdEncoding.EncodeToString(v)
		}
		b, _ := json.Marshal(line)
		out.Write(append(b, '\n'))
	}
	reg := map[string]map[string]any{"confluent": {}}
	for id, text := range schemas {
		reg["confluent"][strconv.Itoa(id)] = map[string]string{"schemaType": "PROTOBUF", "schema": text}
	}
	rb, _ := json.MarshalIndent(reg, "", " ")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "confluent.jsonl"), out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "confluent.schemas.json"), append(rb, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s: %d schemas, %d records skipped", dir, len(schemas), skipped)
}

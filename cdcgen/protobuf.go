package cdcgen

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/cdcjoin/cdcjoin/debezium"
)

// ProtobufEncoder re-encodes JsonConverter records with schemas (SchemaOn)
// as Confluent's ProtobufConverter writes a Connect schema and value
// through a schema registry (the mapping debezium's Protobuf decoder reads,
// see debezium/protobufschema.go): each distinct Connect schema becomes a
// .proto file (one top-level message, nested structs as nested messages,
// optional primitives as proto3 optional, Decimal as
// confluent.type.Decimal, Connect names and parameters in
// (confluent.field_meta).params) under an id of its own, each value a
// dynamic message (dynamicpb) behind the Confluent wire format's magic
// byte, 4-byte id and message indexes [0]. A null array element has no
// Protobuf encoding: such a value fails with ErrNoProtobufEncoding. It is
// also the registry (a debezium.SchemaSource). Safe for concurrent use.
type ProtobufEncoder struct {
	// Register, if set, registers each new .proto file (with the Confluent
	// files it imports) in a real registry and returns the id it gave; by
	// default ids count from 1.
	Register func(schema string, imports map[string]string) (int64, error)

	mu    sync.Mutex
	ids   map[string]int64 // .proto text -> id
	texts map[int64]string
	conv  map[string]*protoConv // Connect schema JSON -> its conversion
}

// ErrNoProtobufEncoding is a value Protobuf cannot carry (a null array
// element: repeated fields have no nulls).
var ErrNoProtobufEncoding = errors.New("no Protobuf encoding")

type protoConv struct {
	schema *connectSchema
	md     protoreflect.MessageDescriptor
	id     int64
}

// NewProtobufEncoder returns an encoder with no schemas registered.
func NewProtobufEncoder() *ProtobufEncoder {
	return &ProtobufEncoder{ids: map[string]int64{}, texts: map[int64]string{}, conv: map[string]*protoConv{}}
}

// Schema implements debezium.SchemaSource.
func (e *ProtobufEncoder) Schema(id debezium.SchemaID) (debezium.RegisteredSchema, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.texts[id.ID]
	if !ok || id.Space != debezium.IDConfluent {
		return debezium.RegisteredSchema{}, fmt.Errorf("%s: %w", id, debezium.ErrNoSuchSchema)
	}
	return debezium.RegisteredSchema{Type: "PROTOBUF", Text: t}, nil
}

// Schemas returns the registered .proto files by id.
func (e *ProtobufEncoder) Schemas() map[int64]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[int64]string, len(e.texts))
	for id, t := range e.texts {
		out[id] = t
	}
	return out
}

// Record returns r with its key and value in Protobuf (nil stays nil).
func (e *ProtobufEncoder) Record(r Record) (Record, error) { return encodeRecord(r, e.Encode) }

// Encode converts one JsonConverter key or value ({"schema":…,"payload":…}
// or null) to the Confluent wire format; nil and JSON null give nil.
func (e *ProtobufEncoder) Encode(b []byte) ([]byte, error) {
	schema, payload, ok, err := connectRecord(b)
	if !ok {
		return nil, err
	}
	env := struct{ Schema, Payload json.RawMessage }{schema, payload}
	c, err := e.convOf(env.Schema)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(env.Payload))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	m := dynamicpb.NewMessage(c.md)
	if err := setMessage(m, c.schema, v); err != nil {
		return nil, err
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	out := []byte{0, 0, 0, 0, 0, 0} // magic, id, message indexes [0]
	binary.BigEndian.PutUint32(out[1:5], uint32(c.id))
	return append(out, body...), nil
}

func (e *ProtobufEncoder) convOf(schema json.RawMessage) (*protoConv, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.conv[string(schema)]; c != nil {
		return c, nil
	}
	var s connectSchema
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, err
	}
	if s.Type != "struct" {
		return nil, fmt.Errorf("not a struct schema")
	}
	text := protoFile(&s)
	files := debezium.ConfluentProtos()
	files["schema.proto"] = text
	comp := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(files)})}
	fds, err := comp.Compile(context.Background(), "schema.proto")
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, text)
	}
	id, ok := e.ids[text]
	if !ok {
		id = int64(len(e.ids) + 1)
		if e.Register != nil {
			imports := map[string]string{}
			for name, t := range debezium.ConfluentProtos() {
				if strings.Contains(text, `import "`+name+`"`) {
					imports[name] = t
				}
			}
			if id, err = e.Register(text, imports); err != nil {
				return nil, fmt.Errorf("register schema: %w", err)
			}
		}
		e.ids[text], e.texts[id] = id, text
	}
	c := &protoConv{schema: &s, md: fds[0].Messages().Get(0), id: id}
	e.conv[string(schema)] = c
	return c, nil
}

// protoWriter turns Connect schemas into .proto files.
type protoWriter struct {
	b       strings.Builder
	names   map[string]string // Connect struct name → message name
	pending []*connectSchema
	decimal bool
	n       int
}

// protoFile returns the .proto text of a Connect struct schema: one
// top-level message, the nested structs as messages inside it.
func protoFile(root *connectSchema) string {
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

func (w *protoWriter) messageName(s *connectSchema) string {
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
func (w *protoWriter) message(b *strings.Builder, s *connectSchema, name, indent string) {
	fmt.Fprintf(b, "%smessage %s {\n", indent, name)
	start := len(w.pending)
	var fields strings.Builder
	for i, f := range s.Fields {
		w.field(&fields, f, i+1, indent+"  ")
	}
	nested := append([]*connectSchema(nil), w.pending[start:]...)
	w.pending = w.pending[:start]
	for _, n := range nested {
		w.message(b, n, w.names[n.Name], indent+"  ")
	}
	b.WriteString(fields.String())
	b.WriteString(indent + "}\n")
}

// field writes one field.
func (w *protoWriter) field(b *strings.Builder, f *connectSchema, num int, indent string) {
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

func (w *protoWriter) isScalar(s *connectSchema) bool {
	return s.Type != "struct" && !(s.Name == "org.apache.kafka.connect.data.Decimal" && s.Type == "bytes")
}

// valueType is the Protobuf type of a value of Connect schema s; params
// gets the metadata it needs.
func (w *protoWriter) valueType(s *connectSchema, params map[string]string) string {
	if s.Name != "" && s.Type != "struct" || s.Type == "struct" && s.Name == "io.debezium.data.VariableScaleDecimal" {
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
	case s.Name == "org.apache.kafka.connect.data.Decimal" && s.Type == "bytes":
		w.decimal = true
		delete(params, "connect.name")
		return "confluent.type.Decimal"
	}
	return w.scalar(s, params)
}

func (w *protoWriter) scalar(s *connectSchema, params map[string]string) string {
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
func setMessage(m *dynamicpb.Message, s *connectSchema, v map[string]any) error {
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
					return fmt.Errorf("field %s: a null array element: %w", f.Field, ErrNoProtobufEncoding)
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
					return fmt.Errorf("field %s: a null map value: %w", f.Field, ErrNoProtobufEncoding)
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

func protoValue(m *dynamicpb.Message, fd protoreflect.FieldDescriptor, s *connectSchema, x any, newMsg func() protoreflect.Value) (protoreflect.Value, error) {
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
		if fd.Message().FullName() == "confluent.type.Decimal" {
			b, err := base64.StdEncoding.DecodeString(x.(string))
			if err != nil {
				return v, err
			}
			fs := fd.Message().Fields()
			dm.Set(fs.ByName("value"), protoreflect.ValueOfBytes(b))
			p, _ := strconv.Atoi(s.Parameters["connect.decimal.precision"])
			sc, _ := strconv.Atoi(s.Parameters["scale"])
			dm.Set(fs.ByName("precision"), protoreflect.ValueOfUint32(uint32(p)))
			dm.Set(fs.ByName("scale"), protoreflect.ValueOfInt32(int32(sc)))
			return v, nil
		}
		return v, setMessage(dm, s, x.(map[string]any))
	}
	return protoreflect.Value{}, fmt.Errorf("kind %s", fd.Kind())
}

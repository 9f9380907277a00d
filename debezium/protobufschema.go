package debezium

import (
	"context"
	"fmt"
	"strings"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Protobuf schemas. A registry holds a .proto file (and the files it
// imports, as references); a record names the file by id and the message
// in it by its message indexes. The file is compiled once per id
// (github.com/bufbuild/protocompile) into descriptors, which are read back
// as the Kafka Connect schema they stand for, as Confluent's
// ProtobufConverter (ProtobufData) maps Connect schemas to Protobuf:
//   - a struct is a message; a field with presence (proto3 `optional`, a
//     message) is optional; google.protobuf.*Value wrappers are optional
//     primitives;
//   - int32/sint32/sfixed32 are int32 (int8/int16 with the field option
//     (confluent.field_meta).params["connect.type"]), the other integers
//     int64, float float32, double float64, enums strings;
//   - repeated is an array, map<K,V> a map, confluent.type.Decimal a Decimal;
//   - (confluent.field_meta).params carry the Connect schema's name
//     ("connect.name", e.g. io.debezium.time.MicroTimestamp) and its
//     parameters (e.g. "scale"), as connect.name/connect.parameters do in
//     Avro.

// ConfluentProtos returns the files Confluent's converter imports in the
// schemas it writes (confluent/meta.proto, confluent/type/decimal.proto) by
// import name; the decoder uses them when the registry does not return
// them as references.
func ConfluentProtos() map[string]string {
	return map[string]string{
		"confluent/meta.proto": `syntax = "proto3";
package confluent;
import "google/protobuf/descriptor.proto";
message Meta { string doc = 1; map<string, string> params = 2; repeated string tags = 3; }
extend google.protobuf.FileOptions { Meta file_meta = 1088; }
extend google.protobuf.MessageOptions { Meta message_meta = 1088; }
extend google.protobuf.FieldOptions { Meta field_meta = 1088; }
extend google.protobuf.EnumOptions { Meta enum_meta = 1088; }
extend google.protobuf.EnumValueOptions { Meta enum_value_meta = 1088; }
`,
		"confluent/type/decimal.proto": `syntax = "proto3";
package confluent.type;
message Decimal { bytes value = 1; uint32 precision = 2; int32 scale = 3; }
`,
	}
}

const (
	protoFieldMeta   = 1088 // the extension number of confluent.field_meta
	protoDecimalName = "confluent.type.Decimal"
	protoRootFile    = "cdcjoin-registry-schema.proto"
)

// compileProto compiles a registered .proto file and its references.
func compileProto(s RegisteredSchema) (protoreflect.FileDescriptor, error) {
	files := map[string]string{protoRootFile: s.Text}
	for k, v := range ConfluentProtos() {
		files[k] = v
	}
	for k, v := range s.Refs {
		files[k] = v
	}
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(files),
		}),
	}
	fs, err := c.Compile(context.Background(), protoRootFile)
	if err != nil {
		return nil, err
	}
	return fs[0], nil
}

// protoMessage returns the message a record's message indexes name.
func protoMessage(fd protoreflect.FileDescriptor, idx []int32) (protoreflect.MessageDescriptor, error) {
	if len(idx) == 0 {
		idx = []int32{0}
	}
	ms := fd.Messages()
	var m protoreflect.MessageDescriptor
	for _, i := range idx {
		if i < 0 || int(i) >= ms.Len() {
			return nil, fmt.Errorf("message index %v: the schema has no such message", idx)
		}
		m = ms.Get(int(i))
		ms = m.Messages()
	}
	return m, nil
}

// pbKind is how a Protobuf field's value is read.
type pbKind uint8

const (
	pbVarint   pbKind = iota // int32/int64/uint32/uint64 (int32 sign-extended)
	pbInt32                  // int32: a varint read as a 32-bit number
	pbSint                   // sint32/sint64: zigzag
	pbBool                   //
	pbEnum                   // a varint naming a symbol
	pbFixed32                // fixed32
	pbSfixed32               //
	pbFixed64                // fixed64/sfixed64
	pbFloat                  //
	pbDouble                 //
	pbString                 //
	pbBytes                  //
	pbMessage                // a nested message (struct, map entry, wrapper, Decimal)
)

// pbType is a field's type, as the decoder reads it.
type pbType struct {
	kind    pbKind
	msg     *pbMsg   // pbMessage
	symbols []string // pbEnum, by number (numbers 0..n)
	enumMap map[int32]string
	list    bool // repeated (not a map)
	// optional: a repeated field whose absence is null (the Connect
	// array is optional), else an empty array
	optional bool
	mapOf    bool // a map: msg is its entry (key 1, value 2)
	wrapper  bool // a google.protobuf.*Value: the value is field 1 of msg
	decimal  bool // confluent.type.Decimal
	// presence: the field tells absent from zero (proto3 optional,
	// messages): an absent field is null.
	presence bool
}

// pbField is a message field.
type pbField struct {
	name string
	num  protowire.Number
	t    *pbType
}

// pbMsg is a message: its fields in declaration order and by number.
type pbMsg struct {
	name   string
	fields []pbField
	byNum  []int16 // field number → index+1 (0: unknown), numbers below len
	more   map[protowire.Number]int
}

// field returns the index of field number n, -1 when the message has none.
func (m *pbMsg) field(n protowire.Number) int {
	if int(n) < len(m.byNum) {
		return int(m.byNum[n]) - 1
	}
	if i, ok := m.more[n]; ok {
		return i
	}
	return -1
}

type pbBuilder struct {
	msgs    map[protoreflect.FullName]*pbMsg
	connect map[protoreflect.FullName]*schemaNode
}

// parseProto reads a message descriptor as the decoder's tree and the
// Kafka Connect schema it stands for.
func parseProto(md protoreflect.MessageDescriptor) (*pbMsg, *schemaNode, error) {
	b := pbBuilder{msgs: map[protoreflect.FullName]*pbMsg{}, connect: map[protoreflect.FullName]*schemaNode{}}
	m, err := b.message(md, 0)
	if err != nil {
		return nil, nil, err
	}
	n, err := b.connectMessage(md, 0)
	return m, n, err
}

func (b *pbBuilder) message(md protoreflect.MessageDescriptor, depth int) (*pbMsg, error) {
	if depth > maxSchemaDepth {
		return nil, fmt.Errorf("schema nested more than %d deep", maxSchemaDepth)
	}
	if m := b.msgs[md.FullName()]; m != nil {
		return m, nil
	}
	m := &pbMsg{name: string(md.FullName())}
	b.msgs[md.FullName()] = m
	fs := md.Fields()
	for i := 0; i < fs.Len(); i++ {
		fd := fs.Get(i)
		t, err := b.fieldType(fd, depth)
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", fd.Name(), err)
		}
		m.fields = append(m.fields, pbField{name: string(fd.Name()), num: fd.Number(), t: t})
		if n := int(fd.Number()); n < 1024 {
			for len(m.byNum) <= n {
				m.byNum = append(m.byNum, 0)
			}
			m.byNum[n] = int16(i + 1)
		} else {
			if m.more == nil {
				m.more = map[protowire.Number]int{}
			}
			m.more[fd.Number()] = i
		}
	}
	return m, nil
}

func (b *pbBuilder) fieldType(fd protoreflect.FieldDescriptor, depth int) (*pbType, error) {
	t := &pbType{presence: fd.HasPresence() && !fd.IsList()}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		t.kind = pbBool
	case protoreflect.EnumKind:
		t.kind = pbEnum
		vs := fd.Enum().Values()
		for i := 0; i < vs.Len(); i++ {
			v := vs.Get(i)
			if int(v.Number()) == len(t.symbols) {
				t.symbols = append(t.symbols, string(v.Name()))
				continue
			}
			if t.enumMap == nil {
				t.enumMap = map[int32]string{}
			}
			t.enumMap[int32(v.Number())] = string(v.Name())
		}
	case protoreflect.Int32Kind:
		t.kind = pbInt32
	case protoreflect.Int64Kind, protoreflect.Uint32Kind, protoreflect.Uint64Kind:
		t.kind = pbVarint
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		t.kind = pbSint
	case protoreflect.Fixed32Kind:
		t.kind = pbFixed32
	case protoreflect.Sfixed32Kind:
		t.kind = pbSfixed32
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		t.kind = pbFixed64
	case protoreflect.FloatKind:
		t.kind = pbFloat
	case protoreflect.DoubleKind:
		t.kind = pbDouble
	case protoreflect.StringKind:
		t.kind = pbString
	case protoreflect.BytesKind:
		t.kind = pbBytes
	case protoreflect.MessageKind:
		t.kind = pbMessage
		md := fd.Message()
		m, err := b.message(md, depth+1)
		if err != nil {
			return nil, err
		}
		t.msg = m
		t.mapOf = fd.IsMap()
		t.wrapper = isWrapper(md.FullName())
		t.decimal = md.FullName() == protoDecimalName
	default:
		return nil, fmt.Errorf("Protobuf kind %s is not supported (groups)", fd.Kind())
	}
	t.list = fd.IsList()
	t.optional = t.list && fieldMeta(fd)["connect.optional"] == "true"
	return t, nil
}

func isWrapper(n protoreflect.FullName) bool {
	return strings.HasPrefix(string(n), "google.protobuf.") && strings.HasSuffix(string(n), "Value") &&
		n != "google.protobuf.Value" && n != "google.protobuf.ListValue"
}

// connectMessage returns the Connect struct a message stands for.
func (b *pbBuilder) connectMessage(md protoreflect.MessageDescriptor, depth int) (*schemaNode, error) {
	if depth > maxSchemaDepth {
		return nil, fmt.Errorf("schema nested more than %d deep", maxSchemaDepth)
	}
	if n := b.connect[md.FullName()]; n != nil {
		return n, nil
	}
	n := &schemaNode{typ: schemaTypeStruct, name: string(md.FullName())}
	b.connect[md.FullName()] = n
	fs := md.Fields()
	for i := 0; i < fs.Len(); i++ {
		fd := fs.Get(i)
		f, err := b.connectField(fd, depth)
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", fd.Name(), err)
		}
		n.fields = append(n.fields, f)
	}
	return n, nil
}

// connectField returns the Connect schema of a field.
func (b *pbBuilder) connectField(fd protoreflect.FieldDescriptor, depth int) (*schemaNode, error) {
	params := fieldMeta(fd)
	var n *schemaNode
	switch {
	case fd.IsMap():
		n = &schemaNode{typ: "map"}
	case fd.IsList():
		it, err := b.connectValue(fd, params, depth)
		if err != nil {
			return nil, err
		}
		// the field's params describe the elements; whether the array
		// may be null is "connect.optional" (an absent optional array is
		// null: Protobuf has no null and empty repeated fields apart)
		n = &schemaNode{typ: "array", items: it, optional: params["connect.optional"] == "true"}
	default:
		v, err := b.connectValue(fd, params, depth)
		if err != nil {
			return nil, err
		}
		c := *v
		n = &c
		n.optional = n.optional || fd.HasPresence()
	}
	n.field = string(fd.Name())
	return n, nil
}

// connectValue returns the Connect schema of one value of a field (an
// element of a repeated one), with the field's metadata params.
func (b *pbBuilder) connectValue(fd protoreflect.FieldDescriptor, params map[string]string, depth int) (*schemaNode, error) {
	n := &schemaNode{}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		n.typ = "boolean"
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		n.typ = "int32"
		if ct := params["connect.type"]; ct == "int8" || ct == "int16" {
			n.typ = ct
		}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		n.typ = "int64"
	case protoreflect.FloatKind:
		n.typ = "float32"
	case protoreflect.DoubleKind:
		n.typ = "float64"
	case protoreflect.StringKind, protoreflect.EnumKind:
		n.typ = "string"
	case protoreflect.BytesKind:
		n.typ = "bytes"
	case protoreflect.MessageKind:
		md := fd.Message()
		switch {
		case md.FullName() == protoDecimalName:
			n.typ, n.name, n.optional = "bytes", logicalDecimal, true
		case isWrapper(md.FullName()):
			v, err := b.connectValue(md.Fields().ByNumber(1), params, depth)
			if err != nil {
				return nil, err
			}
			c := *v
			c.optional = true
			n = &c
		default:
			s, err := b.connectMessage(md, depth+1)
			if err != nil {
				return nil, err
			}
			c := *s
			n = &c
			n.optional = true
		}
	default:
		return nil, fmt.Errorf("Protobuf kind %s has no Kafka Connect type", fd.Kind())
	}
	for k, v := range params {
		switch k {
		case "connect.name":
			n.name = v
		case "connect.type", "connect.optional":
		default:
			if n.params == nil {
				n.params = map[string]string{}
			}
			n.params[k] = v
		}
	}
	return n, nil
}

// fieldMeta returns the params of a field's (confluent.field_meta) option.
func fieldMeta(fd protoreflect.FieldDescriptor) map[string]string {
	opts := fd.Options()
	if opts == nil {
		return nil
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(opts)
	if err != nil || len(b) == 0 {
		return nil
	}
	var params map[string]string
	forEachField(b, func(num protowire.Number, typ protowire.Type, v []byte) {
		if num != protoFieldMeta || typ != protowire.BytesType {
			return
		}
		forEachField(v, func(num protowire.Number, typ protowire.Type, entry []byte) {
			if num != 2 || typ != protowire.BytesType {
				return
			}
			var k, val string
			forEachField(entry, func(num protowire.Number, typ protowire.Type, s []byte) {
				switch {
				case num == 1 && typ == protowire.BytesType:
					k = string(s)
				case num == 2 && typ == protowire.BytesType:
					val = string(s)
				}
			})
			if params == nil {
				params = map[string]string{}
			}
			params[k] = val
		})
	})
	return params
}

// forEachField calls fn with each field of a message's encoding (v: the
// bytes of a length-delimited field, else nil); it stops at bad input.
func forEachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte)) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return
		}
		b = b[n:]
		fn(num, typ, v)
	}
}

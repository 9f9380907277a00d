package debezium

import (
	"fmt"
	"strconv"

	"github.com/hamba/avro/v2"
)

// avroKind is the type of an Avro schema node, as the binary reader sees it.
type avroKind uint8

const (
	aNull avroKind = iota
	aBool
	aInt
	aLong
	aFloat
	aDouble
	aBytes
	aString
	aFixed
	aEnum
	aArray
	aMap
	aRecord
	aUnion
)

// avroType is a node of a writer schema: what the binary decoder walks to
// read or skip a value.
type avroType struct {
	kind     avroKind
	size     int         // aFixed
	symbols  []string    // aEnum
	items    *avroType   // aArray items, aMap values
	fields   []avroField // aRecord
	branches []*avroType // aUnion
	null     int         // aUnion: the null branch's index, -1 without one
	name     string      // aRecord: the full name
}

type avroField struct {
	name string
	t    *avroType
}

// parseAvro parses an Avro schema (JSON text) into the binary decoder's
// tree and the Kafka Connect schema it stands for (as Kafka Connect's
// AvroData, which Apicurio's and Confluent's converters use, maps it back:
// "connect.name" is the Connect schema name, "connect.parameters" its
// parameters, "connect.type" the int8/int16 an Avro int carries; optional
// fields are unions with null).
func parseAvro(text string) (*avroType, *schemaNode, error) {
	s, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
	if err != nil {
		return nil, nil, err
	}
	b := avroBuilder{named: map[string]*avroType{}, connect: map[string]*schemaNode{}}
	t, err := b.build(s, 0)
	if err != nil {
		return nil, nil, err
	}
	n, err := b.connectNode(s, 0)
	if err != nil {
		return nil, nil, err
	}
	return t, n, nil
}

type avroBuilder struct {
	named   map[string]*avroType
	connect map[string]*schemaNode
}

func (b *avroBuilder) build(s avro.Schema, depth int) (*avroType, error) {
	if depth > maxSchemaDepth {
		return nil, fmt.Errorf("schema nested more than %d deep", maxSchemaDepth)
	}
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	switch s := s.(type) {
	case *avro.NullSchema:
		return &avroType{kind: aNull}, nil
	case *avro.PrimitiveSchema:
		k, ok := map[avro.Type]avroKind{avro.Null: aNull, avro.Boolean: aBool, avro.Int: aInt, avro.Long: aLong,
			avro.Float: aFloat, avro.Double: aDouble, avro.Bytes: aBytes, avro.String: aString}[s.Type()]
		if !ok {
			return nil, fmt.Errorf("unknown Avro type %q", s.Type())
		}
		return &avroType{kind: k}, nil
	case *avro.FixedSchema:
		return &avroType{kind: aFixed, size: s.Size()}, nil
	case *avro.EnumSchema:
		return &avroType{kind: aEnum, symbols: s.Symbols()}, nil
	case *avro.ArraySchema:
		it, err := b.build(s.Items(), depth+1)
		return &avroType{kind: aArray, items: it}, err
	case *avro.MapSchema:
		it, err := b.build(s.Values(), depth+1)
		return &avroType{kind: aMap, items: it}, err
	case *avro.UnionSchema:
		t := &avroType{kind: aUnion, null: -1}
		for i, br := range s.Types() {
			bt, err := b.build(br, depth+1)
			if err != nil {
				return nil, err
			}
			if bt.kind == aNull && t.null < 0 {
				t.null = i
			}
			t.branches = append(t.branches, bt)
		}
		return t, nil
	case *avro.RecordSchema:
		if t := b.named[s.FullName()]; t != nil {
			return t, nil
		}
		t := &avroType{kind: aRecord, name: s.FullName()}
		b.named[s.FullName()] = t
		for _, f := range s.Fields() {
			ft, err := b.build(f.Type(), depth+1)
			if err != nil {
				return nil, err
			}
			t.fields = append(t.fields, avroField{name: f.Name(), t: ft})
		}
		return t, nil
	}
	return nil, fmt.Errorf("unsupported Avro schema %s", s.Type())
}

// connectNode returns the Kafka Connect schema an Avro schema stands for.
func (b *avroBuilder) connectNode(s avro.Schema, depth int) (*schemaNode, error) {
	if depth > maxSchemaDepth {
		return nil, fmt.Errorf("schema nested more than %d deep", maxSchemaDepth)
	}
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	if u, ok := s.(*avro.UnionSchema); ok {
		var other []avro.Schema
		for _, br := range u.Types() {
			if _, null := br.(*avro.NullSchema); !null && br.Type() != avro.Null {
				other = append(other, br)
			}
		}
		if len(other) != 1 {
			return nil, fmt.Errorf("a union of %d types other than null: cdcjoin reads Kafka Connect's optional fields (unions of null and one type)", len(other))
		}
		n, err := b.connectNode(other[0], depth+1)
		if err != nil {
			return nil, err
		}
		c := *n
		c.optional = true
		return &c, nil
	}
	n := &schemaNode{}
	var props map[string]any
	switch s := s.(type) {
	case *avro.PrimitiveSchema:
		props = s.Props()
		switch s.Type() {
		case avro.Boolean:
			n.typ = "boolean"
		case avro.Int:
			n.typ = "int32"
			if ct, _ := props["connect.type"].(string); ct == "int8" || ct == "int16" {
				n.typ = ct
			}
		case avro.Long:
			n.typ = "int64"
		case avro.Float:
			n.typ = "float32"
		case avro.Double:
			n.typ = "float64"
		case avro.Bytes:
			n.typ = "bytes"
		case avro.String:
			n.typ = "string"
		default:
			return nil, fmt.Errorf("Avro type %s has no Kafka Connect type", s.Type())
		}
		if l := s.Logical(); l != nil {
			switch l.Type() {
			case avro.Decimal:
				n.name = logicalDecimal
				if d, ok := l.(*avro.DecimalLogicalSchema); ok {
					n.params = map[string]string{schemaParamScale: strconv.Itoa(d.Scale()),
						schemaParamPrecision: strconv.Itoa(d.Precision())}
				}
			case avro.Date:
				n.name = logicalConnectDate
			case avro.TimeMillis:
				n.name = logicalConnectTime
			case avro.TimestampMillis:
				n.name = logicalConnectTs
			}
		}
	case *avro.FixedSchema:
		n.typ, props = "bytes", s.Props()
	case *avro.EnumSchema:
		n.typ, props = "string", s.Props()
	case *avro.ArraySchema:
		n.typ, props = "array", s.Props()
		it, err := b.connectNode(s.Items(), depth+1)
		if err != nil {
			return nil, err
		}
		n.items = it
	case *avro.MapSchema:
		n.typ, props = "map", s.Props()
	case *avro.RecordSchema:
		if c := b.connect[s.FullName()]; c != nil {
			return c, nil
		}
		n.typ, props = schemaTypeStruct, s.Props()
		b.connect[s.FullName()] = n
		for _, f := range s.Fields() {
			fn, err := b.connectNode(f.Type(), depth+1)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", f.Name(), err)
			}
			c := *fn
			c.field = f.Name()
			n.fields = append(n.fields, &c)
		}
	default:
		return nil, fmt.Errorf("unsupported Avro schema %s", s.Type())
	}
	if name, ok := props["connect.name"].(string); ok {
		n.name = name
	}
	if ps, ok := props["connect.parameters"].(map[string]any); ok {
		if n.params == nil {
			n.params = map[string]string{}
		}
		for k, v := range ps {
			if sv, ok := v.(string); ok {
				n.params[k] = sv
			}
		}
	}
	return n, nil
}

package debezium

import (
	"bytes"
	"hash/maphash"
	"slices"
	"strconv"

	"github.com/cdcjoin/cdcjoin/row"
)

// Kafka Connect and Debezium logical type names the decoder understands.
const (
	logicalDecimal         = "org.apache.kafka.connect.data.Decimal"
	logicalConnectDate     = "org.apache.kafka.connect.data.Date"
	logicalConnectTime     = "org.apache.kafka.connect.data.Time"
	logicalConnectTs       = "org.apache.kafka.connect.data.Timestamp"
	logicalVarDecimal      = "io.debezium.data.VariableScaleDecimal"
	logicalDate            = "io.debezium.time.Date"
	logicalTime            = "io.debezium.time.Time"
	logicalMicroTime       = "io.debezium.time.MicroTime"
	logicalNanoTime        = "io.debezium.time.NanoTime"
	logicalTimestamp       = "io.debezium.time.Timestamp"
	logicalMicroTimestamp  = "io.debezium.time.MicroTimestamp"
	logicalNanoTimestamp   = "io.debezium.time.NanoTimestamp"
	logicalZonedTimestamp  = "io.debezium.time.ZonedTimestamp"
	maxSchemaDepth         = 32
	maxCachedSchemas       = 64
	schemaFieldAfter       = "after"
	schemaFieldBefore      = "before"
	schemaTypeStruct       = "struct"
	schemaParamScale       = "scale"
	schemaParamPrecision   = "connect.decimal.precision"
	schemaErrNoRowStruct   = "schema has no struct field \"after\" or \"before\""
	schemaErrBadDecimalArg = "bad Decimal scale parameter"
)

// conv says how a JSON value is turned into a row.Value.
type conv uint8

const (
	convInfer      conv = iota // no schema: by JSON token
	convInt                    // integer, optionally unit-converted (see colInfo)
	convFloat                  // float32/float64
	convBool                   // boolean
	convString                 // string
	convZoned                  // ISO-8601 string -> row.KindTimestamp
	convBytes                  // base64 -> row.KindBytes
	convDecimal                // base64 two's complement + fixed scale -> row.KindDecimal
	convVarDecimal             // {"scale":n,"value":base64} -> row.KindDecimal
	convRaw                    // struct/map: raw JSON text as row.KindString
	convArray                  // array: elements per colInfo.elem -> row.KindArray
)

// colInfo is the decoding recipe of one projected column.
type colInfo struct {
	conv  conv
	kind  row.Kind // result kind for convInt
	mul   int64    // convInt: multiply by mul (ms -> µs), when > 1
	div   int64    // convInt: floor-divide by div (ns -> µs), when > 1
	min   int64    // convInt: accepted range
	max   int64
	scale int      // convDecimal; -1 when the scale varies (convInfer, convVarDecimal)
	elem  *colInfo // convArray: the elements' recipe
	typ   string   // Connect type, for error messages
	// key: the column is (part of) a primary or foreign key: numbers of
	// variable scale are canonical (see canonicalKey), and values of
	// another class than the column's first one are rejected.
	key bool
	// declared: the recipe comes from the configuration's types (a record
	// without a schema), which a widened source column outgrows.
	declared bool
}

// schemaNode is a parsed Kafka Connect schema (only the parts cdcjoin uses).
type schemaNode struct {
	typ      string
	name     string
	field    string
	optional bool
	params   map[string]string
	fields   []*schemaNode
	items    *schemaNode // array element schema
}

// parseSchema parses a Kafka Connect JSON schema at the scanner's position.
func parseSchema(s *scanner, depth int) (*schemaNode, *DecodeError) {
	if depth > maxSchemaDepth {
		return nil, s.syntaxErr("schema nested too deeply")
	}
	n := &schemaNode{}
	err := s.members(func(k []byte) (err *DecodeError) {
		switch string(k) {
		case "type":
			n.typ, err = readSchemaString(s)
		case "name":
			n.name, err = readSchemaString(s)
		case "field":
			n.field, err = readSchemaString(s)
		case "optional":
			n.optional = s.peek() == 't'
			err = s.skip()
		case "parameters":
			if s.peek() != '{' {
				return s.skip()
			}
			n.params = map[string]string{}
			return s.members(func(k []byte) *DecodeError {
				key := string(k)
				v, err := readSchemaString(s)
				n.params[key] = v
				return err
			})
		case "fields":
			if s.peek() != '[' {
				return s.skip()
			}
			return s.elements(func() *DecodeError {
				f, err := parseSchema(s, depth+1)
				n.fields = append(n.fields, f)
				return err
			})
		case "items":
			if s.peek() != '{' {
				return s.skip()
			}
			n.items, err = parseSchema(s, depth+1)
		default:
			err = s.skip()
		}
		return err
	})
	return n, err
}

// readSchemaString reads a string (or null as "").
func readSchemaString(s *scanner) (string, *DecodeError) {
	if s.peek() != '"' {
		return "", s.skip()
	}
	raw, esc, err := s.str()
	if err != nil {
		return "", err
	}
	if esc {
		raw, err = unescape(nil, raw)
		if err != nil {
			return "", err
		}
	}
	return string(raw), nil
}

// fieldNamed returns n's struct field called name, or nil.
func (n *schemaNode) fieldNamed(name string) *schemaNode {
	for _, f := range n.fields {
		if f.field == name {
			return f
		}
	}
	return nil
}

// connectTypes maps JsonConverter's type names to Kafka Connect's
// (Schema.Type in lower case): JsonConverter writes FLOAT32 and FLOAT64 as
// "float" and "double".
var connectTypes = map[string]string{
	"int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
	"float": "float32", "double": "float64", "float32": "float32", "float64": "float64",
	"boolean": "boolean", "string": "string", "bytes": "bytes",
	"array": "array", "map": "map", "struct": "struct",
}

// columnType translates a field's schema into a row.ColumnType (Kind
// unset: see resolve). An unknown type is an error, never guessed.
func columnType(n *schemaNode) (row.ColumnType, *DecodeError) {
	typ, ok := connectTypes[n.typ]
	if !ok {
		return row.ColumnType{}, &DecodeError{Kind: ErrMalformed, Offset: -1,
			Reason: "unknown Kafka Connect schema type " + strconv.Quote(n.typ)}
	}
	ct := row.ColumnType{Connect: typ, Logical: n.name, Optional: n.optional}
	switch {
	case n.name == logicalDecimal && typ == "bytes":
		sc, err := strconv.Atoi(n.params[schemaParamScale])
		if err != nil || sc > maxScale || sc < -maxScale {
			return ct, &DecodeError{Kind: ErrMalformed, Reason: schemaErrBadDecimalArg, Offset: -1}
		}
		ct.Scale = sc
		ct.Precision, _ = strconv.Atoi(n.params[schemaParamPrecision])
	case n.name == logicalVarDecimal && typ == schemaTypeStruct:
		ct.Scale = -1
	case typ == "array":
		if n.items == nil {
			return ct, &DecodeError{Kind: ErrMalformed, Offset: -1, Reason: "array schema without items"}
		}
		et, err := columnType(n.items)
		if err != nil {
			return ct, err
		}
		ct.Elem = &et
	}
	return ct, nil
}

// resolve sets ct.Kind (and its elements') and returns the recipe that
// decodes values of type ct: the one place where a Connect schema, read
// from a record or declared in the configuration, becomes a decoder.
func resolve(ct *row.ColumnType) (colInfo, *DecodeError) {
	ci := colInfo{typ: ct.Connect, scale: -1}
	intRange := func(bits uint) {
		ci.conv, ci.kind = convInt, row.KindInt
		ci.max = 1<<(bits-1) - 1
		ci.min = -ci.max - 1
	}
	switch ct.Connect {
	case "int8":
		intRange(8)
	case "int16":
		intRange(16)
	case "int32":
		intRange(32)
	case "int64":
		intRange(64)
	case "float32", "float64":
		ci.conv, ct.Kind = convFloat, row.KindFloat
	case "boolean":
		ci.conv, ct.Kind = convBool, row.KindBool
	case "string":
		ci.conv, ct.Kind = convString, row.KindString
	case "bytes":
		ci.conv, ct.Kind = convBytes, row.KindBytes
	case "array":
		if ct.Elem == nil {
			return ci, &DecodeError{Kind: ErrMalformed, Offset: -1, Reason: "array type without an element type"}
		}
		et, err := resolve(ct.Elem)
		if err != nil {
			return ci, err
		}
		ci.conv, ci.elem, ct.Kind = convArray, &et, row.KindArray
	case "map", "struct":
		ci.conv, ct.Kind = convRaw, row.KindString
	default:
		return ci, &DecodeError{Kind: ErrMalformed, Offset: -1, Reason: "unknown Kafka Connect type " + strconv.Quote(ct.Connect)}
	}
	if ci.conv == convInt {
		switch ct.Logical {
		case logicalDate, logicalConnectDate:
			ci.kind = row.KindDate
		case logicalMicroTimestamp:
			ci.kind = row.KindTimestamp
		case logicalTimestamp, logicalConnectTs:
			ci.kind, ci.mul = row.KindTimestamp, 1000
		case logicalNanoTimestamp:
			ci.kind, ci.div = row.KindTimestamp, 1000
		case logicalMicroTime:
			ci.kind = row.KindTime
		case logicalTime, logicalConnectTime:
			ci.kind, ci.mul = row.KindTime, 1000
		case logicalNanoTime:
			ci.kind, ci.div = row.KindTime, 1000
		}
		ct.Kind = ci.kind
	}
	switch {
	case ct.Logical == logicalZonedTimestamp && ct.Connect == "string":
		ci.conv, ct.Kind = convZoned, row.KindTimestamp
	case ct.Logical == logicalDecimal && ct.Connect == "bytes":
		if ct.Scale > maxScale || ct.Scale < -maxScale {
			return ci, &DecodeError{Kind: ErrMalformed, Reason: schemaErrBadDecimalArg, Offset: -1}
		}
		ci.conv, ci.scale, ct.Kind = convDecimal, ct.Scale, row.KindDecimal
	case ct.Logical == logicalVarDecimal && ct.Connect == schemaTypeStruct:
		ci.conv, ct.Kind, ct.Scale = convVarDecimal, row.KindDecimal, -1
	}
	return ci, nil
}

// projection is a parsed schema projected onto the decoder's columns.
// types[i]/infos[i] describe column i; when the schema has no such field,
// they are the declared ones (decoding by JSON token when nothing is
// declared).
type projection struct {
	raw   []byte // the schema block's bytes, the cache key
	types []row.ColumnType
	infos []colInfo
}

// buildProjection projects the struct st onto cols. decl holds the
// declared types and the recipes for records without a schema; a field
// whose schema disagrees with its declared type is an error.
func buildProjection(raw []byte, st *schemaNode, cols []string, decl *projection) (*projection, *DecodeError) {
	p := &projection{
		raw:   append([]byte(nil), raw...),
		types: slices.Clone(decl.types),
		infos: slices.Clone(decl.infos),
	}
	if st == nil {
		return p, nil
	}
	for i, c := range cols {
		f := st.fieldNamed(c)
		if f == nil {
			continue
		}
		ct, err := columnType(f)
		var ci colInfo
		if err == nil {
			ci, err = resolve(&ct)
		}
		if err != nil {
			err.Field = c
			return nil, err
		}
		if dt := decl.types[i]; dt.Known() && !compatible(dt, ct) {
			return nil, &DecodeError{Kind: ErrTypeMismatch, Field: c, Offset: -1,
				Reason: "the record's schema gives " + describeType(ct) + " but the configuration declares " + describeType(dt) +
					" (if the source column's type changed, update its types entry and restart)"}
		}
		ci.key = decl.infos[i].key
		p.types[i], p.infos[i] = ct, ci
	}
	return p, nil
}

// compatible reports whether values of types a and b have one format: the
// same Kind, the same scale for decimals, compatible elements for arrays.
func compatible(a, b row.ColumnType) bool {
	switch {
	case a.Kind != b.Kind:
		return false
	case a.Kind == row.KindDecimal:
		return a.Scale == b.Scale
	case a.Kind == row.KindArray:
		return a.Elem != nil && b.Elem != nil && compatible(*a.Elem, *b.Elem)
	}
	return true
}

// describeType names a type for messages, e.g. "bytes
// (org.apache.kafka.connect.data.Decimal, scale 2): decimal".
func describeType(t row.ColumnType) string {
	s := t.Connect
	switch {
	case t.Kind == row.KindArray && t.Elem != nil:
		s += " of " + describeType(*t.Elem)
		return s
	case t.Logical != "" && t.Kind == row.KindDecimal && t.Scale >= 0:
		s += " (" + t.Logical + ", scale " + strconv.Itoa(t.Scale) + ")"
	case t.Logical != "":
		s += " (" + t.Logical + ")"
	}
	return s + ": " + t.Kind.String()
}

// schemaCache maps schema blocks (by their exact bytes) to projections.
// Lookup first tries the most recently used schema as a byte prefix of the
// input, which costs one memcmp and skips scanning the block; otherwise the
// block is skipped, hashed and looked up. At most maxCachedSchemas entries are
// kept; when full, the cache is emptied (schemas change rarely).
type schemaCache struct {
	seed  maphash.Seed
	last  *projection
	byKey map[uint64][]*projection
	n     int
}

func newSchemaCache() schemaCache {
	return schemaCache{seed: maphash.MakeSeed(), byKey: map[uint64][]*projection{}}
}

// lookup finds the schema at s's position (an object) and advances past it.
// On a miss it returns p == nil with the block's bytes and hash: the caller
// parses it and calls store.
func (c *schemaCache) lookup(s *scanner) (p *projection, raw []byte, h uint64, err *DecodeError) {
	if c.last != nil && bytes.HasPrefix(s.b[s.i:], c.last.raw) {
		// A complete JSON object is self-delimiting: equal bytes are the
		// same value, ending at the same place.
		s.i += len(c.last.raw)
		return c.last, nil, 0, nil
	}
	start := s.i
	if err := s.skipNested(); err != nil {
		return nil, nil, 0, err
	}
	raw = s.b[start:s.i]
	h = maphash.Bytes(c.seed, raw)
	for _, p := range c.byKey[h] {
		if bytes.Equal(p.raw, raw) {
			c.last = p
			return p, raw, h, nil
		}
	}
	return nil, raw, h, nil
}

// store adds p (whose raw bytes hash to h) and makes it the most recent.
func (c *schemaCache) store(h uint64, p *projection) {
	if c.n >= maxCachedSchemas {
		clear(c.byKey)
		c.n = 0
	}
	c.byKey[h] = append(c.byKey[h], p)
	c.n++
	c.last = p
}

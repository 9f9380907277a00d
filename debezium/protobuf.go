package debezium

import (
	"encoding/base64"
	"math"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/cdcjoin/cdcjoin/row"
)

// Protobuf decoding, as the Avro one (avro.go; the steps both share are in
// envelope.go): the first record of a schema id and message compiles a
// program (the envelope's fields by role, the row message's fields matched
// to the projected columns with the recipes of their Connect types);
// decoding walks the wire format once, skipping unprojected fields, without
// allocating.

// maxMessageIndexes bounds a record's message index path (nesting depth of
// the message in its .proto file).
const maxMessageIndexes = 8

// pbSchemaKey names a compiled message: the schema id and message path.
type pbSchemaKey struct {
	id  SchemaID
	n   int
	idx [maxMessageIndexes]int32
}

// protoSchemas caches compiled programs.
type protoSchemas struct {
	vals map[pbSchemaKey]*pbEnvelope
	keys map[pbSchemaKey]*pbKey
	zero [8]byte // the encoding of absent proto3 fields' defaults (a local would escape)
}

// pbEnvelope is a compiled value message.
type pbEnvelope struct {
	err     *DecodeError
	msg     *pbMsg
	roles   []int // per field of msg: its role (roleBefore, …)
	src     []int // per field of the source message: its sourceField role
	srcMsg  *pbMsg
	proj    *projection
	row     *pbMsg
	cols    []int // per field of row: the projected column, -1 when not projected
	missing int   // the first projected column the row message lacks, -1: none
}

// pbKey is a compiled key message.
type pbKey struct {
	err  *DecodeError
	msg  *pbMsg // nil: a key that projects nothing
	proj *projection
	cols []int
}

// messageIndexes reads the message indexes after the schema id of
// Confluent's Protobuf wire format: a zigzag varint count and that many
// zigzag varint indexes, a count of 0 meaning the first message ([0]).
func messageIndexes(b []byte, k *pbSchemaKey) ([]byte, bool) {
	r := avroReader{b: b}
	n, ok := r.varint()
	if !ok || n < 0 || n > maxMessageIndexes {
		return nil, false
	}
	k.n = int(n)
	for i := 0; i < k.n; i++ {
		v, ok := r.varint()
		if !ok || v < 0 || v > math.MaxInt32 {
			return nil, false
		}
		k.idx[i] = int32(v)
	}
	return b[r.i:], true
}

func (d *Decoder) protoMessageOf(k pbSchemaKey, field string) (*pbMsg, *schemaNode, *DecodeError, error) {
	s, de, err := d.registrySchema(k.id, field, "PROTOBUF")
	if err != nil || de != nil {
		return nil, nil, de, err
	}
	fd, perr := compileProto(s)
	if perr != nil {
		return nil, nil, schemaErr(k.id, field+".schema", "not a .proto file cdcjoin can compile: "+perr.Error()), nil
	}
	md, perr := protoMessage(fd, k.idx[:k.n])
	if perr != nil {
		return nil, nil, schemaErr(k.id, field+".schema", perr.Error()), nil
	}
	m, n, perr := parseProto(md)
	if perr != nil {
		return nil, nil, schemaErr(k.id, field+".schema", "not a message cdcjoin can read: "+perr.Error()), nil
	}
	return m, n, nil, nil
}

// pbEnvelopeOf returns the compiled value message k.
func (d *Decoder) pbEnvelopeOf(k pbSchemaKey) (*pbEnvelope, error) {
	return compiled(&d.proto.vals, k, func() (*pbEnvelope, error) {
		m, conn, de, err := d.protoMessageOf(k, "value")
		if err != nil {
			return nil, err
		}
		e := &pbEnvelope{err: de, missing: -1}
		if de == nil {
			d.compilePbEnvelope(e, k.id, m, conn)
		}
		return e, nil
	})
}

func (d *Decoder) compilePbEnvelope(e *pbEnvelope, id SchemaID, m *pbMsg, conn *schemaNode) {
	var de *DecodeError
	if e.proj, de = d.envelopeProjection(id, conn); de != nil {
		e.err = de
		return
	}
	e.msg = m
	for _, f := range m.fields {
		role := envelopeRole(f.name)
		switch role {
		case roleBefore, roleAfter:
			if f.t.kind != pbMessage || f.t.list || f.t.mapOf {
				e.err = schemaErr(id, "value.schema."+f.name, "the row image is not a message")
				return
			}
			if e.row == nil {
				e.row = f.t.msg
			} else if e.row != f.t.msg {
				e.err = schemaErr(id, "value.schema."+f.name, "before and after have different row messages")
				return
			}
		case roleSource:
			if f.t.kind == pbMessage && !f.t.list {
				e.srcMsg = f.t.msg
				for _, sf := range f.t.msg.fields {
					e.src = append(e.src, sourceFields[sf.name])
				}
			} else {
				role = roleSkip
			}
		}
		e.roles = append(e.roles, role)
	}
	if e.row == nil {
		e.err = schemaErr(id, "value.schema", schemaErrNoRowStruct)
		return
	}
	e.cols = d.matchFields(e.row)
	e.missing = d.firstMissing(e.cols)
}

// matchFields matches a row message's fields to the projected columns.
func (d *Decoder) matchFields(m *pbMsg) []int {
	return d.matchNames(len(m.fields), func(i int) string { return m.fields[i].name })
}

// pbKeyOf returns the compiled key message k.
func (d *Decoder) pbKeyOf(k pbSchemaKey) (*pbKey, error) {
	return compiled(&d.proto.keys, k, func() (*pbKey, error) {
		m, conn, de, err := d.protoMessageOf(k, "key")
		if err != nil {
			return nil, err
		}
		c := &pbKey{err: de}
		if de == nil {
			if c.proj, de = d.projectSchema(k.id, conn, "key.schema"); de != nil {
				c.err = de
			} else {
				c.msg, c.cols = m, d.matchFields(m)
			}
		}
		return c, nil
	})
}

// decodeProtobufValue decodes a Protobuf envelope (the value, after its
// schema id) into ev and returns its projection; an error is a
// *DecodeError (a bad record) or the schema source's failure.
func (d *Decoder) decodeProtobufValue(id SchemaID, payload []byte, ev *Event) (*projection, error) {
	k := pbSchemaKey{id: id}
	payload, ok := messageIndexes(payload, &k)
	if !ok {
		return nil, badBody(id, "value", "bad message indexes")
	}
	e, err := d.pbEnvelopeOf(k)
	if err != nil {
		return nil, err
	}
	if e.err != nil {
		return nil, e.err
	}
	if de := d.pbEnvelope(payload, e, id, ev); de != nil {
		return nil, de
	}
	return e.proj, nil
}

// decodeProtobufKey decodes a Protobuf key (after its schema id) into
// ev.Key, with errors as decodeProtobufValue's.
func (d *Decoder) decodeProtobufKey(kid SchemaID, kp []byte, ev *Event) error {
	kk := pbSchemaKey{id: kid}
	kp, ok := messageIndexes(kp, &kk)
	if !ok {
		return badBody(kid, "key", "bad message indexes")
	}
	c, err := d.pbKeyOf(kk)
	if err != nil {
		return err
	}
	if c.err != nil {
		return c.err
	}
	if de := d.pbRow(kp, c.msg, c.cols, c.proj, &ev.Key, "key", kid, false); de != nil {
		return de
	}
	return nil
}

func (d *Decoder) pbEnvelope(b []byte, e *pbEnvelope, id SchemaID, ev *Event) *DecodeError {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return badBody(id, "value", "bad field tag")
		}
		b = b[n:]
		i := e.msg.field(num)
		role := roleSkip
		if i >= 0 {
			role = e.roles[i]
		}
		var v []byte
		switch {
		case role == roleSkip:
			n = protowire.ConsumeFieldValue(num, typ, b)
		case typ == protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case role == roleTsMs && typ == protowire.VarintType:
			var u uint64
			u, n = protowire.ConsumeVarint(b)
			ev.TsMs = int64(u)
		default:
			return badBody(id, "value."+e.msg.fields[i].name, "wire type "+strconv.Itoa(int(typ)))
		}
		if n < 0 {
			return badBody(id, "value", "truncated")
		}
		b = b[n:]
		switch role {
		case roleBefore, roleAfter:
			img, path := &ev.Before, "value.before"
			if role == roleAfter {
				img, path = &ev.After, "value.after"
				if e.missing >= 0 {
					return d.missingColumn(id, e.missing)
				}
			}
			if de := d.pbRow(v, e.row, e.cols, e.proj, img, path, id, true); de != nil {
				return de
			}
		case roleSource:
			if de := d.pbSource(v, e, &ev.Source, id); de != nil {
				return de
			}
		case roleOp:
			if de := setOp(ev, v); de != nil {
				return de
			}
		case roleTsMs:
			if typ == protowire.BytesType { // a wrapper
				u, _ := pbWrapped(v)
				ev.TsMs = int64(u)
			}
		}
	}
	return nil
}

// pbWrapped reads field 1 (a varint) of a wrapper message: its last
// occurrence; false when there is none or the message is malformed.
func pbWrapped(v []byte) (uint64, bool) {
	val, _, found, bad := lastField(v, 1, protowire.VarintType)
	if !found || bad != "" {
		return 0, false
	}
	u, _ := protowire.ConsumeVarint(val)
	return u, true
}

func (d *Decoder) pbSource(b []byte, e *pbEnvelope, src *Source, id SchemaID) *DecodeError {
	m := e.srcMsg
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return badBody(id, "value.source", "bad field tag")
		}
		b = b[n:]
		i := m.field(num)
		role := srcSkip
		if i >= 0 {
			role = e.src[i]
		}
		if role == srcSkip {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return badBody(id, "value.source", "truncated")
			}
			b = b[n:]
			continue
		}
		var v []byte
		var u uint64
		switch typ {
		case protowire.VarintType:
			u, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
			if m.fields[i].t.wrapper {
				if m.fields[i].t.msg.fields[0].t.kind == pbString {
					v = pbWrappedBytes(v)
				} else {
					u, _ = pbWrapped(v)
				}
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return badBody(id, "value.source."+m.fields[i].name, "truncated")
		}
		b = b[n:]
		switch role {
		case srcTsMs, srcLSN, srcTxID, srcPos, srcRow:
			setSourceInt(src, role, int64(u))
		default:
			if v != nil {
				d.setSourceString(src, role, v)
			}
		}
	}
	return nil
}

// pbWrappedBytes reads field 1 (bytes) of a wrapper message: its last
// occurrence (in a malformed message the last one before the damage);
// empty when there is none.
func pbWrappedBytes(v []byte) []byte {
	val, _, found, _ := lastField(v, 1, protowire.BytesType)
	if !found {
		return v[:0]
	}
	out, _ := protowire.ConsumeBytes(val)
	return out
}

// pbRow decodes a row (or key) message into img; full: every projected
// column the message declares gets a value (absent fields are their
// defaults: null with presence, else the type's zero).
func (d *Decoder) pbRow(b []byte, m *pbMsg, cols []int, p *projection, img *Row, path string, id SchemaID, full bool) *DecodeError {
	img.Present = true
	seen := d.seen
	clear(seen)
	all := b
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return badBody(id, path, "bad field tag")
		}
		b = b[n:]
		i := m.field(num)
		j := -1
		if i >= 0 {
			j = cols[i]
		}
		if j < 0 || (seen[j] && (m.fields[i].t.list || m.fields[i].t.mapOf)) {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return badBody(id, path, "truncated")
			}
			b = b[n:]
			continue
		}
		f := &m.fields[i]
		info := &p.infos[j]
		var err *DecodeError
		if f.t.list || f.t.mapOf {
			// all of the field's occurrences, from here on, make the
			// array (or map)
			err = d.pbArray(all[len(all)-len(b)-protowire.SizeTag(num):], f, info, &img.Values[j], id)
			n = protowire.ConsumeFieldValue(num, typ, b)
		} else {
			n, err = d.pbValue(b, typ, f.t, info, &img.Values[j], id)
		}
		if err == nil && n < 0 {
			err = badBody(id, path+"."+f.name, "truncated")
		}
		if err == nil && info.key {
			err = d.keyValue(j, info, &img.Values[j])
		}
		if err != nil {
			if err.Field == "" {
				err.Field = path + "." + d.cols[j]
			}
			return err
		}
		b = b[n:]
		seen[j] = true
	}
	if !full {
		return nil
	}
	for i, j := range cols {
		if j < 0 || seen[j] {
			continue
		}
		f := &m.fields[i]
		if err := d.pbDefault(f.t, &p.infos[j], &img.Values[j]); err != nil {
			err.Field = path + "." + d.cols[j]
			return err
		}
		if p.infos[j].key {
			if err := d.keyValue(j, &p.infos[j], &img.Values[j]); err != nil {
				err.Field = path + "." + d.cols[j]
				return err
			}
		}
	}
	return nil
}

// pbDefault is the value of an absent field.
func (d *Decoder) pbDefault(t *pbType, info *colInfo, out *row.Value) *DecodeError {
	switch {
	case t.list && info.conv == convArray && !t.optional:
		*out = row.Value{Kind: row.KindArray}
		return nil
	case t.list || t.mapOf || t.presence || t.kind == pbMessage:
		*out = row.Value{}
		return nil
	}
	switch t.kind {
	case pbFixed32, pbSfixed32, pbFloat:
		_, err := d.pbValue(d.proto.zero[:4], protowire.Fixed32Type, t, info, out, SchemaID{})
		return err
	case pbFixed64, pbDouble:
		_, err := d.pbValue(d.proto.zero[:8], protowire.Fixed64Type, t, info, out, SchemaID{})
		return err
	case pbString, pbBytes:
		_, err := d.pbValue(d.proto.zero[:1], protowire.BytesType, t, info, out, SchemaID{})
		return err
	}
	_, err := d.pbValue(d.proto.zero[:1], protowire.VarintType, t, info, out, SchemaID{})
	return err
}

// pbScalar reads one scalar of kind k with wire type typ: as an integer
// (u), or its bytes (length-delimited).
func pbScalar(b []byte, typ protowire.Type, k pbKind) (u uint64, v []byte, n int) {
	switch typ {
	case protowire.VarintType:
		u, n = protowire.ConsumeVarint(b)
		switch k {
		case pbSint:
			u = uint64(protowire.DecodeZigZag(u))
		case pbInt32:
			u = uint64(int64(int32(u)))
		}
	case protowire.Fixed32Type:
		var x uint32
		x, n = protowire.ConsumeFixed32(b)
		u = uint64(x)
		if k == pbSfixed32 {
			u = uint64(int64(int32(x)))
		}
	case protowire.Fixed64Type:
		u, n = protowire.ConsumeFixed64(b)
	case protowire.BytesType:
		v, n = protowire.ConsumeBytes(b)
	default:
		n = -1
	}
	return
}

// wireOf is the wire type a scalar kind is written with.
func wireOf(k pbKind) protowire.Type {
	switch k {
	case pbFixed32, pbSfixed32, pbFloat:
		return protowire.Fixed32Type
	case pbFixed64, pbDouble:
		return protowire.Fixed64Type
	case pbString, pbBytes, pbMessage:
		return protowire.BytesType
	}
	return protowire.VarintType
}

// pbValue decodes one value of type t (not a list) per info; n is the
// bytes consumed (-1: truncated).
func (d *Decoder) pbValue(b []byte, typ protowire.Type, t *pbType, info *colInfo, out *row.Value, id SchemaID) (int, *DecodeError) {
	if typ != wireOf(t.kind) {
		return -1, badBody(id, "", "wire type "+strconv.Itoa(int(typ))+" for a field of another type")
	}
	u, v, n := pbScalar(b, typ, t.kind)
	if n < 0 {
		return n, nil
	}
	if t.kind == pbMessage {
		return n, d.pbMessageValue(v, t, info, out, id)
	}
	return n, d.pbScalarValue(u, v, t, info, out)
}

// pbScalarValue converts a read scalar per info.
func (d *Decoder) pbScalarValue(u uint64, v []byte, t *pbType, info *colInfo, out *row.Value) *DecodeError {
	switch t.kind {
	case pbBool:
		*out = row.Bool(u != 0)
		if info.conv != convBool && info.conv != convInfer {
			return mismatch(info, "boolean")
		}
		return nil
	case pbFloat:
		f := math.Float32frombits(uint32(u))
		d.tbuf = strconv.AppendFloat(d.tbuf[:0], float64(f), 'g', -1, 32)
		x, _ := strconv.ParseFloat(view(d.tbuf), 64)
		*out = row.Float(x)
		return nil
	case pbDouble:
		*out = row.Float(math.Float64frombits(u))
		return nil
	case pbString, pbEnum:
		if t.kind == pbEnum {
			s, ok := t.symbol(int32(u))
			if !ok {
				return mismatch(info, "enum number "+strconv.FormatUint(u, 10))
			}
			v = []byte(s)[:len(s):len(s)]
		}
		if d.depth == 0 && d.ph.isString(v) {
			*out = row.Unavailable()
			return nil
		}
		if info.conv == convZoned {
			ts, perr := time.Parse(time.RFC3339Nano, view(v))
			if perr != nil {
				return mismatch(info, "unparsable timestamp "+strconv.Quote(string(v)))
			}
			*out = row.Timestamp(ts.UnixMicro())
			return nil
		}
		*out = row.String(d.str(v))
		return nil
	case pbBytes:
		if d.depth == 0 && string(v) == d.ph.text {
			*out = row.Unavailable()
			return nil
		}
		if info.conv == convDecimal {
			return d.decimal(v, info.scale, info, out)
		}
		*out = row.Value{Kind: row.KindBytes, Str: d.str(v)}
		return nil
	}
	return intValue(int64(u), info, out)
}

func (t *pbType) symbol(n int32) (string, bool) {
	if n >= 0 && int(n) < len(t.symbols) {
		return t.symbols[n], true
	}
	s, ok := t.enumMap[n]
	return s, ok
}

// units converts v by the recipe's unit (ms → µs, ns → µs, flooring);
// ok=false when the result overflows.
func (info *colInfo) units(v int64) (int64, bool) {
	switch {
	case info.mul > 1:
		if v > math.MaxInt64/info.mul || v < math.MinInt64/info.mul {
			return v, false
		}
		return v * info.mul, true
	case info.div > 1:
		q := v / info.div
		if v%info.div < 0 {
			q--
		}
		return q, true
	}
	return v, true
}

// intValue converts an integer per info (units, range).
func intValue(v int64, info *colInfo, out *row.Value) *DecodeError {
	switch info.conv {
	case convInt:
		if v < info.min || v > info.max {
			return mismatch(info, "number "+strconv.FormatInt(v, 10))
		}
		v, ok := info.units(v)
		if !ok {
			return mismatch(info, "out-of-range number "+strconv.FormatInt(v, 10))
		}
		*out = row.Value{Kind: info.kind, Int: v}
	case convFloat:
		*out = row.Float(float64(v))
	default:
		*out = row.Int(v)
	}
	return nil
}

// pbMessageValue decodes a message-typed value: a wrapper, a Decimal, a
// VariableScaleDecimal, or a struct or map kept as JsonConverter's JSON.
func (d *Decoder) pbMessageValue(v []byte, t *pbType, info *colInfo, out *row.Value, id SchemaID) *DecodeError {
	switch {
	case t.wrapper:
		inner := t.msg.fields[0].t
		val, typ, found, bad := lastField(v, 1, wireOf(inner.kind))
		if bad != "" {
			return badBody(id, "", bad)
		}
		u, s := uint64(0), []byte{}
		if found {
			u, s, _ = pbScalar(val, typ, inner.kind)
		}
		return d.pbScalarValue(u, s, inner, info, out)
	case t.decimal || info.conv == convVarDecimal:
		var value []byte
		scale, haveScale := int64(0), false
		for b := v; len(b) > 0; {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				return badBody(id, "", "bad field tag")
			}
			b = b[n:]
			i := t.msg.field(num)
			name := ""
			if i >= 0 {
				name = t.msg.fields[i].name
			}
			switch {
			case name == "value" && typ == protowire.BytesType:
				value, n = protowire.ConsumeBytes(b)
			case name == "scale" && typ == protowire.VarintType:
				var u uint64
				u, n = protowire.ConsumeVarint(b)
				scale, haveScale = int64(int32(u)), true
				if t.msg.fields[i].t.kind == pbSint {
					scale = protowire.DecodeZigZag(u)
				}
			default:
				n = protowire.ConsumeFieldValue(num, typ, b)
			}
			if n < 0 {
				return badBody(id, "", "truncated")
			}
			b = b[n:]
		}
		if d.depth == 0 && string(value) == d.ph.text {
			*out = row.Unavailable()
			return nil
		}
		if !haveScale && info.conv == convDecimal {
			scale = int64(info.scale) // proto3 does not write a scale of 0
		}
		if value == nil {
			value = []byte{}
		}
		if scale > maxScale || scale < -maxScale {
			return mismatch(info, "malformed decimal")
		}
		if info.conv != convDecimal && info.conv != convVarDecimal {
			return mismatch(info, "a decimal")
		}
		return d.decimal(value, int(scale), info, out)
	case info.conv == convRaw || info.conv == convInfer:
		var ok bool
		d.jbuf, ok = d.pbJSON(d.jbuf[:0], v, t)
		if !ok {
			return badBody(id, "", "truncated")
		}
		if d.depth == 0 && d.ph.isRaw(d.jbuf) {
			*out = row.Unavailable()
		} else {
			*out = row.String(d.str(d.jbuf))
		}
		return nil
	}
	return mismatch(info, "a message")
}

// pbArray decodes every occurrence of field f in b (from f's first one)
// as one array per info.elem.
func (d *Decoder) pbArray(b []byte, f *pbField, info *colInfo, out *row.Value, id SchemaID) *DecodeError {
	if f.t.mapOf || info.conv == convRaw || info.conv == convInfer {
		var ok bool
		if d.jbuf, ok = d.pbJSONRepeated(d.jbuf[:0], b, f); !ok {
			return badBody(id, "", "truncated")
		}
		*out = row.String(d.str(d.jbuf))
		return nil
	}
	if info.conv != convArray {
		return mismatch(info, "a repeated field")
	}
	a, err := d.beginArray(info)
	if err != nil {
		return err
	}
	for len(b) > 0 && err == nil {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			err = badBody(id, "", "bad field tag")
			break
		}
		b = b[n:]
		if num != f.num {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				err = badBody(id, "", "truncated")
			}
			b = b[max(n, 0):]
			continue
		}
		if typ == protowire.BytesType && wireOf(f.t.kind) != protowire.BytesType {
			// packed
			var p []byte
			if p, n = protowire.ConsumeBytes(b); n < 0 {
				err = badBody(id, "", "truncated")
				break
			}
			b = b[n:]
			for len(p) > 0 {
				v := d.elemValue(&a)
				var m int
				if m, err = d.pbValue(p, wireOf(f.t.kind), f.t, info.elem, v, id); err != nil {
					break
				}
				if m < 0 {
					err = badBody(id, "", "truncated packed array")
					break
				}
				p = p[m:]
				d.addElem(&a, v)
			}
			continue
		}
		v := d.elemValue(&a)
		if n, err = d.pbValue(b, typ, f.t, info.elem, v, id); err != nil {
			break
		}
		if n < 0 {
			err = badBody(id, "", "truncated")
			break
		}
		b = b[n:]
		d.addElem(&a, v)
	}
	return d.endArray(&a, err, out)
}

// pbJSON appends the JSON text JsonConverter writes for a struct or map
// value (message v of type t): fields in declaration order, absent ones
// null (with presence) or their defaults.
func (d *Decoder) pbJSON(out []byte, v []byte, t *pbType) ([]byte, bool) {
	m := t.msg
	out = append(out, '{')
	for i := range m.fields {
		f := &m.fields[i]
		if i > 0 {
			out = append(out, ',')
		}
		out = appendJacksonString(out, []byte(f.name))
		out = append(out, ':')
		var ok bool
		if f.t.list || f.t.mapOf {
			if out, ok = d.pbJSONRepeated(out, v, f); !ok {
				return out, false
			}
			continue
		}
		val, typ, found, bad := lastField(v, f.num, anyWire)
		if bad != "" {
			return out, false
		}
		if !found {
			if f.t.presence || f.t.kind == pbMessage {
				out = append(out, "null"...)
				continue
			}
			val, typ = d.proto.zero[:wireLen(wireOf(f.t.kind))], wireOf(f.t.kind)
		}
		if out, ok = d.pbJSONValue(out, val, typ, f.t); !ok {
			return out, false
		}
	}
	return append(out, '}'), true
}

func wireLen(t protowire.Type) int {
	switch t {
	case protowire.Fixed32Type:
		return 4
	case protowire.Fixed64Type:
		return 8
	}
	return 1
}

// anyWire, as lastField's want, takes a field of any wire type.
const anyWire protowire.Type = -1

// Why a message does not parse (nextField, lastField).
const (
	wireBadTag    = "bad field tag"
	wireTruncated = "truncated"
)

// nextField splits message b's first field off: its number, wire type,
// encoding after the tag (val: what protowire.ConsumeFieldValue spans) and
// the fields after it; bad is why b does not parse (wireBadTag, or
// wireTruncated with num and typ those of the damaged field, val nil), ""
// when it does.
func nextField(b []byte) (num protowire.Number, typ protowire.Type, val, rest []byte, bad string) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, nil, wireBadTag
	}
	b = b[n:]
	if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
		return num, typ, nil, nil, wireTruncated
	}
	return num, typ, b[:n], b[n:], ""
}

// lastField returns the encoding (after the tag) of field num's last
// occurrence in message b with wire type want (anyWire: any). A message
// that does not parse has bad set (nextField); v, typ and found then tell
// the last occurrence up to the damage: v is nil when the damaged field is
// itself one.
func lastField(b []byte, num protowire.Number, want protowire.Type) (v []byte, typ protowire.Type, found bool, bad string) {
	for len(b) > 0 {
		n1, t, val, rest, bad := nextField(b)
		if bad == wireBadTag {
			return v, typ, found, bad
		}
		if n1 == num && (want == anyWire || t == want) {
			v, typ, found = val, t, true
		}
		if bad != "" {
			return v, typ, found, bad
		}
		b = rest
	}
	return v, typ, found, ""
}

// pbJSONValue appends one value's JSON.
func (d *Decoder) pbJSONValue(out []byte, b []byte, typ protowire.Type, t *pbType) ([]byte, bool) {
	if typ != wireOf(t.kind) {
		return out, false
	}
	u, v, n := pbScalar(b, typ, t.kind)
	if n < 0 {
		return out, false
	}
	switch t.kind {
	case pbMessage:
		if t.wrapper {
			val, typ, found, bad := lastField(v, 1, anyWire)
			if bad != "" {
				return out, false
			}
			inner := t.msg.fields[0].t
			if !found {
				val, typ = d.proto.zero[:wireLen(wireOf(inner.kind))], wireOf(inner.kind)
			}
			return d.pbJSONValue(out, val, typ, inner)
		}
		return d.pbJSON(out, v, t)
	case pbBool:
		if u != 0 {
			return append(out, "true"...), true
		}
		return append(out, "false"...), true
	case pbFloat:
		return appendJavaFloat(out, float64(math.Float32frombits(uint32(u))), 32), true
	case pbDouble:
		return appendJavaFloat(out, math.Float64frombits(u), 64), true
	case pbString:
		return appendJacksonString(out, v), true
	case pbEnum:
		s, ok := t.symbol(int32(u))
		return appendJacksonString(out, []byte(s)), ok
	case pbBytes:
		out = append(out, '"')
		out = base64.StdEncoding.AppendEncode(out, v)
		return append(out, '"'), true
	case pbFixed32, pbFixed64, pbVarint:
		if t.kind == pbVarint || t.kind == pbFixed64 {
			return strconv.AppendInt(out, int64(u), 10), true
		}
		return strconv.AppendUint(out, u, 10), true
	}
	return strconv.AppendInt(out, int64(u), 10), true
}

// pbJSONRepeated appends the JSON of repeated field f's occurrences in b:
// the array of its values (packed or not), or for a map field the object
// of its entries.
func (d *Decoder) pbJSONRepeated(out []byte, b []byte, f *pbField) ([]byte, bool) {
	open, end := byte('['), byte(']')
	if f.t.mapOf {
		open, end = '{', '}'
	}
	out = append(out, open)
	start := len(out) // every element appends something: a comma goes before all but the first
	for len(b) > 0 {
		num, typ, val, rest, bad := nextField(b)
		if bad != "" {
			return out, false
		}
		b = rest
		if num != f.num {
			continue
		}
		ok := true
		switch {
		case f.t.mapOf:
			if typ != protowire.BytesType {
				continue
			}
			entry, _ := protowire.ConsumeBytes(val)
			if len(out) > start {
				out = append(out, ',')
			}
			out, ok = d.pbJSONEntry(out, entry, f.t.msg)
		case typ == protowire.BytesType && wireOf(f.t.kind) != protowire.BytesType: // packed
			p, _ := protowire.ConsumeBytes(val)
			for ok && len(p) > 0 {
				_, _, m := pbScalar(p, wireOf(f.t.kind), f.t.kind)
				if m < 0 {
					return out, false
				}
				if len(out) > start {
					out = append(out, ',')
				}
				out, ok = d.pbJSONValue(out, p[:m], wireOf(f.t.kind), f.t)
				p = p[m:]
			}
		default:
			if len(out) > start {
				out = append(out, ',')
			}
			out, ok = d.pbJSONValue(out, val, typ, f.t)
		}
		if !ok {
			return out, false
		}
	}
	return append(out, end), true
}

// pbJSONEntry appends "key":value of a map entry message.
func (d *Decoder) pbJSONEntry(out []byte, entry []byte, m *pbMsg) ([]byte, bool) {
	if len(m.fields) != 2 {
		return out, false
	}
	kv, kt, kfound, bad := lastField(entry, 1, anyWire)
	if bad != "" {
		return out, false
	}
	var key []byte
	if kfound {
		if _, s, n := pbScalar(kv, kt, m.fields[0].t.kind); n >= 0 && kt == protowire.BytesType {
			key = s
		} else if n >= 0 {
			d.tbuf, _ = d.pbJSONValue(d.tbuf[:0], kv, kt, m.fields[0].t)
			key = d.tbuf
		}
	}
	out = appendJacksonString(out, key)
	out = append(out, ':')
	vv, vt, vfound, bad := lastField(entry, 2, anyWire)
	if bad != "" {
		return out, false
	}
	vtyp := m.fields[1].t
	if !vfound {
		if vtyp.presence || vtyp.kind == pbMessage {
			return append(out, "null"...), true
		}
		vv, vt = d.proto.zero[:wireLen(wireOf(vtyp.kind))], wireOf(vtyp.kind)
	}
	return d.pbJSONValue(out, vv, vt, vtyp)
}

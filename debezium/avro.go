package debezium

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"strconv"
	"time"

	"github.com/cdcjoin/cdcjoin/row"
)

// Avro decoding. A record names its writer schema by id (SchemaOf); the
// first record of an id compiles the schema once into a program: the
// envelope's fields by role, and the row record's fields matched to the
// projected columns, each with the recipe (colInfo) of the Kafka Connect
// type the Avro type stands for — the same recipes the JSON path resolves
// from a JsonConverter schema, so that both formats decode a column to the
// same row.Value. Decoding then walks the binary value once, skipping
// unprojected fields without allocating.

// avroEnvelope is a compiled value schema.
type avroEnvelope struct {
	err    *DecodeError // the schema cannot be read for this projection: every record with it is bad
	fields []avroEnvField
	proj   *projection
	row    avroRow
	// missing is the first projected column the row schema lacks (-1:
	// none): an `after` image misses it, as ErrMissingColumn.
	missing int
}

type avroEnvField struct {
	role int
	t    *avroType
	src  []int // roleSource: per source field, its sourceField role
}

// avroRow is a row record's fields matched to projected columns.
type avroRow struct {
	cols []int // per field: the projected column, -1 when not projected
}

// avroKey is a compiled key schema.
type avroKey struct {
	err  *DecodeError
	t    *avroType // the key record (nil: a key that projects nothing)
	proj *projection
	row  avroRow
}

// avroSchemas caches compiled programs by id.
type avroSchemas struct {
	vals map[SchemaID]*avroEnvelope
	keys map[SchemaID]*avroKey
}

// avroEnvelopeOf returns the compiled value schema id.
func (d *Decoder) avroEnvelopeOf(id SchemaID) (*avroEnvelope, error) {
	return compiled(&d.avro.vals, id, func() (*avroEnvelope, error) {
		s, de, err := d.registrySchema(id, "value", "AVRO")
		if err != nil {
			return nil, err
		}
		e := &avroEnvelope{err: de, missing: -1}
		if de == nil {
			d.compileEnvelope(e, id, s.Text)
		}
		return e, nil
	})
}

func (d *Decoder) compileEnvelope(e *avroEnvelope, id SchemaID, text string) {
	root, conn, err := parseAvro(text)
	if err != nil {
		e.err = schemaErr(id, "value.schema", "not an Avro schema cdcjoin can read: "+err.Error())
		return
	}
	if root.kind != aRecord {
		e.err = schemaErr(id, "value.schema", "not a Debezium envelope (the schema is not a record)")
		return
	}
	var de *DecodeError
	if e.proj, de = d.envelopeProjection(id, conn); de != nil {
		e.err = de
		return
	}
	var rowT *avroType
	for _, f := range root.fields {
		ef := avroEnvField{t: f.t, role: envelopeRole(f.name)}
		switch ef.role {
		case roleBefore, roleAfter:
			rt := nullable(f.t)
			if rt == nil || rt.kind != aRecord {
				e.err = schemaErr(id, "value.schema."+f.name, "the row image is not a record (or null)")
				return
			}
			if rowT == nil {
				rowT = rt
			} else if rowT != rt {
				e.err = schemaErr(id, "value.schema."+f.name, "before and after have different row schemas")
				return
			}
		case roleSource:
			if st := nullable(f.t); st != nil && st.kind == aRecord {
				for _, sf := range st.fields {
					ef.src = append(ef.src, sourceFields[sf.name])
				}
			} else {
				ef.role = roleSkip
			}
		}
		e.fields = append(e.fields, ef)
	}
	if rowT == nil {
		e.err = schemaErr(id, "value.schema", schemaErrNoRowStruct)
		return
	}
	e.row = d.matchRow(rowT)
	e.missing = d.firstMissing(e.row.cols)
	if de := d.checkAvroKinds(id, rowT, e.row, e.proj, "value.schema"); de != nil {
		e.err = de
	}
}

// nullable returns t, or the one non-null branch of a union with null
// (nil for other unions).
func nullable(t *avroType) *avroType {
	if t.kind != aUnion {
		return t
	}
	if len(t.branches) == 2 && t.null >= 0 {
		return t.branches[1-t.null]
	}
	if len(t.branches) == 1 {
		return t.branches[0]
	}
	return nil
}

// matchRow matches a row record's fields to the projected columns.
func (d *Decoder) matchRow(t *avroType) avroRow {
	return avroRow{cols: d.matchNames(len(t.fields), func(i int) string { return t.fields[i].name })}
}

// checkAvroKinds checks that each projected field's Avro type is one its
// recipe can read (the Connect type came from it, so a mismatch means a
// schema cdcjoin does not understand).
func (d *Decoder) checkAvroKinds(id SchemaID, t *avroType, r avroRow, p *projection, path string) *DecodeError {
	for i, j := range r.cols {
		if j < 0 {
			continue
		}
		if !avroFits(nullable(t.fields[i].t), &p.infos[j]) {
			return schemaErr(id, path+"."+t.fields[i].name, "an Avro type cdcjoin cannot read as "+describeType(p.types[j]))
		}
	}
	return nil
}

func avroFits(t *avroType, info *colInfo) bool {
	if t == nil {
		return false
	}
	switch info.conv {
	case convInt:
		return t.kind == aInt || t.kind == aLong
	case convFloat:
		return t.kind == aFloat || t.kind == aDouble
	case convBool:
		return t.kind == aBool
	case convString, convZoned:
		return t.kind == aString || t.kind == aEnum
	case convBytes, convDecimal:
		return t.kind == aBytes || t.kind == aFixed
	case convVarDecimal:
		return t.kind == aRecord
	case convArray:
		return t.kind == aArray && avroFits(nullable(t.items), info.elem)
	case convRaw:
		return true
	case convInfer:
		return true
	}
	return false
}

// avroKeyOf returns the compiled key schema id.
func (d *Decoder) avroKeyOf(id SchemaID) (*avroKey, error) {
	return compiled(&d.avro.keys, id, func() (*avroKey, error) {
		s, de, err := d.registrySchema(id, "key", "AVRO")
		if err != nil {
			return nil, err
		}
		k := &avroKey{err: de}
		if de == nil {
			d.compileKey(k, id, s.Text)
		}
		return k, nil
	})
}

func (d *Decoder) compileKey(k *avroKey, id SchemaID, text string) {
	root, conn, err := parseAvro(text)
	if err != nil {
		k.err = schemaErr(id, "key.schema", "not an Avro schema cdcjoin can read: "+err.Error())
		return
	}
	var de *DecodeError
	if root.kind != aRecord {
		k.proj = d.decl // a key that is not a struct projects nothing
		return
	}
	if k.proj, de = d.projectSchema(id, conn, "key.schema"); de != nil {
		k.err = de
		return
	}
	k.t, k.row = root, d.matchRow(root)
	k.err = d.checkAvroKinds(id, root, k.row, k.proj, "key.schema")
}

// decodeAvroValue decodes an Avro envelope (the value, after its schema id)
// into ev and returns its projection; an error is a *DecodeError (a bad
// record) or the schema source's failure.
func (d *Decoder) decodeAvroValue(id SchemaID, payload []byte, ev *Event) (*projection, error) {
	e, err := d.avroEnvelopeOf(id)
	if err != nil {
		return nil, err
	}
	if e.err != nil {
		return nil, e.err
	}
	r := avroReader{b: payload}
	if de := d.avroEnvelope(&r, e, id, ev); de != nil {
		return nil, de
	}
	if r.i != len(r.b) {
		return nil, badBody(id, "value", strconv.Itoa(len(r.b)-r.i)+" bytes after the record")
	}
	return e.proj, nil
}

// decodeAvroKey decodes an Avro key (after its schema id) into ev.Key,
// with errors as decodeAvroValue's.
func (d *Decoder) decodeAvroKey(kid SchemaID, kp []byte, ev *Event) error {
	k, err := d.avroKeyOf(kid)
	if err != nil {
		return err
	}
	if k.err != nil {
		return k.err
	}
	if k.t == nil {
		return nil
	}
	kr := avroReader{b: kp}
	if de := d.avroRecord(&kr, k.t, k.row, k.proj, &ev.Key, "key", kid); de != nil {
		return de
	}
	if kr.i != len(kr.b) {
		return badBody(kid, "key", strconv.Itoa(len(kr.b)-kr.i)+" bytes after the key")
	}
	return nil
}

func (d *Decoder) avroEnvelope(r *avroReader, e *avroEnvelope, id SchemaID, ev *Event) *DecodeError {
	for i := range e.fields {
		f := &e.fields[i]
		switch f.role {
		case roleBefore, roleAfter:
			t := f.t
			if t.kind == aUnion {
				b, ok := r.branch(t)
				if !ok {
					return badBody(id, "value", "truncated union")
				}
				if t = t.branches[b]; t.kind == aNull {
					continue
				}
			}
			img, path := &ev.Before, "before"
			if f.role == roleAfter {
				img, path = &ev.After, "after"
				if e.missing >= 0 {
					return d.missingColumn(id, e.missing)
				}
			}
			if de := d.avroRecord(r, t, e.row, e.proj, img, "value."+path, id); de != nil {
				return de
			}
		case roleSource:
			if de := d.avroSource(r, f, &ev.Source, id); de != nil {
				return de
			}
		case roleOp:
			s, ok := r.stringOf(f.t)
			if !ok {
				return badBody(id, "value.op", "truncated op")
			}
			if de := setOp(ev, s); de != nil {
				return de
			}
		case roleTsMs:
			v, _, ok := r.longOf(f.t)
			if !ok {
				return badBody(id, "value.ts_ms", "truncated ts_ms")
			}
			ev.TsMs = v
		default:
			if !r.skip(f.t) {
				return badBody(id, "value", "truncated")
			}
		}
	}
	return nil
}

func (d *Decoder) avroSource(r *avroReader, f *avroEnvField, src *Source, id SchemaID) *DecodeError {
	t := f.t
	if t.kind == aUnion {
		b, ok := r.branch(t)
		if !ok {
			return badBody(id, "value.source", "truncated")
		}
		if t = t.branches[b]; t.kind == aNull {
			return nil
		}
	}
	for i, sf := range t.fields {
		var ok = true
		var s []byte
		var v int64
		switch f.src[i] {
		case srcTsMs, srcLSN, srcTxID, srcPos, srcRow:
			v, _, ok = r.longOf(sf.t)
			setSourceInt(src, f.src[i], v)
		case srcSkip:
			ok = r.skip(sf.t)
		default:
			if s, ok = r.stringOf(sf.t); ok && s != nil {
				d.setSourceString(src, f.src[i], s)
			}
		}
		if !ok {
			return badBody(id, "value.source."+sf.name, "truncated")
		}
	}
	return nil
}

// avroRecord decodes a row record into img.
func (d *Decoder) avroRecord(r *avroReader, t *avroType, rp avroRow, p *projection, img *Row, path string, id SchemaID) *DecodeError {
	img.Present = true
	for i := range t.fields {
		f := &t.fields[i]
		j := rp.cols[i]
		if j < 0 {
			if !r.skip(f.t) {
				return badBody(id, path+"."+f.name, "truncated")
			}
			continue
		}
		info := &p.infos[j]
		err := d.avroValue(r, f.t, info, &img.Values[j], id)
		if err == nil && info.key {
			err = d.keyValue(j, info, &img.Values[j])
		}
		if err != nil {
			if err.Field == "" {
				err.Field = path + "." + d.cols[j]
			}
			return err
		}
	}
	return nil
}

// avroValue decodes one column value of Avro type t per info.
func (d *Decoder) avroValue(r *avroReader, t *avroType, info *colInfo, out *row.Value, id SchemaID) *DecodeError {
	if t.kind == aUnion {
		b, ok := r.branch(t)
		if !ok {
			return badBody(id, "", "truncated union")
		}
		t = t.branches[b]
	}
	if t.kind == aNull {
		*out = row.Value{}
		return nil
	}
	switch info.conv {
	case convRaw:
		start := r.i
		var ok bool
		d.jbuf, ok = d.avroJSON(d.jbuf[:0], r, t)
		if !ok {
			r.i = start
			return badBody(id, "", "truncated")
		}
		if d.depth == 0 && d.ph.isRaw(d.jbuf) {
			*out = row.Unavailable()
		} else {
			*out = row.String(d.str(d.jbuf))
		}
		return nil
	case convArray:
		return d.avroArray(r, t, info, out, id)
	case convVarDecimal:
		return d.avroVarDecimal(r, t, info, out, id)
	}
	switch t.kind {
	case aBool:
		if r.i >= len(r.b) {
			return badBody(id, "", "truncated")
		}
		*out = row.Bool(r.b[r.i] != 0)
		r.i++
		if info.conv != convBool && info.conv != convInfer {
			return mismatch(info, "boolean")
		}
		return nil
	case aInt, aLong:
		v, ok := r.varint()
		if !ok {
			return badBody(id, "", "truncated number")
		}
		return intValue(v, info, out)
	case aFloat:
		if len(r.b)-r.i < 4 {
			return badBody(id, "", "truncated float")
		}
		f := math.Float32frombits(binary.LittleEndian.Uint32(r.b[r.i:]))
		r.i += 4
		// The digits JsonConverter writes for a FLOAT32 (Java's
		// Float.toString: the shortest that reads back as the float),
		// read as a float64, as the JSON path does.
		d.tbuf = strconv.AppendFloat(d.tbuf[:0], float64(f), 'g', -1, 32)
		v, _ := strconv.ParseFloat(view(d.tbuf), 64)
		*out = row.Float(v)
		return nil
	case aDouble:
		if len(r.b)-r.i < 8 {
			return badBody(id, "", "truncated double")
		}
		*out = row.Float(math.Float64frombits(binary.LittleEndian.Uint64(r.b[r.i:])))
		r.i += 8
		return nil
	case aString, aEnum:
		s, ok := r.stringOf(t)
		if !ok {
			return badBody(id, "", "truncated string")
		}
		if d.depth == 0 && d.ph.isString(s) {
			*out = row.Unavailable()
			return nil
		}
		switch info.conv {
		case convZoned:
			ts, perr := time.Parse(time.RFC3339Nano, view(s))
			if perr != nil {
				return mismatch(info, "unparsable timestamp "+strconv.Quote(string(s)))
			}
			*out = row.Timestamp(ts.UnixMicro())
		default:
			*out = row.String(d.str(s))
		}
		return nil
	case aBytes, aFixed:
		b, ok := r.bytesOf(t)
		if !ok {
			return badBody(id, "", "truncated bytes")
		}
		if d.depth == 0 && string(b) == d.ph.text {
			*out = row.Unavailable()
			return nil
		}
		if info.conv == convDecimal {
			return d.decimal(b, info.scale, info, out)
		}
		*out = row.Value{Kind: row.KindBytes, Str: d.str(b)}
		return nil
	}
	if !r.skip(t) {
		return badBody(id, "", "truncated")
	}
	return mismatch(info, "an Avro value of another type")
}

// avroVarDecimal decodes a VariableScaleDecimal record {scale, value}.
func (d *Decoder) avroVarDecimal(r *avroReader, t *avroType, info *colInfo, out *row.Value, id SchemaID) *DecodeError {
	scale, haveScale := int64(0), false
	var b []byte
	for _, f := range t.fields {
		ft := nullable(f.t)
		switch {
		case f.name == "scale" && ft != nil && (ft.kind == aInt || ft.kind == aLong):
			v, present, ok := r.longOf(f.t)
			if !ok {
				return badBody(id, "", "truncated")
			}
			scale, haveScale = v, present
		case f.name == "value" && ft != nil && ft.kind == aBytes:
			v, ok := r.bytesOf(f.t)
			if !ok {
				return badBody(id, "", "truncated")
			}
			b = v
		default:
			if !r.skip(f.t) {
				return badBody(id, "", "truncated")
			}
		}
	}
	if !haveScale || b == nil || scale > maxScale || scale < -maxScale {
		return mismatch(info, "malformed VariableScaleDecimal")
	}
	return d.decimal(b, int(scale), info, out)
}

// avroArray decodes an array per info.elem. An array that is one of
// Debezium's unchanged-TOAST placeholders becomes row.KindUnavailable.
func (d *Decoder) avroArray(r *avroReader, t *avroType, info *colInfo, out *row.Value, id SchemaID) *DecodeError {
	if t.kind != aArray {
		return mismatch(info, "an Avro value that is not an array")
	}
	a, err := d.beginArray(info)
	if err != nil {
		return err
	}
	for err == nil {
		count, ok := r.blockCount()
		if !ok {
			err = badBody(id, "", "truncated array")
			break
		}
		if count == 0 {
			break
		}
		for ; count > 0; count-- {
			v := d.elemValue(&a)
			if err = d.avroValue(r, t.items, info.elem, v, id); err != nil {
				break
			}
			d.addElem(&a, v)
		}
	}
	return d.endArray(&a, err, out)
}

// binArray is an Avro or Protobuf array being decoded at one nesting
// level (beginArray, elemValue, addElem, endArray).
type binArray struct {
	level     int
	buf       []byte // the elements' encoding
	transient bool   // the decoder's transient flag outside the array
	ph, ints  bool   // it may still be a TOAST placeholder; it has non-string elements
	n         int
}

// beginArray starts an array per info.elem.
func (d *Decoder) beginArray(info *colInfo) (binArray, *DecodeError) {
	if d.depth >= maxArrayDepth {
		return binArray{}, mismatch(info, "arrays nested more than "+strconv.Itoa(maxArrayDepth)+" deep")
	}
	a := binArray{level: d.depth, transient: d.transient, ph: d.depth == 0}
	if len(d.abuf) <= a.level {
		d.abuf = append(d.abuf, nil)
	}
	a.buf = d.abuf[a.level][:0]
	d.depth, d.transient = a.level+1, true
	return a, nil
}

// elemValue returns the array level's element value, zeroed.
func (d *Decoder) elemValue(a *binArray) *row.Value {
	v := &d.elem[a.level]
	*v = row.Value{}
	return v
}

// addElem appends a decoded element.
func (d *Decoder) addElem(a *binArray, v *row.Value) {
	if a.ph {
		a.ph = d.ph.arrayElem(a.n, *v)
		a.ints = a.ints || v.Kind != row.KindString && v.Kind != row.KindBytes
	}
	a.n++
	a.buf = row.AppendRowValue(a.buf, *v)
}

// endArray ends the array (err: decoding it failed): one that is one of
// Debezium's unchanged-TOAST placeholders becomes row.KindUnavailable.
func (d *Decoder) endArray(a *binArray, err *DecodeError, out *row.Value) *DecodeError {
	d.depth, d.transient = a.level, a.transient
	d.abuf[a.level] = a.buf
	if err != nil {
		return err
	}
	if a.ph && d.ph.arrayLen(a.n, a.ints) {
		*out = row.Unavailable()
		return nil
	}
	*out = row.Value{Kind: row.KindArray, Str: d.str(a.buf)}
	return nil
}

// avroReader reads Avro's binary encoding.
type avroReader struct {
	b []byte
	i int
}

// varint reads a zigzag varint (int and long).
func (r *avroReader) varint() (int64, bool) {
	var u uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if r.i >= len(r.b) {
			return 0, false
		}
		c := r.b[r.i]
		r.i++
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return int64(u>>1) ^ -int64(u&1), true
		}
	}
	return 0, false
}

// branch reads a union's branch index.
func (r *avroReader) branch(t *avroType) (int, bool) {
	v, ok := r.varint()
	if !ok || v < 0 || v >= int64(len(t.branches)) {
		return 0, false
	}
	return int(v), true
}

// raw reads n bytes.
func (r *avroReader) raw(n int64) ([]byte, bool) {
	if n < 0 || n > int64(len(r.b)-r.i) {
		return nil, false
	}
	b := r.b[r.i : r.i+int(n)]
	r.i += int(n)
	return b, true
}

// bytesOf reads bytes, a string or a fixed of type t (a union with null:
// nil when null).
func (r *avroReader) bytesOf(t *avroType) ([]byte, bool) {
	if t.kind == aUnion {
		b, ok := r.branch(t)
		if !ok {
			return nil, false
		}
		t = t.branches[b]
	}
	switch t.kind {
	case aNull:
		return nil, true
	case aFixed:
		return r.raw(int64(t.size))
	case aBytes, aString:
		n, ok := r.varint()
		if !ok {
			return nil, false
		}
		b, ok := r.raw(n)
		if b == nil && ok {
			b = []byte{}
		}
		return b, ok
	}
	return nil, r.skip(t)
}

// stringOf reads a string or an enum's symbol (nil for null).
func (r *avroReader) stringOf(t *avroType) ([]byte, bool) {
	if t.kind == aUnion {
		b, ok := r.branch(t)
		if !ok {
			return nil, false
		}
		t = t.branches[b]
	}
	if t.kind == aEnum {
		v, ok := r.varint()
		if !ok || v < 0 || v >= int64(len(t.symbols)) {
			return nil, false
		}
		s := t.symbols[v]
		return []byte(s)[:len(s):len(s)], true
	}
	if t.kind != aString && t.kind != aBytes {
		return nil, r.skip(t)
	}
	return r.bytesOf(t)
}

// longOf reads an int or long (present=false for null or another type,
// which is skipped).
func (r *avroReader) longOf(t *avroType) (v int64, present, ok bool) {
	if t.kind == aUnion {
		b, ok := r.branch(t)
		if !ok {
			return 0, false, false
		}
		t = t.branches[b]
	}
	if t.kind != aInt && t.kind != aLong {
		return 0, false, r.skip(t)
	}
	v, ok = r.varint()
	return v, ok, ok
}

// blockCount reads an array or map block's count (a negative count is
// followed by the block's size in bytes).
func (r *avroReader) blockCount() (int64, bool) {
	n, ok := r.varint()
	if !ok {
		return 0, false
	}
	if n < 0 {
		if _, ok = r.varint(); !ok || n == math.MinInt64 {
			return 0, false
		}
		n = -n
	}
	if n > int64(len(r.b)-r.i)+1 && n > 1<<20 {
		return 0, false // more items than bytes left: corrupt
	}
	return n, true
}

// skip skips a value of type t.
func (r *avroReader) skip(t *avroType) bool {
	switch t.kind {
	case aNull:
		return true
	case aBool:
		_, ok := r.raw(1)
		return ok
	case aInt, aLong, aEnum:
		_, ok := r.varint()
		return ok
	case aFloat:
		_, ok := r.raw(4)
		return ok
	case aDouble:
		_, ok := r.raw(8)
		return ok
	case aBytes, aString:
		n, ok := r.varint()
		if !ok {
			return false
		}
		_, ok = r.raw(n)
		return ok
	case aFixed:
		_, ok := r.raw(int64(t.size))
		return ok
	case aUnion:
		b, ok := r.branch(t)
		return ok && r.skip(t.branches[b])
	case aRecord:
		for i := range t.fields {
			if !r.skip(t.fields[i].t) {
				return false
			}
		}
		return true
	case aArray, aMap:
		for {
			n, ok := r.varint()
			if !ok {
				return false
			}
			if n == 0 {
				return true
			}
			if n < 0 {
				size, ok := r.varint()
				if !ok {
					return false
				}
				if _, ok := r.raw(size); !ok {
					return false
				}
				continue
			}
			for ; n > 0; n-- {
				if t.kind == aMap && !r.skip(&avroType{kind: aString}) {
					return false
				}
				if !r.skip(t.items) {
					return false
				}
			}
		}
	}
	return false
}

// avroJSON appends the JSON text JsonConverter writes for a Connect struct
// or map value of Avro type t (fields in schema order, bytes as base64,
// strings escaped as Jackson does, floats as Java prints them), for
// columns kept as their JSON text (geometries, hstore maps). ok=false: the
// value is truncated.
func (d *Decoder) avroJSON(b []byte, r *avroReader, t *avroType) ([]byte, bool) {
	switch t.kind {
	case aNull:
		return append(b, "null"...), true
	case aBool:
		if r.i >= len(r.b) {
			return b, false
		}
		r.i++
		if r.b[r.i-1] != 0 {
			return append(b, "true"...), true
		}
		return append(b, "false"...), true
	case aInt, aLong:
		v, ok := r.varint()
		return strconv.AppendInt(b, v, 10), ok
	case aFloat:
		if len(r.b)-r.i < 4 {
			return b, false
		}
		f := math.Float32frombits(binary.LittleEndian.Uint32(r.b[r.i:]))
		r.i += 4
		return appendJavaFloat(b, float64(f), 32), true
	case aDouble:
		if len(r.b)-r.i < 8 {
			return b, false
		}
		f := math.Float64frombits(binary.LittleEndian.Uint64(r.b[r.i:]))
		r.i += 8
		return appendJavaFloat(b, f, 64), true
	case aString, aEnum:
		s, ok := r.stringOf(t)
		return appendJacksonString(b, s), ok
	case aBytes, aFixed:
		v, ok := r.bytesOf(t)
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, v)
		return append(b, '"'), ok
	case aUnion:
		br, ok := r.branch(t)
		if !ok {
			return b, false
		}
		return d.avroJSON(b, r, t.branches[br])
	case aRecord:
		b = append(b, '{')
		for i, f := range t.fields {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJacksonString(b, []byte(f.name))
			b = append(b, ':')
			var ok bool
			if b, ok = d.avroJSON(b, r, f.t); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	case aArray, aMap:
		open, end := byte('['), byte(']')
		if t.kind == aMap {
			open, end = '{', '}'
		}
		b = append(b, open)
		first := true
		for {
			n, ok := r.blockCount()
			if !ok {
				return b, false
			}
			if n == 0 {
				return append(b, end), true
			}
			for ; n > 0; n-- {
				if !first {
					b = append(b, ',')
				}
				first = false
				if t.kind == aMap {
					k, ok := r.bytesOf(&avroType{kind: aString})
					if !ok {
						return b, false
					}
					b = append(appendJacksonString(b, k), ':')
				}
				if b, ok = d.avroJSON(b, r, t.items); !ok {
					return b, false
				}
			}
		}
	}
	return b, false
}

// appendJacksonString appends s as a JSON string the way Jackson escapes
// it: quotes, backslashes and control characters; nothing else.
func appendJacksonString(b []byte, s []byte) []byte {
	b = append(b, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c >= 0x20:
			b = append(b, c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		default:
			const hex = "0123456789ABCDEF"
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
	}
	return append(b, '"')
}

// appendJavaFloat appends f as Java's Double.toString (bits 64) or
// Float.toString (32) prints it, and as Jackson writes non-finite values
// (as strings): plain digits with at least one fraction digit for
// 1e-3 <= |f| < 1e7, else d.dddE±n.
func appendJavaFloat(b []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Infinity"`...)
	case f == 0:
		if math.Signbit(f) {
			return append(b, "-0.0"...)
		}
		return append(b, "0.0"...)
	}
	if a := math.Abs(f); a >= 1e-3 && a < 1e7 {
		start := len(b)
		b = strconv.AppendFloat(b, f, 'f', -1, bits)
		for _, c := range b[start:] {
			if c == '.' {
				return b
			}
		}
		return append(b, ".0"...)
	}
	var tmp [32]byte
	e := strconv.AppendFloat(tmp[:0], f, 'e', -1, bits) // d.ddde±XX
	i := 0
	for e[i] != 'e' {
		i++
	}
	mant, exp := e[:i], e[i+1:]
	b = append(b, mant...)
	hasDot := false
	for _, c := range mant {
		hasDot = hasDot || c == '.'
	}
	if !hasDot {
		b = append(b, ".0"...)
	}
	b = append(b, 'E')
	if exp[0] == '-' {
		b = append(b, '-')
	}
	exp = exp[1:]
	for len(exp) > 1 && exp[0] == '0' {
		exp = exp[1:]
	}
	return append(b, exp...)
}

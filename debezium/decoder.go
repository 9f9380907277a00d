package debezium

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/cdcjoin/cdcjoin/row"
)

// Options configure a Decoder.
type Options struct {
	// MaxRecordBytes bounds the size of a record's key and of its value; a
	// larger one fails with ErrOversized. 0 means no limit.
	MaxRecordBytes int
	// Types declares the projected columns' types (by position, as the
	// columns given to NewDecoder; a missing or zero entry declares
	// nothing): the Kafka Connect schema of each, e.g. from pgschema.Column.
	// A record without a schema is decoded by them exactly as if it had
	// one; a record with a schema must agree with them (same Kind, and the
	// same scale for decimals), or it is a bad record (ErrTypeMismatch).
	Types []row.ColumnType
	// KeyColumns says that the first KeyColumns projected columns are keys
	// (the primary key, then the foreign key). A key value of variable
	// scale (no schema or declared type, or a VariableScaleDecimal) is made
	// canonical, so that equal numbers are equal keys: an integral number
	// that fits int64 is row.KindInt whatever its spelling (258, 258.0,
	// 2.58e2), any other the shortest decimal (1e30 and
	// 1000000000000000000000000000000 alike, 1.50 as 1.5). Without a type,
	// an object or array in a key column is a bad record, and each key
	// column keeps the class of the first value the decoder saw (a number,
	// a string, a decimal of one scale, a date, …): a value of another
	// class is a bad record (ErrTypeMismatch) rather than a second key for
	// the same row. A column whose first number was an integer keeps
	// integers: a number that is not one (34.5, 1e30 beyond int64) is a bad
	// record too, never a key no row can have. See KeyTypes for keeping
	// what was learned across restarts; declared types make it
	// unnecessary.
	KeyColumns int
	// KeyClasses, if set, holds the key columns' classes in place of the
	// decoder's own table, at the slots KeySlots gives per key column:
	// decoders that share it keep linked columns to one class (job.Decoder
	// links a child's foreign key to the parent's key, so that a foreign
	// key no parent key can equal is a bad record).
	KeyClasses *KeyClasses
	KeySlots   []int
	// Placeholder is the connector's unavailable.value.placeholder (default
	// "__debezium_unavailable_value").
	Placeholder string
	// Plain decodes record values that are plain JSON objects, not
	// Debezium envelopes (an event stream written by an application): the
	// object is the row, decoded into After as an insert (OpCreate) by the
	// declared types (or inferred); a projected column it lacks is NULL.
	// null and empty values are tombstones, as in envelopes.
	Plain bool
	// Format is the records' encoding (default FormatJSON). Avro and
	// Protobuf records name their schema by a registry id (SchemaOf),
	// resolved through Schemas.
	Format Format
	// Schemas resolves the schema ids of Avro and Protobuf records. A
	// decoder asks it once per id and caches what it compiled.
	Schemas SchemaSource
}

// Decoder decodes Debezium change events in Kafka Connect JsonConverter
// format, with or without schemas (decided per record), projecting the
// before/after images and the record key onto a fixed list of columns.
//
// A Decoder is not safe for concurrent use: use one per goroutine. It caches
// parsed schemas (keyed by the schema block's exact bytes, at most
// maxCachedSchemas per kind), so a repeated schema costs one comparison.
//
// String values are carved out of decoder-owned chunks of memory (a few KiB
// each) to avoid one allocation per value: they are immutable and may be kept
// forever, but keeping one keeps its chunk alive.
type Decoder struct {
	cols  []string
	index map[string]int // name -> column, used when there are many columns
	opts  Options
	vals  schemaCache // envelope (value) schemas
	keys  schemaCache // key schemas
	seen  []bool      // per column: present in the image being decoded

	decl     *projection  // declared types, the recipe of records without a schema
	declErr  *DecodeError // a declared type that cannot be decoded
	declared bool         // some column has a declared type
	keyTab   *KeyClasses  // the key columns' classes (Options.KeyClasses, or the decoder's own)
	// varDecimal: the value just decoded was a VariableScaleDecimal
	// (keyValue: a numeric column, integral values or not).
	varDecimal bool
	slots      []int // per key column: its slot in keyTab
	ph         placeholders

	abuf      [][]byte                 // per array nesting level: the elements' encoding
	elem      [maxArrayDepth]row.Value // per array nesting level: the element being decoded (a local would escape: the decoders recurse)
	depth     int                      // array nesting level of the value being decoded
	transient bool                     // str may return views (array elements, copied at once)

	avro  avroSchemas // compiled Avro schemas by id
	proto protoSchemas
	jbuf  []byte // JSON text of Avro/Protobuf structs and maps
	kbuf  []byte // unescaped object keys
	sbuf  []byte // unescaped string values
	bbuf  []byte // base64-decoded bytes
	dbuf  []byte // decimal digits
	tbuf  []byte // formatted text
	arena []byte // string storage, see str

	// known is, per column, the type the last schema that had the column
	// gave it (for the message when a later schema drops it); knownOf is
	// the types slice it was taken from.
	known   []row.ColumnType
	knownOf *row.ColumnType

	// Interned source strings: they repeat on every record of a table.
	lastDB, lastSchema, lastTable, lastFile, lastSnapshot string
}

// noteTypes remembers the column types of a schema a record decoded with.
func (d *Decoder) noteTypes(types []row.ColumnType) {
	if len(types) == 0 || &types[0] == d.knownOf {
		return
	}
	d.knownOf = &types[0]
	if d.known == nil {
		d.known = make([]row.ColumnType, len(d.cols))
	}
	for j, t := range types {
		if t.Known() {
			d.known[j] = t
		}
	}
}

// missingReason explains a selected column missing from where (a row
// image or schema): the column was dropped or renamed in the source.
func (d *Decoder) missingReason(j int, where string) string {
	was := ""
	if j < len(d.known) && d.known[j].Known() {
		was = "; earlier records had it as " + describeType(d.known[j])
	}
	return "the join's column " + d.cols[j] + " is absent from " + where + was +
		" (a DROP COLUMN or RENAME COLUMN in the source?): remove it from the join's select (or key) and rebuild the job, or restore the column in the source"
}

// linearMatchMax is the number of columns up to which field names are
// matched by a linear scan (faster than a map for a few columns).
const linearMatchMax = 8

// Arena sizes for str.
const (
	arenaChunk     = 8 << 10
	arenaMaxString = 1 << 10
)

// NewDecoder returns a decoder projecting before/after/key to columns (in
// that order). Column names should be distinct: of duplicates only the first
// is filled (and an `after` image then always misses the others).
func NewDecoder(columns []string, opts Options) *Decoder {
	opts.KeyColumns = min(max(opts.KeyColumns, 0), len(columns))
	d := &Decoder{
		cols: slices.Clone(columns),
		opts: opts,
		vals: newSchemaCache(),
		keys: newSchemaCache(),
		seen: make([]bool, len(columns)),
		ph:   newPlaceholders(opts.Placeholder),
	}
	d.keyTab, d.slots = opts.KeyClasses, opts.KeySlots
	if d.keyTab == nil || len(d.slots) != opts.KeyColumns {
		d.keyTab, d.slots = NewKeyClasses(opts.KeyColumns), make([]int, opts.KeyColumns)
		for i := range d.slots {
			d.slots[i] = i
		}
	}
	d.decl = &projection{types: make([]row.ColumnType, len(columns)), infos: make([]colInfo, len(columns))}
	for i := range columns {
		ci := colInfo{conv: convInfer, scale: -1}
		if i < len(opts.Types) && opts.Types[i].Known() {
			ct := cloneType(opts.Types[i])
			var err *DecodeError
			if ci, err = resolve(&ct); err != nil && d.declErr == nil {
				err.Field, err.Reason = columns[i], "declared type: "+err.Reason
				d.declErr = err
			}
			d.decl.types[i], d.declared = ct, true
			ci.declared = true
		}
		ci.key = i < opts.KeyColumns
		d.decl.infos[i] = ci
	}
	if len(columns) > linearMatchMax {
		d.index = make(map[string]int, len(columns))
		for i, c := range columns {
			if _, dup := d.index[c]; !dup {
				d.index[c] = i
			}
		}
	}
	return d
}

// Columns returns the projected column names (not to be modified).
func (d *Decoder) Columns() []string { return d.cols }

// cloneType copies t and its element types, which resolve sets the Kinds of.
func cloneType(t row.ColumnType) row.ColumnType {
	if t.Elem != nil {
		e := cloneType(*t.Elem)
		t.Elem = &e
	}
	return t
}

// Decode decodes one Kafka record; key and value are the raw record bytes,
// either may be nil.
//
// ok=false with err=nil means a tombstone (nil or empty value, JSON null, or
// a schema-wrapped null payload): skip it. Any other value that is not a
// JSON object is a bad record (ErrNotJSON for binary data such as the
// Schema Registry wire format, ErrMalformed otherwise), never a tombstone. Otherwise Decode fills *ev,
// reusing ev's Values slices (Before, After and Key all get len(Columns())
// values). ev.Types is nil without a schema; with one it is a slice shared
// with the decoder's schema cache and must not be modified.
//
// Every error is a *DecodeError (row.Kind ErrMalformed, ErrUnknownOp,
// ErrTypeMismatch, ErrOversized, ErrMissingColumn or ErrNotJSON) whose Field names the
// offending field, e.g. "payload.after.user_id" or "key.id". Decode never
// panics on any input.
func (d *Decoder) Decode(key, value []byte, ev *Event) (ok bool, err error) {
	return d.DecodeRecord(key, value, nil, ev)
}

// DecodeRecord is Decode for a record with headers (Apicurio's
// serializers may carry the schema ids there). With Options.Format avro or
// protobuf, a tombstone is a nil or empty value; a key or value in another
// form than the Schema Registry wire format, a schema id the registry does
// not have (ErrUnknownSchema, naming the id) and a body that does not
// decode with its schema are bad records (*DecodeError); a failure of the
// SchemaSource itself is a *SourceError, not a bad record.
func (d *Decoder) DecodeRecord(key, value []byte, headers []Header, ev *Event) (ok bool, err error) {
	n := len(d.cols)
	ev.Op, ev.Types, ev.Source, ev.TsMs = 0, nil, Source{}, 0
	resetRow(&ev.Before, n)
	resetRow(&ev.After, n)
	resetRow(&ev.Key, n)
	if m := d.opts.MaxRecordBytes; m > 0 {
		if len(value) > m {
			return false, oversized("value", len(value), m)
		}
		if len(key) > m {
			return false, oversized("key", len(key), m)
		}
	}
	if d.declErr != nil {
		return false, d.declErr
	}
	if d.opts.Format != FormatJSON {
		return d.decodeRegistry(key, value, headers, ev)
	}
	tomb, de := d.decodeValue(value, ev)
	if de != nil {
		return false, de
	}
	if tomb {
		return false, nil
	}
	if de := d.decodeKey(key, ev); de != nil {
		return false, de
	}
	return true, nil
}

func oversized(field string, size, limit int) *DecodeError {
	return &DecodeError{Kind: ErrOversized, Field: field, Offset: -1,
		Reason: strconv.Itoa(size) + " bytes exceed the limit of " + strconv.Itoa(limit)}
}

func resetRow(r *Row, n int) {
	r.Present = false
	if cap(r.Values) < n {
		r.Values = make([]row.Value, n)
		return
	}
	r.Values = r.Values[:n]
	clear(r.Values)
}

// at sets err's Field unless a more precise one is already set.
func at(err *DecodeError, field string) *DecodeError {
	if err != nil && err.Field == "" {
		err.Field = field
	}
	return err
}

func malformed(field, reason string) *DecodeError {
	return &DecodeError{Kind: ErrMalformed, Field: field, Reason: reason, Offset: -1}
}

// envState tracks which envelope fields a value had.
type envState struct {
	any    bool // saw before, after, source or op
	op     bool
	prefix string // "" or "payload."
}

// decodeValue decodes the record value into ev; tomb reports a tombstone.
func (d *Decoder) decodeValue(value []byte, ev *Event) (tomb bool, de *DecodeError) {
	if len(value) == 0 {
		return true, nil
	}
	s := scanner{b: value}
	switch c := s.peek(); c {
	case 0:
		if s.atEnd() {
			return false, malformed("value", "only whitespace")
		}
		return false, notJSON("value", value)
	case 'n':
		if err := s.literal("null"); err != nil {
			return false, at(err, "value")
		}
		if !s.atEnd() {
			return false, at(s.syntaxErr("trailing data"), "value")
		}
		return true, nil
	case '{':
	default:
		if c < 0x20 || c >= 0x7f || isAvroContainer(value) {
			return false, notJSON("value", value)
		}
		return false, malformed("value", "not a JSON object")
	}
	if d.opts.Plain {
		if de := d.image(&s, &ev.After, d.decl, "value", false); de != nil {
			return false, de
		}
		if !s.atEnd() {
			return false, at(s.syntaxErr("trailing data"), "value")
		}
		ev.Op = OpCreate
		if d.declared {
			ev.Types = d.decl.types
		}
		return false, nil
	}
	s.i++
	var (
		wrapped, schemaSeen, payloadSeen bool
		proj                             = d.decl
		payloadAt                        = -1
		st                               = envState{}
	)
	for first := true; ; {
		k, done, err := s.nextKey(&first, &d.kbuf)
		if err != nil {
			return false, at(err, "value")
		}
		if done {
			break
		}
		switch string(k) {
		case "schema":
			wrapped, schemaSeen = true, true
			if proj, err = d.schemaAt(&d.vals, &s, "schema", envelopeRow); err != nil {
				return false, at(err, "schema")
			}
			if proj == nil { // "schema":null
				proj = d.decl
			}
		case "payload":
			wrapped, payloadSeen = true, true
			if !schemaSeen {
				payloadAt = s.i // decode once the schema is known
				err = s.skip()
			} else {
				tomb, err = d.payload(&s, proj, ev)
			}
		default:
			err = d.envField(&s, k, d.decl, &st, ev)
		}
		if err != nil {
			return false, at(err, "value")
		}
	}
	if !s.atEnd() {
		return false, at(s.syntaxErr("trailing data"), "value")
	}
	if !wrapped {
		if d.declared {
			ev.Types = d.decl.types
		}
		return false, d.finishEnvelope(&st, ev)
	}
	if st.any {
		return false, malformed("value", "envelope fields next to schema/payload")
	}
	if !payloadSeen {
		return false, malformed("payload", "schema without payload")
	}
	if payloadAt >= 0 {
		ps := scanner{b: value, i: payloadAt}
		tomb, de = d.payload(&ps, proj, ev)
	}
	if de == nil && !tomb && (proj != d.decl || d.declared) {
		ev.Types = proj.types
		d.noteTypes(proj.types)
	}
	return tomb, de
}

// schemaAt reads a schema block (an object or null) at field ("schema" or
// "key.schema") through cache c; rowOf picks the struct to project.
func (d *Decoder) schemaAt(c *schemaCache, s *scanner, field string, rowOf func(*schemaNode) (*schemaNode, *DecodeError)) (*projection, *DecodeError) {
	switch s.peek() {
	case 'n':
		return nil, s.literal("null")
	case '{':
	default:
		return nil, malformed(field, "not a JSON object")
	}
	p, raw, h, err := c.lookup(s)
	if p != nil || err != nil {
		return p, err
	}
	ps := scanner{b: raw}
	root, err := parseSchema(&ps, 0)
	if err != nil {
		return nil, err
	}
	row, err := rowOf(root)
	if err != nil {
		return nil, at(err, field)
	}
	if p, err = buildProjection(raw, row, d.cols, d.decl); err != nil {
		err.Field = field + "." + err.Field
		return nil, err
	}
	c.store(h, p)
	return p, nil
}

// envelopeRow returns the row struct of an envelope schema: the "after"
// field, else "before".
func envelopeRow(root *schemaNode) (*schemaNode, *DecodeError) {
	if root.typ != schemaTypeStruct {
		return nil, malformed("", "envelope schema is not a struct")
	}
	row := root.fieldNamed(schemaFieldAfter)
	if row == nil || row.typ != schemaTypeStruct {
		row = root.fieldNamed(schemaFieldBefore)
	}
	if row == nil || row.typ != schemaTypeStruct {
		return nil, malformed("", schemaErrNoRowStruct)
	}
	return row, nil
}

// keyRow returns the struct of a key schema; a non-struct key projects
// nothing.
func keyRow(root *schemaNode) (*schemaNode, *DecodeError) {
	if root.typ != schemaTypeStruct {
		return nil, nil
	}
	return root, nil
}

// payload decodes a schema-wrapped payload: an envelope or null.
func (d *Decoder) payload(s *scanner, proj *projection, ev *Event) (tomb bool, de *DecodeError) {
	if isNull, err := openObject(s, "payload"); isNull || err != nil {
		return isNull, err
	}
	st := envState{prefix: "payload."}
	for first := true; ; {
		k, done, err := s.nextKey(&first, &d.kbuf)
		if err != nil {
			return false, at(err, "payload")
		}
		if done {
			break
		}
		if err := d.envField(s, k, proj, &st, ev); err != nil {
			return false, at(err, "payload")
		}
	}
	return false, d.finishEnvelope(&st, ev)
}

func (d *Decoder) finishEnvelope(st *envState, ev *Event) *DecodeError {
	if !st.any {
		return malformed("value", "not a Debezium envelope (no before, after, source or op)")
	}
	if !st.op {
		return &DecodeError{Kind: ErrUnknownOp, Field: st.prefix + "op", Reason: "missing op", Offset: -1}
	}
	return nil
}

// envField decodes one envelope member named k; unknown members are skipped.
func (d *Decoder) envField(s *scanner, k []byte, proj *projection, st *envState, ev *Event) *DecodeError {
	wrapped := st.prefix != ""
	switch string(k) {
	case "before":
		st.any = true
		return d.image(s, &ev.Before, proj, pick(wrapped, "payload.before", "before"), false)
	case "after":
		st.any = true
		return d.image(s, &ev.After, proj, pick(wrapped, "payload.after", "after"), true)
	case "source":
		st.any = true
		return d.source(s, &ev.Source, pick(wrapped, "payload.source", "source"))
	case "op":
		st.any, st.op = true, true
		field := pick(wrapped, "payload.op", "op")
		if s.peek() != '"' {
			if err := s.skip(); err != nil {
				return at(err, field)
			}
			return &DecodeError{Kind: ErrUnknownOp, Field: field, Reason: "op is not a string", Offset: -1}
		}
		raw, _, err := s.str()
		if err != nil {
			return at(err, field)
		}
		if len(raw) == 1 {
			switch op := Op(raw[0]); op {
			case OpCreate, OpUpdate, OpDelete, OpRead, OpTruncate:
				ev.Op = op
				return nil
			}
		}
		return &DecodeError{Kind: ErrUnknownOp, Field: field, Reason: "unknown op " + strconv.Quote(string(raw)), Offset: -1}
	case "ts_ms":
		v, err := d.int64Field(s)
		if err != nil {
			return at(err, pick(wrapped, "payload.ts_ms", "ts_ms"))
		}
		ev.TsMs = v
		return nil
	}
	return s.skip()
}

func pick(cond bool, a, b string) string {
	if cond {
		return a
	}
	return b
}

// match returns the index of the projected column named k, or -1.
func (d *Decoder) match(k []byte) int {
	if d.index != nil {
		if j, ok := d.index[string(k)]; ok {
			return j
		}
		return -1
	}
	for j, c := range d.cols {
		if len(c) == len(k) && c == string(k) {
			return j
		}
	}
	return -1
}

// inferElem decodes array elements without a schema or declared type.
var inferElem = colInfo{conv: convInfer, scale: -1}

// openObject consumes null (isNull) or the '{' of an object at path.
func openObject(s *scanner, path string) (isNull bool, err *DecodeError) {
	switch s.peek() {
	case 'n':
		return true, at(s.literal("null"), path)
	case '{':
		s.i++
		return false, nil
	}
	return false, malformed(path, "not a JSON object")
}

// image decodes a row image (object or null) at path into row, by the
// recipes of proj. full marks an `after` image, which must contain every
// projected column.
func (d *Decoder) image(s *scanner, row *Row, proj *projection, path string, full bool) *DecodeError {
	if isNull, err := openObject(s, path); isNull || err != nil {
		return err
	}
	row.Present = true
	seen := d.seen
	clear(seen)
	found := 0
	for first := true; ; {
		if found == len(seen) {
			// Every projected column is in: skip the rest unparsed (a
			// later duplicate member is ignored).
			if err := s.skipOpen(1); err != nil {
				return at(err, path)
			}
			return nil
		}
		k, done, err := s.nextKey(&first, &d.kbuf)
		if err != nil {
			return at(err, path)
		}
		if done {
			break
		}
		j := d.match(k)
		if j < 0 {
			if err := s.skip(); err != nil {
				return at(err, path)
			}
			continue
		}
		info := &proj.infos[j]
		d.varDecimal = false
		err = d.value(s, info, &row.Values[j])
		if err == nil && info.key {
			err = d.keyValue(j, info, &row.Values[j])
		}
		if err != nil {
			return at(err, path+"."+d.cols[j])
		}
		if !seen[j] {
			seen[j] = true
			found++
		}
	}
	if full {
		for j, ok := range seen {
			if !ok {
				return &DecodeError{Kind: ErrMissingColumn, Field: path + "." + d.cols[j], Offset: -1,
					Reason: d.missingReason(j, "the row image")}
			}
		}
	}
	return nil
}

// str returns b as a string carved out of the decoder's arena (a view of b
// while decoding array elements, which are copied into the array at once).
func (d *Decoder) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if d.transient {
		return view(b)
	}
	if len(b) > arenaMaxString {
		return string(b)
	}
	if cap(d.arena)-len(d.arena) < len(b) {
		d.arena = make([]byte, 0, arenaChunk)
	}
	off := len(d.arena)
	d.arena = append(d.arena, b...)
	return unsafe.String(&d.arena[off], len(b))
}

// view returns a string sharing b's memory, for parsing functions that do
// not retain their argument on success.
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func mismatch(info *colInfo, got string) *DecodeError {
	want := info.typ
	if want == "" {
		want = "a scalar"
	}
	hint := ""
	if info.declared {
		hint = " (the type declared in the configuration's types: if the source column's type changed, update the declaration and restart)"
	}
	return &DecodeError{Kind: ErrTypeMismatch, Offset: -1, Reason: "expected " + want + ", got " + got + hint}
}

// value decodes one column value per info.
func (d *Decoder) value(s *scanner, info *colInfo, out *row.Value) *DecodeError {
	c := s.peek()
	if c == 'n' {
		*out = row.Value{}
		return s.literal("null")
	}
	if info.conv == convRaw {
		start := s.i
		if err := s.skip(); err != nil {
			return err
		}
		if d.depth == 0 && d.ph.isRaw(s.b[start:s.i]) {
			*out = row.Unavailable()
		} else {
			*out = row.String(d.str(s.b[start:s.i]))
		}
		return nil
	}
	switch c {
	case '"':
		return d.stringValue(s, info, out)
	case 't', 'f':
		if err := s.literal(pick(c == 't', "true", "false")); err != nil {
			return err
		}
		if info.conv != convInfer && info.conv != convBool {
			return mismatch(info, "boolean")
		}
		*out = row.Bool(c == 't')
		return nil
	case '{':
		if info.conv == convVarDecimal || info.conv == convInfer {
			return d.structValue(s, info, out)
		}
		if err := s.skip(); err != nil {
			return err
		}
		return mismatch(info, "object")
	case '[':
		return d.arrayValue(s, info, out)
	case 0:
		return s.syntaxErr("unexpected end of input")
	}
	raw, isInt, err := s.num()
	if err != nil {
		return err
	}
	switch info.conv {
	case convInfer:
		if isInt {
			if v, ok := parseIntLit(raw); ok {
				*out = row.Int(v)
				return nil
			}
		}
		var ok bool
		d.tbuf, d.dbuf, ok = appendPlainNumber(d.tbuf[:0], d.dbuf, raw)
		if !ok {
			return mismatch(info, "number with an exponent out of range")
		}
		*out = row.Decimal(d.str(d.tbuf))
		return nil
	case convInt:
		v, ok := parseIntLit(raw)
		if !isInt {
			v, ok = d.integral(raw)
		}
		if !ok || v < info.min || v > info.max {
			return mismatch(info, "number "+string(raw))
		}
		if v, ok = info.units(v); !ok {
			return mismatch(info, "out-of-range number "+string(raw))
		}
		*out = row.Value{Kind: info.kind, Int: v}
		return nil
	case convFloat:
		f, perr := strconv.ParseFloat(view(raw), 64)
		if perr != nil && !math.IsInf(f, 0) {
			return mismatch(info, "number "+string(raw))
		}
		*out = row.Float(f)
		return nil
	}
	return mismatch(info, "number")
}

// integral parses a non-integer-literal number ("5.0", "1e3") whose value is
// an integer.
func (d *Decoder) integral(raw []byte) (int64, bool) {
	var ok bool
	d.tbuf, d.dbuf, ok = appendPlainNumber(d.tbuf[:0], d.dbuf, raw)
	if !ok {
		return 0, false
	}
	t := d.tbuf
	for i, c := range t {
		if c == '.' {
			for _, z := range t[i+1:] {
				if z != '0' {
					return 0, false
				}
			}
			t = t[:i]
			break
		}
	}
	return parseIntLit(t)
}

// stringValue decodes a JSON string per info.
func (d *Decoder) stringValue(s *scanner, info *colInfo, out *row.Value) *DecodeError {
	raw, esc, err := s.str()
	if err != nil {
		return err
	}
	if esc {
		if d.sbuf, err = unescape(d.sbuf[:0], raw); err != nil {
			return err
		}
		raw = d.sbuf
	}
	if d.depth == 0 && d.ph.isString(raw) {
		*out = row.Unavailable()
		return nil
	}
	switch info.conv {
	case convInfer, convString:
		*out = row.String(d.str(raw))
		return nil
	case convZoned:
		t, perr := time.Parse(time.RFC3339Nano, view(raw))
		if perr != nil {
			return mismatch(info, "unparsable timestamp "+strconv.Quote(string(raw)))
		}
		*out = row.Timestamp(t.UnixMicro())
		return nil
	case convBytes, convDecimal:
		b, ok := d.base64(raw)
		if !ok {
			return mismatch(info, "invalid base64")
		}
		if info.conv == convBytes {
			*out = row.Value{Kind: row.KindBytes, Str: d.str(b)}
			return nil
		}
		return d.decimal(b, info.scale, info, out)
	case convFloat:
		switch string(raw) {
		case "NaN":
			*out = row.Float(math.NaN())
			return nil
		case "Infinity":
			*out = row.Float(math.Inf(1))
			return nil
		case "-Infinity":
			*out = row.Float(math.Inf(-1))
			return nil
		}
	}
	return mismatch(info, "string")
}

// maxDecimalBytes bounds a decimal's unscaled value (PostgreSQL's numeric
// has at most 147455 digits, about 61 KiB): converting a longer one to text
// would cost seconds.
const maxDecimalBytes = 64 << 10

// decimal sets *out to the decimal with unscaled two's complement b.
func (d *Decoder) decimal(b []byte, scale int, info *colInfo, out *row.Value) *DecodeError {
	if len(b) > maxDecimalBytes {
		return mismatch(info, "decimal of "+strconv.Itoa(len(b))+" bytes")
	}
	d.tbuf, d.dbuf = appendTwosComplementDecimal(d.tbuf[:0], d.dbuf, b, scale)
	*out = row.Decimal(d.str(d.tbuf))
	return nil
}

// base64 decodes standard base64 (padding optional) into d.bbuf.
func (d *Decoder) base64(raw []byte) ([]byte, bool) {
	enc := base64.StdEncoding
	if len(raw)%4 != 0 {
		enc = base64.RawStdEncoding
	}
	n := enc.DecodedLen(len(raw))
	if cap(d.bbuf) < n {
		d.bbuf = make([]byte, n)
	}
	m, err := enc.Decode(d.bbuf[:n], raw)
	if err != nil {
		return nil, false
	}
	return d.bbuf[:m], true
}

// structValue decodes an object: a VariableScaleDecimal {"scale":n,
// "value":base64}. Without a schema an object of exactly that shape is taken
// as a VariableScaleDecimal too; any other object becomes its raw JSON text.
func (d *Decoder) structValue(s *scanner, info *colInfo, out *row.Value) *DecodeError {
	start := s.i
	s.i++
	scale, haveScale, haveValue, shape := 0, false, false, true
	var b []byte
	for first := true; ; {
		k, done, err := s.nextKey(&first, &d.kbuf)
		if err != nil {
			return err
		}
		if done {
			break
		}
		switch {
		case string(k) == "scale" && s.peek() != '"':
			raw, isInt, err := s.num()
			if err != nil {
				return err
			}
			v, ok := parseIntLit(raw)
			if !isInt || !ok || v > maxScale || v < -maxScale {
				shape = false
				break
			}
			scale, haveScale = int(v), true
		case string(k) == "value" && s.peek() == '"':
			raw, _, err := s.str()
			if err != nil {
				return err
			}
			var ok bool
			if b, ok = d.base64(raw); !ok {
				shape = false
			}
			haveValue = true
		default:
			shape = false
			if err := s.skip(); err != nil {
				return err
			}
		}
	}
	if shape && haveScale && haveValue {
		d.varDecimal = true
		return d.decimal(b, scale, info, out)
	}
	if info.conv == convInfer {
		raw := s.b[start:s.i]
		switch {
		case info.key:
			return &DecodeError{Kind: ErrTypeMismatch, Offset: -1,
				Reason: "an object in a key column without a type (declare the column's type)"}
		case d.depth == 0 && d.ph.isRaw(raw):
			*out = row.Unavailable()
		default:
			*out = row.String(d.str(raw))
		}
		return nil
	}
	return mismatch(info, "malformed VariableScaleDecimal")
}

// maxArrayDepth bounds the nesting of arrays decoded without a schema.
const maxArrayDepth = 32

// arrayValue decodes a JSON array into a row.KindArray whose elements are
// decoded by info.elem (by JSON token without a schema or declared type).
// An array that is one of Debezium's unchanged-TOAST placeholders becomes
// row.KindUnavailable; placeholders inside arrays are just values.
func (d *Decoder) arrayValue(s *scanner, info *colInfo, out *row.Value) *DecodeError {
	start := s.i
	if err := s.skip(); err != nil {
		return err
	}
	if d.depth == 0 && d.ph.isArray(s.b[start:s.i]) {
		*out = row.Unavailable()
		return nil
	}
	elem := info.elem
	switch {
	case info.conv == convInfer && info.key:
		return &DecodeError{Kind: ErrTypeMismatch, Offset: -1,
			Reason: "an array in a key column without a type (declare the column's type)"}
	case info.conv == convInfer:
		elem = &inferElem
	case info.conv != convArray:
		return mismatch(info, "array")
	}
	if d.depth >= maxArrayDepth {
		return mismatch(info, "arrays nested more than "+strconv.Itoa(maxArrayDepth)+" deep")
	}
	end := s.i
	s.i = start + 1
	level := d.depth
	if len(d.abuf) <= level {
		d.abuf = append(d.abuf, nil)
	}
	buf := d.abuf[level][:0]
	transient := d.transient
	d.depth, d.transient = level+1, true
	var err *DecodeError
	for first := true; ; {
		done, e := s.nextElem(&first)
		if e != nil || done {
			err = e
			break
		}
		v := &d.elem[level]
		*v = row.Value{}
		if err = d.value(s, elem, v); err != nil {
			break
		}
		buf = row.AppendRowValue(buf, *v) // copies v before the next element reuses buffers
	}
	d.depth, d.transient = level, transient
	d.abuf[level] = buf
	if err != nil {
		return err
	}
	s.i = end
	*out = row.Value{Kind: row.KindArray, Str: d.str(buf)}
	return nil
}

// KeyClasses are the classes of values key columns have held (0 until a
// column's first value), shared by the decoders that NewDecoder is given
// it (Options.KeyClasses). Not safe for concurrent use (the decoders that
// share one run on one goroutine).
type KeyClasses struct{ c []uint32 }

// NewKeyClasses returns a table of n slots, none learned.
func NewKeyClasses(n int) *KeyClasses { return &KeyClasses{c: make([]uint32, n)} }

// KeyTypes returns, encoded for storing, the class of values each key
// column has held so far (Options.KeyColumns): the first value seen fixes
// it. A caller that persists it with its state (next to the positions it
// commits) and passes it to RestoreKeyTypes after a restart keeps the rule
// "one key column, one type" across restarts; without that, a restarted
// decoder learns afresh from its first record.
func (d *Decoder) KeyTypes() []byte {
	b := make([]byte, 0, 1+2*len(d.slots))
	b = binary.AppendUvarint(b, uint64(len(d.slots)))
	for _, sl := range d.slots {
		b = binary.AppendUvarint(b, uint64(d.keyTab.c[sl]))
	}
	return b
}

// KeyTypesLearned counts the key columns whose type the decoder has fixed
// (it only grows): a caller persisting KeyTypes compares it with the count
// it last saved instead of encoding KeyTypes per record.
func (d *Decoder) KeyTypesLearned() int {
	n := 0
	for _, sl := range d.slots {
		if d.keyTab.c[sl] != 0 {
			n++
		}
	}
	return n
}

// RestoreKeyTypes sets what KeyTypes returned, e.g. by an earlier run. It
// fails when b is corrupt, is for another number of key columns, or
// contradicts a class a linked column already has; an empty b changes
// nothing.
func (d *Decoder) RestoreKeyTypes(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	n, m := binary.Uvarint(b)
	if m <= 0 || n != uint64(len(d.slots)) {
		return fmt.Errorf("cdcjoin: key types: stored for %d key columns, the decoder has %d", n, len(d.slots))
	}
	classes := make([]uint32, 0, n)
	for b = b[m:]; len(b) > 0; b = b[m:] {
		var c uint64
		if c, m = binary.Uvarint(b); m <= 0 || c > math.MaxUint32 {
			return fmt.Errorf("cdcjoin: key types: corrupt encoding")
		}
		classes = append(classes, uint32(c))
	}
	if len(classes) != len(d.slots) {
		return fmt.Errorf("cdcjoin: key types: corrupt encoding")
	}
	for i, c := range classes {
		switch cur := &d.keyTab.c[d.slots[i]]; {
		case c == 0 || *cur == c:
		case *cur == 0:
			*cur = c
		case *cur == classInteger && c == classNumber:
			// A linked column was stored before integers had a class
			// of their own: the wider class holds both.
			*cur = c
		case *cur == classNumber && c == classInteger:
		default:
			return fmt.Errorf("cdcjoin: key types: key column %s held %s, a linked key column %s", d.cols[i], className(c), className(*cur))
		}
	}
	return nil
}

// Key classes (Options.KeyColumns): values of one class compare as equal
// keys exactly when they are equal values.
const (
	classNumber  = uint32(row.KindInt) + 1 // numbers of variable scale, canonical (integers included)
	classInteger = 1 << 15                 // integers that fit int64 (a column whose first number was one)
	classDecimal = 1 << 16                 // + scale + maxScale: decimals of one fixed scale
)

// keyValue makes the value of key column j canonical and checks its class
// against the column's first one.
func (d *Decoder) keyValue(j int, info *colInfo, v *row.Value) *DecodeError {
	var class uint32
	switch {
	case v.Kind == row.KindNull || v.Kind == row.KindUnavailable:
		return nil
	case v.Kind == row.KindDecimal && info.scale < 0:
		canonicalKey(v)
		class = classNumber
		if v.Kind == row.KindInt && info.conv != convVarDecimal && !d.varDecimal {
			class = classInteger
		}
	case v.Kind == row.KindInt:
		class = classInteger
	case v.Kind == row.KindDecimal:
		class = classDecimal + uint32(info.scale+maxScale)
	default:
		class = uint32(v.Kind) + 1
	}
	cur := &d.keyTab.c[d.slots[j]]
	switch {
	case *cur == class:
		return nil
	case *cur == 0:
		*cur = class
		return nil
	case *cur == classNumber && (class == classInteger || class == classNumber):
		return nil // a number column holds integers too
	case *cur == classInteger && class == classNumber && v.Kind == row.KindInt:
		return nil // an integral number of variable scale (a VariableScaleDecimal)
	case *cur == classInteger && class == classNumber:
		return &DecodeError{Kind: ErrTypeMismatch, Offset: -1,
			Reason: "key column holds " + v.Text() + " where it held integers: not a key any row can have (declare its type in the configuration if the column is numeric)"}
	}
	return &DecodeError{Kind: ErrTypeMismatch, Offset: -1,
		Reason: "key column holds " + className(class) + " where it held " + className(*cur) +
			" before: one key column keeps one type (declare its type in the configuration)"}
}

func className(c uint32) string {
	switch {
	case c == classNumber:
		return "a number"
	case c == classInteger:
		return "an integer"
	case c >= classDecimal:
		return "a decimal of scale " + strconv.Itoa(int(c-classDecimal)-maxScale)
	case c > 0:
		return "a " + row.Kind(c-1).String()
	}
	return "nothing"
}

// canonicalKey rewrites the decimal v as the shortest decimal of its value
// (no trailing fraction zeros), and as row.KindInt when that is an integer
// that fits int64.
func canonicalKey(v *row.Value) {
	t := v.Str
	if dot := strings.IndexByte(t, '.'); dot >= 0 {
		t = strings.TrimRight(t, "0")
		t = strings.TrimSuffix(t, ".")
	}
	if t == "-0" {
		t = "0"
	}
	if !strings.Contains(t, ".") {
		if n, ok := parseIntLit(unsafe.Slice(unsafe.StringData(t), len(t))); ok {
			*v = row.Int(n)
			return
		}
	}
	v.Str = t
}

// int64Field reads an integer or null (0).
func (d *Decoder) int64Field(s *scanner) (int64, *DecodeError) {
	switch c := s.peek(); {
	case c == 'n':
		return 0, s.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		raw, isInt, err := s.num()
		if err != nil {
			return 0, err
		}
		v, ok := parseIntLit(raw)
		if !isInt {
			v, ok = d.integral(raw)
		}
		if !ok {
			return 0, &DecodeError{Kind: ErrTypeMismatch, Reason: "expected int64, got number " + string(raw), Offset: -1}
		}
		return v, nil
	}
	if err := s.skip(); err != nil {
		return 0, err
	}
	return 0, &DecodeError{Kind: ErrTypeMismatch, Reason: "expected int64", Offset: -1}
}

// stringField reads a string or null (nil), unescaped.
func (d *Decoder) stringField(s *scanner) ([]byte, *DecodeError) {
	switch s.peek() {
	case 'n':
		return nil, s.literal("null")
	case '"':
		raw, esc, err := s.str()
		if err != nil || !esc {
			return raw, err
		}
		d.sbuf, err = unescape(d.sbuf[:0], raw)
		return d.sbuf, err
	}
	if err := s.skip(); err != nil {
		return nil, err
	}
	return nil, &DecodeError{Kind: ErrTypeMismatch, Reason: "expected string", Offset: -1}
}

// intern returns b as a string, reusing *slot when equal.
func intern(slot *string, b []byte) string {
	if *slot != string(b) {
		*slot = string(b)
	}
	return *slot
}

// source decodes the envelope's source block at path.
func (d *Decoder) source(s *scanner, src *Source, path string) *DecodeError {
	if isNull, err := openObject(s, path); isNull || err != nil {
		return err
	}
	for first := true; ; {
		k, done, err := s.nextKey(&first, &d.kbuf)
		if err != nil {
			return at(err, path)
		}
		if done {
			return nil
		}
		var ip *int64    // integer field
		var sp *string   // string field
		var slot *string // intern slot for sp
		switch string(k) {
		case "ts_ms":
			ip = &src.TsMs
		case "lsn":
			ip = &src.LSN
		case "txId":
			ip = &src.TxID
		case "pos":
			ip = &src.Pos
		case "row":
			ip = &src.Row
		case "db":
			sp, slot = &src.DB, &d.lastDB
		case "schema":
			sp, slot = &src.Schema, &d.lastSchema
		case "table":
			sp, slot = &src.Table, &d.lastTable
		case "file":
			sp, slot = &src.File, &d.lastFile
		case "gtid":
			sp = &src.GTID
		case "snapshot":
			switch s.peek() {
			case 't':
				src.Snapshot, err = "true", s.literal("true")
			case 'f':
				src.Snapshot, err = "false", s.literal("false")
			default:
				sp, slot = &src.Snapshot, &d.lastSnapshot
			}
		case "sequence":
			if s.peek() == '[' {
				start := s.i
				if err = s.skip(); err == nil {
					src.Sequence = d.str(s.b[start:s.i])
				}
			} else {
				sp = &src.Sequence
			}
		default:
			err = s.skip()
		}
		switch {
		case err != nil:
		case ip != nil:
			*ip, err = d.int64Field(s)
		case sp != nil:
			var b []byte
			if b, err = d.stringField(s); err == nil {
				if slot != nil {
					*sp = intern(slot, b)
				} else {
					*sp = d.str(b)
				}
			}
		}
		if err != nil {
			return at(err, path+"."+string(k))
		}
	}
}

// decodeKey decodes the record key into ev.Key. A key is schema-wrapped when
// its first member is "schema"; it then must have a "payload" member.
func (d *Decoder) decodeKey(key []byte, ev *Event) *DecodeError {
	if len(key) == 0 {
		return nil
	}
	s := scanner{b: key}
	switch c := s.peek(); c {
	case 0:
		if s.atEnd() {
			return malformed("key", "only whitespace")
		}
		return notJSON("key", key)
	case 'n':
		if err := s.literal("null"); err != nil {
			return at(err, "key")
		}
		if !s.atEnd() {
			return at(s.syntaxErr("trailing data"), "key")
		}
		return nil
	case '{':
	default:
		if c < 0x20 || c >= 0x7f || isAvroContainer(key) {
			return notJSON("key", key)
		}
		return malformed("key", "not a JSON object")
	}
	start := s.i
	s.i++
	first := true
	k, done, err := s.nextKey(&first, &d.kbuf)
	if err != nil {
		return at(err, "key")
	}
	if done || string(k) != "schema" {
		s.i = start
		if err := d.image(&s, &ev.Key, d.decl, "key", false); err != nil {
			return err
		}
	} else {
		proj, err := d.schemaAt(&d.keys, &s, "key.schema", keyRow)
		if err != nil {
			return at(err, "key.schema")
		}
		if proj == nil {
			proj = d.decl
		}
		payload := false
		for {
			k, done, err := s.nextKey(&first, &d.kbuf)
			if err != nil {
				return at(err, "key")
			}
			if done {
				break
			}
			if string(k) == "payload" {
				payload = true
				err = d.image(&s, &ev.Key, proj, "key.payload", false)
			} else {
				err = s.skip()
			}
			if err != nil {
				return at(err, "key")
			}
		}
		if !payload {
			return malformed("key.payload", "key schema without payload")
		}
	}
	if !s.atEnd() {
		return at(s.syntaxErr("trailing data"), "key")
	}
	return nil
}

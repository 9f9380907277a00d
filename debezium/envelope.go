package debezium

import "strconv"

// The envelope step both registry formats share (Avro: avro.go, Protobuf:
// protobuf.go): a record names its value's (and key's) schema by id; each
// id's program is compiled once (compiled), its envelope fields get roles
// by name (envelopeRole) and its row the projection and column matches
// the JSON path would give it; decoding the value fills the event, whose
// op is then checked and types set, and the key, when there is one, its
// key row.

// Envelope field roles.
const (
	roleSkip = iota
	roleBefore
	roleAfter
	roleSource
	roleOp
	roleTsMs
)

// Source block fields cdcjoin keeps.
const (
	srcSkip = iota
	srcTsMs
	srcSnapshot
	srcLSN
	srcSequence
	srcTxID
	srcDB
	srcSchema
	srcTable
	srcFile
	srcPos
	srcRow
	srcGTID
)

var sourceFields = map[string]int{
	"ts_ms": srcTsMs, "snapshot": srcSnapshot, "lsn": srcLSN, "sequence": srcSequence, "txId": srcTxID,
	"db": srcDB, "schema": srcSchema, "table": srcTable, "file": srcFile, "pos": srcPos, "row": srcRow, "gtid": srcGTID,
}

// registrySchema fetches id's schema from the decoder's source. A
// *DecodeError is a bad record (unknown id, a schema of another type than
// want: "AVRO" or "PROTOBUF"); any other error is the source's failure.
func (d *Decoder) registrySchema(id SchemaID, field string, want string) (RegisteredSchema, *DecodeError, error) {
	if d.opts.Schemas == nil {
		return RegisteredSchema{}, &DecodeError{Kind: ErrMalformed, Field: field, Offset: -1,
			Reason: "the record names " + id.String() + " but the decoder has no schema registry"}, nil
	}
	s, err := d.opts.Schemas.Schema(id)
	if err != nil {
		if isUnknown(err) {
			return s, &DecodeError{Kind: ErrUnknownSchema, Field: field, Offset: -1, SchemaID: id.ID,
				Reason: id.String() + " is not in the schema registry", Err: err}, nil
		}
		return s, nil, &SourceError{ID: id, Err: err}
	}
	if s.Type != want {
		return s, &DecodeError{Kind: ErrMalformed, Field: field, Offset: -1, SchemaID: id.ID,
			Reason: id.String() + " is a " + s.Type + " schema, not " + want + " (check the topic's format)"}, nil
	}
	return s, nil, nil
}

// compiled returns m's program for k, compiling it on k's first use and
// keeping it (a program whose err is set too: every record with k is bad
// the same way). An error of compile is the schema source's failure: nothing
// is kept, the next record asks again.
func compiled[K comparable, P any](m *map[K]*P, k K, compile func() (*P, error)) (*P, error) {
	if p := (*m)[k]; p != nil {
		return p, nil
	}
	p, err := compile()
	if err != nil {
		return nil, err
	}
	if *m == nil {
		*m = map[K]*P{}
	}
	(*m)[k] = p
	return p, nil
}

// schemaErr is the error of a schema (id, at field) cdcjoin cannot read.
func schemaErr(id SchemaID, field, reason string) *DecodeError {
	return &DecodeError{Kind: ErrMalformed, Field: field, Offset: -1, SchemaID: id.ID,
		Reason: id.String() + ": " + reason}
}

// decodeRegistry decodes a record whose key and value are in a registry
// format.
func (d *Decoder) decodeRegistry(key, value []byte, headers []Header, ev *Event) (bool, error) {
	if len(value) == 0 {
		return false, nil // a tombstone
	}
	id, payload, de := SchemaOf(value, headers, "value")
	if de != nil {
		return false, de
	}
	pb := d.opts.Format == FormatProtobuf
	var p *projection
	var err error
	if pb {
		p, err = d.decodeProtobufValue(id, payload, ev)
	} else {
		p, err = d.decodeAvroValue(id, payload, ev)
	}
	if err != nil {
		return false, err
	}
	if !ev.Op.valid() {
		return false, unknownOp(ev.Op.String())
	}
	ev.Types = p.types
	d.noteTypes(p.types)
	if len(key) == 0 {
		return true, nil
	}
	kid, kp, de := SchemaOf(key, headers, "key")
	if de != nil {
		return false, de
	}
	if pb {
		err = d.decodeProtobufKey(kid, kp, ev)
	} else {
		err = d.decodeAvroKey(kid, kp, ev)
	}
	if err != nil {
		return false, err
	}
	return true, nil
}

// envelopeRole is the role of the Debezium envelope field named name.
func envelopeRole(name string) int {
	switch name {
	case schemaFieldBefore:
		return roleBefore
	case schemaFieldAfter:
		return roleAfter
	case "source":
		return roleSource
	case "op":
		return roleOp
	case "ts_ms":
		return roleTsMs
	}
	return roleSkip
}

// envelopeProjection is the projection of a registry envelope's row (conn:
// the envelope's Connect structure), its errors naming id.
func (d *Decoder) envelopeProjection(id SchemaID, conn *schemaNode) (*projection, *DecodeError) {
	rowNode, de := envelopeRow(conn)
	if de != nil {
		return nil, schemaErr(id, "value.schema", de.Reason)
	}
	return d.projectSchema(id, rowNode, "value.schema")
}

// projectSchema is the projection of node, a struct of a registry schema
// id at field ("value.schema" or "key.schema"): an error names both.
func (d *Decoder) projectSchema(id SchemaID, node *schemaNode, field string) (*projection, *DecodeError) {
	p, de := buildProjection(nil, node, d.cols, d.decl)
	if de != nil {
		de.Field, de.SchemaID = field+"."+de.Field, id.ID
		de.Reason = id.String() + ": " + de.Reason
	}
	return p, de
}

// matchNames matches a row schema's n fields (name(i): field i's name) to
// the projected columns: per field its column, -1 when it is not projected
// or repeats an earlier field's column (the first one counts).
func (d *Decoder) matchNames(n int, name func(i int) string) []int {
	cols := make([]int, n)
	taken := make([]bool, len(d.cols))
	for i := range cols {
		j := d.match([]byte(name(i)))
		if j >= 0 && taken[j] {
			j = -1
		}
		if j >= 0 {
			taken[j] = true
		}
		cols[i] = j
	}
	return cols
}

// firstMissing is the first projected column that a row schema whose
// fields match cols (matchNames) lacks, -1 when it has them all.
func (d *Decoder) firstMissing(cols []int) int {
	seen := make([]bool, len(d.cols))
	for _, j := range cols {
		if j >= 0 {
			seen[j] = true
		}
	}
	for j, ok := range seen {
		if !ok {
			return j
		}
	}
	return -1
}

// missingColumn is the error of an after image whose row schema (of id)
// lacks projected column j (firstMissing).
func (d *Decoder) missingColumn(id SchemaID, j int) *DecodeError {
	return &DecodeError{Kind: ErrMissingColumn, Field: "value.after." + d.cols[j], Offset: -1, SchemaID: id.ID,
		Reason: d.missingReason(j, "the row schema of "+id.String())}
}

// setOp sets ev's op from an envelope's op string s (nil: null, left as
// it is; envelopes without a valid op are refused after decoding).
func setOp(ev *Event, s []byte) *DecodeError {
	if len(s) == 1 {
		ev.Op = Op(s[0])
	} else if s != nil {
		return unknownOp(string(s))
	}
	return nil
}

// unknownOp is the error of an envelope whose op is s.
func unknownOp(s string) *DecodeError {
	return &DecodeError{Kind: ErrUnknownOp, Field: "value.op", Offset: -1, Reason: "unknown op " + strconv.Quote(s)}
}

// valid tells whether o is one of Debezium's ops.
func (o Op) valid() bool {
	switch o {
	case OpCreate, OpUpdate, OpDelete, OpRead, OpTruncate:
		return true
	}
	return false
}

// badBody is a payload that does not decode with its schema.
func badBody(id SchemaID, field, reason string) *DecodeError {
	return &DecodeError{Kind: ErrMalformed, Field: field, Offset: -1, SchemaID: id.ID,
		Reason: "the body does not decode with " + id.String() + ": " + reason}
}

// setSourceInt sets the integer source field of role (srcTsMs, …).
func setSourceInt(src *Source, role int, v int64) {
	switch role {
	case srcTsMs:
		src.TsMs = v
	case srcLSN:
		src.LSN = v
	case srcTxID:
		src.TxID = v
	case srcPos:
		src.Pos = v
	case srcRow:
		src.Row = v
	}
}

// setSourceString sets the string source field of role (srcSnapshot, …).
func (d *Decoder) setSourceString(src *Source, role int, s []byte) {
	switch role {
	case srcSnapshot:
		src.Snapshot = intern(&d.lastSnapshot, s)
	case srcSequence:
		src.Sequence = d.str(s)
	case srcDB:
		src.DB = intern(&d.lastDB, s)
	case srcSchema:
		src.Schema = intern(&d.lastSchema, s)
	case srcTable:
		src.Table = intern(&d.lastTable, s)
	case srcFile:
		src.File = intern(&d.lastFile, s)
	case srcGTID:
		src.GTID = d.str(s)
	}
}

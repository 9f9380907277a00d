package debezium

import (
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/cdcjoin/cdcjoin/row"
)

// placeholders are the forms in which Debezium's PostgreSQL connector sends
// an unchanged TOASTed value (REPLICA IDENTITY DEFAULT updates), all
// derived from its unavailable.value.placeholder (UnchangedToastedPlaceholder
// in Debezium 3): the text itself for text-like and json columns; its bytes
// for bytea, i.e. base64 in JSON (or hex/base64 text under
// binary.handling.mode hex/base64); for arrays a one-element text array, an
// integer array of its bytes (integer[], bigint[], date[]), a one-element
// bytea array, or a one-element uuid array holding the name-based UUID of
// its bytes; for hstore maps a one-entry map. Each form is compared as the
// exact JSON text JsonConverter writes.
type placeholders struct {
	text, b64, hex string // string values (unquoted)
	uuid           string // the name-based UUID of the text
	raw            string // the quoted text, for raw struct/map columns
	hstore         string // {"ph":"ph"}
	arrays         [4]string
}

func newPlaceholders(ph string) placeholders {
	if ph == "" {
		ph = row.UnavailableValue
	}
	p := placeholders{
		text: ph,
		b64:  base64.StdEncoding.EncodeToString([]byte(ph)),
		hex:  hex.EncodeToString([]byte(ph)),
		raw:  string(row.AppendJSONString(nil, ph)),
	}
	p.hstore = "{" + p.raw + ":" + p.raw + "}"
	ints := make([]string, len(ph))
	for i := 0; i < len(ph); i++ {
		ints[i] = strconv.Itoa(int(int8(ph[i]))) // Java bytes are signed
	}
	sum := md5.Sum([]byte(ph)) // java.util.UUID.nameUUIDFromBytes: version 3
	sum[6] = sum[6]&0x0f | 0x30
	sum[8] = sum[8]&0x3f | 0x80
	h := hex.EncodeToString(sum[:])
	uuid := h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
	p.uuid = uuid
	p.arrays = [4]string{
		"[" + p.raw + "]",
		"[" + strings.Join(ints, ",") + "]",
		`["` + p.b64 + `"]`,
		`["` + uuid + `"]`,
	}
	return p
}

// isString reports whether the unescaped string s is a placeholder.
func (p *placeholders) isString(s []byte) bool {
	switch len(s) {
	case len(p.text):
		return string(s) == p.text
	case len(p.b64):
		return string(s) == p.b64
	case len(p.hex):
		return string(s) == p.hex
	}
	return false
}

// isArray reports whether the JSON array text a is a placeholder.
func (p *placeholders) isArray(a []byte) bool {
	for _, f := range p.arrays {
		if string(a) == f {
			return true
		}
	}
	return false
}

// isRaw reports whether the JSON text of a struct, map or string value is
// a placeholder.
func (p *placeholders) isRaw(v []byte) bool {
	return string(v) == p.raw || string(v) == p.hstore
}

// arrayElem reports whether an array whose first n elements matched a
// placeholder form (Avro and Protobuf: decoded values, not JSON text)
// still matches one with element v: a one-element text, bytea or uuid
// array, or an integer array of the text's (signed) bytes.
func (p *placeholders) arrayElem(n int, v row.Value) bool {
	intLike := v.Kind == row.KindInt || v.Kind == row.KindDate || v.Kind == row.KindTime || v.Kind == row.KindTimestamp
	switch {
	case intLike:
		return n < len(p.text) && v.Int == int64(int8(p.text[n]))
	case n > 0:
		return false
	case v.Kind == row.KindString:
		return v.Str == p.text || v.Str == p.uuid || v.Str == p.b64
	case v.Kind == row.KindBytes:
		return v.Str == p.text
	}
	return false
}

// arrayLen reports whether an array of n elements, each matched by
// arrayElem, is a placeholder: one text, bytea or uuid element, or the
// text's length of integers (ints).
func (p *placeholders) arrayLen(n int, ints bool) bool {
	if ints {
		return n == len(p.text)
	}
	return n == 1
}

// isAvroContainer reports an Avro object container file's magic.
func isAvroContainer(b []byte) bool { return len(b) >= 4 && string(b[:4]) == "Obj\x01" }

// notJSON describes a record value or key that is not JSON text: the
// Schema Registry wire format (magic byte 0, then a 4-byte schema id for
// Confluent's converters or an 8-byte global id for Apicurio's), an Avro
// container file, or other bytes.
func notJSON(field string, b []byte) *DecodeError {
	const fix = "; cdcjoin reads Kafka Connect's JsonConverter output: set the connector's key.converter and value.converter to org.apache.kafka.connect.json.JsonConverter (with schemas.enable true or false)"
	var what string
	switch {
	case len(b) >= 5 && b[0] == 0:
		id := uint32(b[1])<<24 | uint32(b[2])<<16 | uint32(b[3])<<8 | uint32(b[4])
		what = "Schema Registry wire format (magic byte 0, schema id " + strconv.FormatUint(uint64(id), 10) +
			"): written by a Confluent or Apicurio Avro, Protobuf or JSON Schema converter, not JSON" + fix
	case isAvroContainer(b):
		what = "an Avro object container, not JSON" + fix
	case len(b) > 0 && b[0] == 0:
		what = "binary data starting with a NUL byte, not JSON" + fix
	case len(b) > 0 && (b[0] < 0x20 || b[0] >= 0x7f):
		what = "binary data (first byte 0x" + hex.EncodeToString(b[:1]) + "), not JSON" + fix
	default:
		what = "not JSON"
	}
	return &DecodeError{Kind: ErrNotJSON, Field: field, Reason: what, Offset: -1}
}

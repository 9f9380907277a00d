package debezium

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strconv"
)

// Format is the encoding of a topic's records.
type Format uint8

// Record formats.
const (
	FormatJSON     Format = iota // Kafka Connect's JsonConverter (schemas on or off)
	FormatAvro                   // Avro through a schema registry
	FormatProtobuf               // Protobuf through a schema registry
)

func (f Format) String() string {
	switch f {
	case FormatAvro:
		return "avro"
	case FormatProtobuf:
		return "protobuf"
	}
	return "json"
}

// IDSpace is the kind of schema id a record carries.
type IDSpace uint8

// Schema id spaces.
const (
	// IDConfluent is the 4-byte id of the Confluent wire format (magic
	// byte 0, big-endian id): a Confluent Schema Registry schema id, which
	// Apicurio's Confluent-compatible API resolves as a content id.
	IDConfluent IDSpace = iota + 1
	// IDGlobal is an Apicurio global id: the 8-byte id after the magic byte
	// of Apicurio's own wire format, or the apicurio.{key,value}.globalId
	// header.
	IDGlobal
	// IDContent is an Apicurio content id from the
	// apicurio.{key,value}.contentId header.
	IDContent
)

// SchemaID names a schema in a registry.
type SchemaID struct {
	Space IDSpace
	ID    int64
}

// String names the id for messages, e.g. "schema id 42" or "Apicurio
// global id 42".
func (s SchemaID) String() string {
	n := strconv.FormatInt(s.ID, 10)
	switch s.Space {
	case IDGlobal:
		return "Apicurio global id " + n
	case IDContent:
		return "Apicurio content id " + n
	}
	return "schema id " + n
}

// RegisteredSchema is a schema as a registry returns it.
type RegisteredSchema struct {
	// Type is the registry's schema type: "AVRO" (also when the registry
	// states none), "PROTOBUF", "JSON".
	Type string
	// Text is the schema: Avro's JSON, or a .proto file.
	Text string
	// Refs are the schemas Text imports (Protobuf), by import name.
	Refs map[string]string
}

// SchemaSource gives the decoder the schemas registry-format records name.
// It is consulted once per id (the decoder caches what it compiles) and
// must be safe for concurrent use when decoders on several goroutines share
// it.
type SchemaSource interface {
	// Schema returns the schema registered under id. An id the registry
	// does not have fails with an error wrapping ErrNoSuchSchema (the
	// record is a bad record); any other error (the registry could not be
	// reached, and the source gave up) is returned by Decode as a
	// *SourceError, which is not a bad record.
	Schema(id SchemaID) (RegisteredSchema, error)
}

// ErrNoSuchSchema is what a SchemaSource's error wraps for an id its
// registry does not have.
var ErrNoSuchSchema = errors.New("the registry has no schema with this id")

func isUnknown(err error) bool { return errors.Is(err, ErrNoSuchSchema) }

// SourceError is a failure to get a schema other than an unknown id: not a
// bad record. A driver stops (or waits and retries) instead of dead-lettering.
type SourceError struct {
	ID  SchemaID
	Err error
}

func (e *SourceError) Error() string {
	return "cdcjoin: schema registry: " + e.ID.String() + ": " + e.Err.Error()
}

func (e *SourceError) Unwrap() error { return e.Err }

// Header is a Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Apicurio's id headers (its serializers with headers enabled: the payload
// then has no magic byte or id).
const (
	headerKeyGlobal     = "apicurio.key.globalId"
	headerValueGlobal   = "apicurio.value.globalId"
	headerKeyContent    = "apicurio.key.contentId"
	headerValueContent  = "apicurio.value.contentId"
	confluentHeaderSize = 5
	apicurioHeaderSize  = 9
)

// SchemaOf returns the schema id a registry-format key or value names and
// its payload (the bytes after the id): from Apicurio's id headers when
// present, else from the wire format: magic byte 0 and a 4-byte id
// (Confluent), or magic byte 0 and an 8-byte id (Apicurio's global id; its
// first four bytes are 0 for any id below 2^32, and no Confluent id is 0).
// field is "key" or "value" (which headers apply, and for messages).
func SchemaOf(b []byte, headers []Header, field string) (SchemaID, []byte, *DecodeError) {
	global, content := headerValueGlobal, headerValueContent
	if field == "key" {
		global, content = headerKeyGlobal, headerKeyContent
	}
	for i := range headers {
		h := &headers[i]
		var space IDSpace
		switch h.Key {
		case global:
			space = IDGlobal
		case content:
			space = IDContent
		default:
			continue
		}
		if len(h.Value) != 8 {
			return SchemaID{}, nil, &DecodeError{Kind: ErrMalformed, Field: field, Offset: -1,
				Reason: "header " + h.Key + " is " + strconv.Itoa(len(h.Value)) + " bytes, not an 8-byte id"}
		}
		return SchemaID{space, int64(binary.BigEndian.Uint64(h.Value))}, b, nil
	}
	switch {
	case len(b) >= confluentHeaderSize && b[0] == 0:
		if id := binary.BigEndian.Uint32(b[1:5]); id != 0 {
			return SchemaID{IDConfluent, int64(id)}, b[confluentHeaderSize:], nil
		}
		if len(b) >= apicurioHeaderSize {
			return SchemaID{IDGlobal, int64(binary.BigEndian.Uint64(b[1:9]))}, b[apicurioHeaderSize:], nil
		}
	case len(b) > 0 && (b[0] == '{' || b[0] == '['):
		return SchemaID{}, nil, &DecodeError{Kind: ErrMalformed, Field: field, Offset: -1,
			Reason: "JSON text, not the Schema Registry wire format: the topic's records are JsonConverter output; set format: json for it"}
	}
	what := "empty"
	if len(b) > 0 {
		what = "first byte 0x" + hex.EncodeToString(b[:1])
		if b[0] == 0 {
			what = strconv.Itoa(len(b)) + " bytes"
		}
	}
	return SchemaID{}, nil, &DecodeError{Kind: ErrMalformed, Field: field, Offset: -1,
		Reason: "not the Schema Registry wire format (" + what + "; want magic byte 0 and a schema id, or Apicurio's id headers)"}
}

package debezium

// protoSchemas caches compiled Protobuf schemas by id.
type protoSchemas struct{}

// decodeProtobuf decodes a Protobuf record.
func (d *Decoder) decodeProtobuf(id SchemaID, payload, key []byte, headers []Header, ev *Event) (bool, error) {
	return false, &DecodeError{Kind: ErrMalformed, Field: "value", Offset: -1, SchemaID: id.ID, Reason: "protobuf is not supported yet"}
}

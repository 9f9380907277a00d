package debezium

import (
	"errors"
	"fmt"

	"github.com/cdcjoin/cdcjoin/row"
)

// Op is a Debezium change operation, the envelope's `op` field.
type Op byte

// Debezium operations.
const (
	OpCreate   Op = 'c'
	OpUpdate   Op = 'u'
	OpDelete   Op = 'd'
	OpRead     Op = 'r' // snapshot read
	OpTruncate Op = 't'
)

// String returns the one-letter Debezium code.
func (o Op) String() string {
	if o == 0 {
		return "none"
	}
	return string(rune(o))
}

// Source is the subset of the envelope's `source` block that cdcjoin keeps.
// Fields the connector did not send are zero. Sequence is PostgreSQL's
// `["<last commit lsn>","<lsn>"]` kept verbatim as JSON text.
type Source struct {
	TsMs     int64
	Snapshot string // "true", "first", "last", "false", "incremental", … ("" when absent)
	// PostgreSQL
	LSN      int64
	Sequence string
	TxID     int64
	// MySQL
	File string
	Pos  int64
	Row  int64
	GTID string
	// Common
	DB     string
	Schema string
	Table  string
}

// Row is a projected row: Values[i] is the value of the decoder's i-th
// projected column. Present is false when the envelope had no such image
// (e.g. `before` of an insert, or of an update under REPLICA IDENTITY DEFAULT).
type Row struct {
	Present bool
	Values  []row.Value
}

// Event is one decoded change event. Before and After are projected to the
// decoder's columns. Key is the record key projected to the same columns
// (columns not in the key are Null). Types are the columns' types: the
// record's schema, or for a record without one the types declared in the
// decoder's Options (nil when there are none). A decoder reuses an Event's slices on the next call: callers that
// keep values across calls must copy the slices (Values' strings are
// immutable and may be kept).
type Event struct {
	Op     Op
	Before Row
	After  Row
	Key    Row
	Types  []row.ColumnType
	Source Source
	TsMs   int64 // the envelope's ts_ms (when Debezium processed the change)
}

// ErrorKind classifies decode errors so that callers can count and route them.
type ErrorKind uint8

// Decode error kinds.
const (
	ErrMalformed     ErrorKind = iota + 1 // not valid JSON, or not a Debezium envelope
	ErrUnknownOp                          // op missing or not one of c, u, d, r, t
	ErrTypeMismatch                       // a value does not fit its schema or the projection's needs
	ErrOversized                          // record larger than the configured maximum
	ErrMissingColumn                      // a projected column is absent from a full row image
	ErrNotJSON                            // a key or value that is not JSON text (e.g. Avro in the Schema Registry wire format)
	ErrUnknownSchema                      // a registry-format record names a schema id the registry does not have
)

var errorKindNames = [...]string{
	ErrMalformed: "malformed", ErrUnknownOp: "unknown_op", ErrTypeMismatch: "type_mismatch",
	ErrOversized: "oversized", ErrMissingColumn: "missing_column", ErrNotJSON: "not_json",
	ErrUnknownSchema: "unknown_schema",
}

// String returns a stable snake_case name, used as a metric label.
func (k ErrorKind) String() string {
	if int(k) < len(errorKindNames) && errorKindNames[k] != "" {
		return errorKindNames[k]
	}
	return "unknown"
}

// DecodeError describes a record cdcjoin could not decode: what was wrong
// (row.Kind, Reason), in which field (a path like "payload.after.id"), and where
// the record came from when known (Topic/Partition/Offset; Offset is -1 when
// unknown).
type DecodeError struct {
	Kind      ErrorKind
	Field     string
	Reason    string
	Topic     string
	Partition int32
	Offset    int64
	// SchemaID is the registry schema id the record names (Avro and
	// Protobuf), 0 when none or unknown.
	SchemaID int64
	Err      error // underlying cause, if any
}

func (e *DecodeError) Error() string {
	where := ""
	if e.Topic != "" {
		where = fmt.Sprintf(" at %s/%d@%d", e.Topic, e.Partition, e.Offset)
	}
	field := ""
	if e.Field != "" {
		field = " field " + e.Field + ":"
	}
	msg := fmt.Sprintf("cdcjoin: bad record%s: %s:%s %s", where, e.Kind, field, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *DecodeError) Unwrap() error { return e.Err }

// AtPosition stamps err's record position if err is (or wraps) a
// *DecodeError, and returns err.
func AtPosition(err error, topic string, partition int32, offset int64) error {
	var de *DecodeError
	if errors.As(err, &de) {
		de.Topic, de.Partition, de.Offset = topic, partition, offset
	}
	return err
}

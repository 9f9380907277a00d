package row

// ColumnType is a projected column's type as declared by the record's Kafka
// Connect schema. Records without a schema carry no column types.
type ColumnType struct {
	Kind      Kind   // the Kind values of this column decode to
	Connect   string // Kafka Connect type: int8..int64, float32, float64, boolean, string, bytes, …
	Logical   string // Connect/Debezium logical name, e.g. "org.apache.kafka.connect.data.Decimal"
	Optional  bool
	Scale     int // Decimal scale (-1 when variable)
	Precision int // Decimal precision when the schema states it (connect.decimal.precision), else 0
}

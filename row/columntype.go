package row

// ColumnType is a projected column's type: the Kafka Connect schema of the
// column, as the record's schema states it or as the configuration declares
// it (the schema Debezium gives a column of a declared PostgreSQL type).
type ColumnType struct {
	Kind      Kind   // the Kind values of this column decode to
	Connect   string // Kafka Connect type: int8..int64, float32, float64, boolean, string, bytes, array, map, struct
	Logical   string // Connect/Debezium logical name, e.g. "org.apache.kafka.connect.data.Decimal"
	Optional  bool
	Scale     int // Decimal scale (-1 when variable)
	Precision int // Decimal precision when the schema states it (connect.decimal.precision), else 0
	// Elem is the element type of an array (Connect "array", Kind
	// KindArray); nil otherwise.
	Elem *ColumnType
}

// Known reports whether t says anything (the zero ColumnType: unknown).
func (t ColumnType) Known() bool { return t.Connect != "" || t.Kind != KindNull }

// AllKnown reports whether every type of ts is Known.
func AllKnown(ts []ColumnType) bool {
	for _, t := range ts {
		if !t.Known() {
			return false
		}
	}
	return true
}

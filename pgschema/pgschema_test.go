package pgschema

import (
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/row"
)

// TestColumn checks declarations against Debezium's documented mappings
// (the captured fixtures check the common ones against real records: see
// debezium's TestRealTypes).
func TestColumn(t *testing.T) {
	for _, tc := range []struct {
		decl    string
		modes   Modes
		connect string
		logical string
		kind    row.Kind
	}{
		{"smallint", Modes{}, "int16", "", row.KindInt},
		{"INT4", Modes{}, "int32", "", row.KindInt},
		{"bigserial", Modes{}, "int64", "", row.KindInt},
		{"float(24)", Modes{}, "float32", "", row.KindFloat},
		{"float", Modes{}, "float64", "", row.KindFloat},
		{"numeric(12, 2)", Modes{Decimal: "string"}, "string", "", row.KindString},
		{"numeric(12,2)", Modes{Decimal: "double"}, "float64", "", row.KindFloat},
		{"numeric", Modes{}, "struct", "io.debezium.data.VariableScaleDecimal", row.KindDecimal},
		{"money", Modes{}, "bytes", "org.apache.kafka.connect.data.Decimal", row.KindDecimal},
		{"character varying(40)", Modes{}, "string", "", row.KindString},
		{"time(3)", Modes{}, "int32", logicalTime, row.KindTime},
		{"time(3)", Modes{Time: "adaptive_time_microseconds"}, "int64", logicalMicroTime, row.KindTime},
		{"time", Modes{Time: "connect"}, "int32", logicalConnectTime, row.KindTime},
		{"time with time zone", Modes{}, "string", logicalZonedTime, row.KindString},
		{"timestamp(3)", Modes{}, "int64", logicalTimestamp, row.KindTimestamp},
		{"timestamp(6) without time zone", Modes{}, "int64", logicalMicroTimestamp, row.KindTimestamp},
		{"timestamp with time zone", Modes{}, "string", logicalZonedTimestamp, row.KindTimestamp},
		{"date", Modes{Time: "connect"}, "int32", logicalConnectDate, row.KindDate},
		{"interval", Modes{Interval: "string"}, "string", logicalInterval, row.KindString},
		{"bytea", Modes{Binary: "hex"}, "string", "", row.KindString},
		{"bit(8)", Modes{}, "bytes", logicalBits, row.KindBytes},
		{"bit", Modes{}, "boolean", "", row.KindBool},
		{"text[][]", Modes{}, "array", "", row.KindArray},
		{"enum not null", Modes{}, "string", logicalEnum, row.KindString},
	} {
		ct, err := Column(tc.decl, tc.modes)
		if err != nil {
			t.Errorf("%s: %v", tc.decl, err)
			continue
		}
		if ct.Connect != tc.connect || ct.Logical != tc.logical || ct.Kind != tc.kind {
			t.Errorf("%s %+v: got %s/%s/%s, want %s/%s/%s", tc.decl, tc.modes, ct.Connect, ct.Logical, ct.Kind, tc.connect, tc.logical, tc.kind)
		}
		if ct.Optional == strings.HasSuffix(tc.decl, "not null") {
			t.Errorf("%s: optional %v", tc.decl, ct.Optional)
		}
	}
	for _, bad := range []string{"", "blob", "numeric(2,3)", "integer with time zone", "text[", "bigint nul"} {
		if _, err := Column(bad, Modes{}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if p := (Modes{Decimal: "exact", Time: "adaptive"}).Problems(); len(p) != 1 || !strings.Contains(p[0], "decimal.handling.mode") {
		t.Errorf("problems %v", p)
	}
}

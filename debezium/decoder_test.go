package debezium

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/row"
)

// field returns a Kafka Connect field schema.
func field(name, typ, logical, params string) string {
	s := `{"type":"` + typ + `","optional":true`
	if logical != "" {
		s += `,"name":"` + logical + `","version":1`
	}
	if params != "" {
		s += `,"parameters":` + params
	}
	return s + `,"field":"` + name + `"}`
}

// wrap puts an envelope payload under a schema whose row struct has fields.
func wrap(payload string, fields ...string) string {
	row := `{"type":"struct","fields":[` + strings.Join(fields, ",") + `],"optional":true,"name":"t.Value","field":"%s"}`
	schema := `{"type":"struct","fields":[` + strings.Replace(row, "%s", "before", 1) + `,` + strings.Replace(row, "%s", "after", 1) +
		`,{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"}],"optional":false,"name":"t.Envelope"}`
	return `{"schema":` + schema + `,"payload":` + payload + `}`
}

func decodeOne(t *testing.T, cols []string, key, value string) (*Event, error) {
	t.Helper()
	d := NewDecoder(cols, Options{})
	var ev Event
	var k []byte
	if key != "" {
		k = []byte(key)
	}
	ok, err := d.Decode(k, []byte(value), &ev)
	if err == nil && !ok {
		t.Fatalf("unexpected tombstone for %s", value)
	}
	if err != nil {
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("error %T is not a *DecodeError: %v", err, err)
		}
	}
	return &ev, err
}

func TestOps(t *testing.T) {
	cols := []string{"id", "name"}
	for _, tc := range []struct {
		op                    string
		before, after         string
		wantBefore, wantAfter bool
	}{
		{"c", "null", `{"id":1,"name":"a"}`, false, true},
		{"r", "null", `{"id":1,"name":"a"}`, false, true},
		{"u", `{"id":1,"name":"a"}`, `{"id":1,"name":"b"}`, true, true},
		{"u", "null", `{"id":1,"name":"b"}`, false, true},
		{"d", `{"id":1,"name":"b"}`, "null", true, false},
		{"t", "null", "null", false, false},
	} {
		env := `{"before":` + tc.before + `,"after":` + tc.after + `,"source":{"ts_ms":5},"op":"` + tc.op + `","ts_ms":7}`
		sch := wrap(env, field("id", "int64", "", ""), field("name", "string", "", ""))
		for mode, value := range map[string]string{"bare": env, "schema": sch} {
			ev, err := decodeOne(t, cols, "", value)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.op, mode, err)
			}
			if ev.Op != Op(tc.op[0]) || ev.TsMs != 7 || ev.Source.TsMs != 5 {
				t.Errorf("%s %s: op=%v ts=%d src=%d", tc.op, mode, ev.Op, ev.TsMs, ev.Source.TsMs)
			}
			if ev.Before.Present != tc.wantBefore || ev.After.Present != tc.wantAfter {
				t.Errorf("%s %s: before=%v after=%v", tc.op, mode, ev.Before.Present, ev.After.Present)
			}
			if tc.wantAfter && !ev.After.Values[0].Equal(row.Int(1)) {
				t.Errorf("%s %s: after.id=%v", tc.op, mode, ev.After.Values[0])
			}
			if (mode == "schema") != (ev.Types != nil) {
				t.Errorf("%s %s: types=%v", tc.op, mode, ev.Types)
			}
			if len(ev.Before.Values) != 2 || len(ev.After.Values) != 2 || len(ev.Key.Values) != 2 {
				t.Errorf("%s %s: value slices not sized to the projection", tc.op, mode)
			}
		}
	}
}

func TestLogicalTypes(t *testing.T) {
	dec := func(scale string) string {
		return field("v", "bytes", "org.apache.kafka.connect.data.Decimal", `{"scale":"`+scale+`","connect.decimal.precision":"38"}`)
	}
	for _, tc := range []struct {
		name, schema, json string
		want               row.Value
	}{
		{"decimal", dec("2"), `"AeI6"`, row.Decimal("1234.50")},
		{"decimal negative scale 4", dec("4"), `"+y4="`, row.Decimal("-0.1234")},
		{"decimal -12.3400", dec("4"), `"/h34"`, row.Decimal("-12.3400")},
		{"decimal scale 0", dec("0"), `"MDk="`, row.Decimal("12345")},
		{"decimal zero", dec("3"), `"AA=="`, row.Decimal("0.000")},
		{"decimal empty bytes", dec("1"), `""`, row.Decimal("0.0")},
		{"decimal 128 needs sign byte", dec("0"), `"AIA="`, row.Decimal("128")},
		{"decimal -128", dec("0"), `"gA=="`, row.Decimal("-128")},
		{"decimal -1", dec("2"), `"/w=="`, row.Decimal("-0.01")},
		{"decimal int64 min", dec("0"), `"gAAAAAAAAAA="`, row.Decimal("-9223372036854775808")},
		{"decimal 8 bytes max", dec("3"), `"f/////////8="`, row.Decimal("9223372036854775.807")},
		{"decimal big positive", dec("10"), `"N1wk84zGDDOkqb1ZktyRctrYgA=="`, row.Decimal("123456789012345678901234567890123456.7890000000")},
		{"decimal big negative", dec("5"), `"/////////////////////w=="`, row.Decimal("-0.00001")},
		{"decimal 9 bytes negative", dec("0"), `"/wAAAAAAAAAA"`, row.Decimal("-18446744073709551616")},
		{"decimal negative schema scale", dec("-2"), `"DA=="`, row.Decimal("1200")},
		{"decimal unpadded base64", dec("2"), `"AeI6"`, row.Decimal("1234.50")},
		{"variable scale decimal", field("v", "struct", "io.debezium.data.VariableScaleDecimal", ""), `{"scale":3,"value":"+y4="}`, row.Decimal("-1.234")},
		{"variable scale decimal scale 0", field("v", "struct", "io.debezium.data.VariableScaleDecimal", ""), `{"value":"ew==","scale":0}`, row.Decimal("123")},
		{"decimal handling string", field("v", "string", "", ""), `"1234.50"`, row.String("1234.50")},
		{"decimal handling double", field("v", "float64", "", ""), `1234.5`, row.Float(1234.5)},
		{"date", field("v", "int32", "io.debezium.time.Date", ""), `19872`, row.Date(19872)},
		{"date negative", field("v", "int32", "io.debezium.time.Date", ""), `-1`, row.Date(-1)},
		{"connect date", field("v", "int32", "org.apache.kafka.connect.data.Date", ""), `3`, row.Date(3)},
		{"micro timestamp", field("v", "int64", "io.debezium.time.MicroTimestamp", ""), `1717000000123456`, row.Timestamp(1717000000123456)},
		{"timestamp ms", field("v", "int64", "io.debezium.time.Timestamp", ""), `1717000000123`, row.Timestamp(1717000000123000)},
		{"connect timestamp", field("v", "int64", "org.apache.kafka.connect.data.Timestamp", ""), `-1`, row.Timestamp(-1000)},
		{"nano timestamp", field("v", "int64", "io.debezium.time.NanoTimestamp", ""), `1717000000123456789`, row.Timestamp(1717000000123456)},
		{"nano timestamp negative floors", field("v", "int64", "io.debezium.time.NanoTimestamp", ""), `-1`, row.Timestamp(-1)},
		{"zoned timestamp", field("v", "string", "io.debezium.time.ZonedTimestamp", ""), `"2024-05-29T16:26:40.123456Z"`, row.Timestamp(1717000000123456)},
		{"zoned timestamp offset", field("v", "string", "io.debezium.time.ZonedTimestamp", ""), `"2024-05-29T18:26:40.5+02:00"`, row.Timestamp(1717000000500000)},
		{"zoned timestamp no fraction", field("v", "string", "io.debezium.time.ZonedTimestamp", ""), `"1970-01-01T00:00:00Z"`, row.Timestamp(0)},
		{"micro time", field("v", "int64", "io.debezium.time.MicroTime", ""), `45296000001`, row.Time(45296000001)},
		{"time ms", field("v", "int32", "io.debezium.time.Time", ""), `45296001`, row.Time(45296001000)},
		{"connect time", field("v", "int32", "org.apache.kafka.connect.data.Time", ""), `1`, row.Time(1000)},
		{"nano time", field("v", "int64", "io.debezium.time.NanoTime", ""), `45296000001999`, row.Time(45296000001)},
		{"uuid", field("v", "string", "io.debezium.data.Uuid", ""), `"6f1c2a44-8d8e-4f0e-9d3b-0c6f0e2b7a51"`, row.String("6f1c2a44-8d8e-4f0e-9d3b-0c6f0e2b7a51")},
		{"json", field("v", "string", "io.debezium.data.Json", ""), `"{\"a\":[1,2]}"`, row.String(`{"a":[1,2]}`)},
		{"enum", field("v", "string", "io.debezium.data.Enum", `{"allowed":"a,b"}`), `"b"`, row.String("b")},
		{"int8", field("v", "int8", "", ""), `-128`, row.Int(-128)},
		{"int16", field("v", "int16", "", ""), `32767`, row.Int(32767)},
		{"int32", field("v", "int32", "", ""), `-2147483648`, row.Int(-2147483648)},
		{"int64", field("v", "int64", "", ""), `9223372036854775807`, row.Int(math.MaxInt64)},
		{"int64 integral float literal", field("v", "int64", "", ""), `5.000`, row.Int(5)},
		{"int64 exponent literal", field("v", "int64", "", ""), `1e3`, row.Int(1000)},
		{"float32", field("v", "float32", "", ""), `1.5`, row.Float(1.5)},
		{"float64 NaN", field("v", "float64", "", ""), `"NaN"`, row.Float(math.NaN())},
		{"float64 -Infinity", field("v", "float64", "", ""), `"-Infinity"`, row.Float(math.Inf(-1))},
		{"boolean", field("v", "boolean", "", ""), `true`, row.Bool(true)},
		{"bytes", field("v", "bytes", "", ""), `"AAEC/w=="`, row.Bytes([]byte{0, 1, 2, 255})},
		{"null", field("v", "int64", "", ""), `null`, row.Null()},
		{"array", `{"type":"array","items":{"type":"int32","optional":true},"optional":true,"field":"v"}`, `[1, null, -3]`, row.Array([]row.Value{row.Int(1), row.Null(), row.Int(-3)})},
		{"float (JsonConverter's FLOAT32)", field("v", "float", "", ""), `3.4028235E38`, row.Float(3.4028235e38)},
		{"double (JsonConverter's FLOAT64)", field("v", "double", "", ""), `1.0E308`, row.Float(1e308)},
		{"double NaN", field("v", "double", "", ""), `"NaN"`, row.Float(math.NaN())},
		{"float -Infinity", field("v", "float", "", ""), `"-Infinity"`, row.Float(math.Inf(-1))},
		{"toast string", field("v", "string", "", ""), `"__debezium_unavailable_value"`, row.Unavailable()},
		{"toast bytes", field("v", "bytes", "", ""), `"X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="`, row.Unavailable()},
		{"toast decimal", dec("2"), `"X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="`, row.Unavailable()},
		{"toast json", field("v", "string", "io.debezium.data.Json", ""), `"__debezium_unavailable_value"`, row.Unavailable()},
		{"toast int column", field("v", "int64", "", ""), `"__debezium_unavailable_value"`, row.Unavailable()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			value := wrap(`{"before":null,"after":{"v":`+tc.json+`},"op":"c"}`, tc.schema)
			ev, err := decodeOne(t, []string{"v"}, "", value)
			if err != nil {
				t.Fatal(err)
			}
			if got := ev.After.Values[0]; !got.Equal(tc.want) {
				t.Fatalf("got %v %q (%d), want %v %q (%d)", got.Kind, got.Str, got.Int, tc.want.Kind, tc.want.Str, tc.want.Int)
			}
			if tc.want.Kind != row.KindUnavailable && tc.want.Kind != row.KindNull && ev.Types[0].Kind != tc.want.Kind {
				t.Errorf("type kind %v, value kind %v", ev.Types[0].Kind, tc.want.Kind)
			}
		})
	}
}

func TestNoSchemaValues(t *testing.T) {
	for _, tc := range []struct {
		json string
		want row.Value
	}{
		{`42`, row.Int(42)},
		{`-0`, row.Int(0)},
		{`-9223372036854775808`, row.Int(math.MinInt64)},
		{`9223372036854775808`, row.Decimal("9223372036854775808")},
		{`-99999999999999999999999`, row.Decimal("-99999999999999999999999")},
		{`1.50`, row.Decimal("1.50")},
		{`-0.001`, row.Decimal("-0.001")},
		{`1.5e3`, row.Decimal("1500")},
		{`1.50E+1`, row.Decimal("15.0")},
		{`25e-3`, row.Decimal("0.025")},
		{`-1E-2`, row.Decimal("-0.01")},
		{`0e10`, row.Decimal("0")},
		{`-0.0`, row.Decimal("0.0")},
		{`"x"`, row.String("x")},
		{`""`, row.String("")},
		{`"caf\u00e9 \"q\" \\ \/ \n\t"`, row.String("café \"q\" \\ / \n\t")},
		{`"\ud83d\ude00"`, row.String("😀")},
		{`"\ud83d x"`, row.String("\uFFFD x")},
		{`true`, row.Bool(true)},
		{`false`, row.Bool(false)},
		{`null`, row.Null()},
		{`"__debezium_unavailable_value"`, row.Unavailable()},
		{`"__debezium_unavailable\u005fvalue"`, row.Unavailable()},
		{`[1,2]`, row.Array([]row.Value{row.Int(1), row.Int(2)})},
		{`[]`, row.Array(nil)},
		{`["a",null,1.50,[true]]`, row.Array([]row.Value{row.String("a"), row.Null(), row.Decimal("1.50"), row.Array([]row.Value{row.Bool(true)})})},
		{`["__debezium_unavailable_value"]`, row.Unavailable()},
		{`"X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="`, row.Unavailable()},
		{`[95,95,100,101,98,101,122,105,117,109,95,117,110,97,118,97,105,108,97,98,108,101,95,118,97,108,117,101]`, row.Unavailable()},
		{`["__debezium_unavailable_value","x"]`, row.Array([]row.Value{row.String("__debezium_unavailable_value"), row.String("x")})},
		{`{"scale":2,"value":"BNI="}`, row.Decimal("12.34")},
		{`{"x":1}`, row.String(`{"x":1}`)},
	} {
		ev, err := decodeOne(t, []string{"v"}, "", `{"after":{"v":`+tc.json+`},"op":"c"}`)
		if err != nil {
			t.Errorf("%s: %v", tc.json, err)
			continue
		}
		if got := ev.After.Values[0]; !got.Equal(tc.want) {
			t.Errorf("%s: got %v %q %d, want %v %q %d", tc.json, got.Kind, got.Str, got.Int, tc.want.Kind, tc.want.Str, tc.want.Int)
		}
		if ev.Types != nil {
			t.Errorf("%s: types without schema", tc.json)
		}
	}
}

func TestTombstones(t *testing.T) {
	d := NewDecoder([]string{"id"}, Options{})
	for _, v := range []string{"", "null", " null\n", `{"schema":null,"payload":null}`,
		wrap("null", field("id", "int64", "", ""))} {
		var ev Event
		var value []byte
		if v != "" {
			value = []byte(v)
		}
		ok, err := d.Decode([]byte(`{"id":1}`), value, &ev)
		if ok || err != nil {
			t.Errorf("%q: ok=%v err=%v, want tombstone", v, ok, err)
		}
	}
	var ev Event
	if ok, err := d.Decode(nil, nil, &ev); ok || err != nil {
		t.Errorf("nil: ok=%v err=%v", ok, err)
	}
}

func TestKeys(t *testing.T) {
	cols := []string{"id", "name"}
	value := `{"before":null,"after":{"id":1,"name":"a"},"op":"c"}`
	keySchema := `{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"}],"optional":false,"name":"t.Key"}`
	for _, tc := range []struct {
		key     string
		present bool
	}{
		{`{"id":1}`, true},
		{` {"id" : 1 } `, true},
		{`{"schema":` + keySchema + `,"payload":{"id":1}}`, true},
		{`{"schema":null,"payload":{"id":1}}`, true},
		{`null`, false},
		{"", false},
	} {
		ev, err := decodeOne(t, cols, tc.key, value)
		if err != nil {
			t.Fatalf("%s: %v", tc.key, err)
		}
		if ev.Key.Present != tc.present {
			t.Errorf("%s: present=%v", tc.key, ev.Key.Present)
		}
		if tc.present && (!ev.Key.Values[0].Equal(row.Int(1)) || !ev.Key.Values[1].IsNull()) {
			t.Errorf("%s: key=%v", tc.key, ev.Key.Values)
		}
	}
	// A schema'd key decodes by its schema (here: a timestamp key).
	ks := `{"schema":{"type":"struct","fields":[{"type":"int64","name":"io.debezium.time.Timestamp","field":"id"}]},"payload":{"id":2}}`
	ev, err := decodeOne(t, cols, ks, value)
	if err != nil || !ev.Key.Values[0].Equal(row.Timestamp(2000)) {
		t.Errorf("timestamp key: %v %v", ev.Key.Values, err)
	}
}

// TestReplicaIdentityDefault: deletes carry only the key in before; updates
// have no before.
func TestReplicaIdentityDefault(t *testing.T) {
	cols := []string{"id", "user_id", "domain_name"}
	ev, err := decodeOne(t, cols, `{"id":10}`, `{"before":{"id":10},"after":null,"op":"d"}`)
	if err != nil {
		t.Fatal(err)
	}
	if !ev.Before.Present || !ev.Before.Values[0].Equal(row.Int(10)) || !ev.Before.Values[1].IsNull() || ev.After.Present {
		t.Errorf("delete: %+v", ev)
	}
	ev, err = decodeOne(t, cols, `{"id":10}`, `{"before":null,"after":{"id":10,"user_id":3,"domain_name":"x"},"op":"u"}`)
	if err != nil || ev.Before.Present || !ev.After.Values[1].Equal(row.Int(3)) {
		t.Errorf("update: %+v %v", ev, err)
	}
}

func TestSource(t *testing.T) {
	pg := `{"before":null,"after":{"id":1},"op":"c","source":{"version":"3.0.7.Final","connector":"postgresql","name":"pg","ts_ms":1717000000000,"snapshot":"last","db":"app","sequence":"[\"24023000\",\"24023512\"]","ts_us":1,"schema":"public","table":"users","txId":771,"lsn":24023512,"xmin":null},"ts_ms":9}`
	ev, err := decodeOne(t, []string{"id"}, "", pg)
	if err != nil {
		t.Fatal(err)
	}
	want := Source{TsMs: 1717000000000, Snapshot: "last", LSN: 24023512, Sequence: `["24023000","24023512"]`, TxID: 771, DB: "app", Schema: "public", Table: "users"}
	if ev.Source != want || ev.TsMs != 9 {
		t.Errorf("pg source:\n got %+v\nwant %+v", ev.Source, want)
	}
	mysql := `{"before":null,"after":{"id":1},"op":"c","source":{"version":"1.9.7.Final","connector":"mysql","name":"my","ts_ms":1717000000000,"snapshot":true,"db":"shop","sequence":null,"table":"users","server_id":223344,"gtid":"3E11FA47-71CA-11E1-9E33-C80AA9429562:23","file":"mysql-bin.000003","pos":154,"row":2,"thread":7,"query":null},"ts_ms":9}`
	ev, err = decodeOne(t, []string{"id"}, "", mysql)
	if err != nil {
		t.Fatal(err)
	}
	want = Source{TsMs: 1717000000000, Snapshot: "true", File: "mysql-bin.000003", Pos: 154, Row: 2, GTID: "3E11FA47-71CA-11E1-9E33-C80AA9429562:23", DB: "shop", Table: "users"}
	if ev.Source != want {
		t.Errorf("mysql source:\n got %+v\nwant %+v", ev.Source, want)
	}
	for snap, want := range map[string]string{`false`: "false", `"incremental"`: "incremental", `null`: ""} {
		ev, err = decodeOne(t, []string{"id"}, "", `{"after":{"id":1},"op":"r","source":{"snapshot":`+snap+`,"sequence":["1","2"]}}`)
		if err != nil || ev.Source.Snapshot != want || ev.Source.Sequence != `["1","2"]` {
			t.Errorf("snapshot %s: %+v %v", snap, ev.Source, err)
		}
	}
}

func TestErrors(t *testing.T) {
	cols := []string{"id", "user_id"}
	i64 := field("user_id", "int64", "", "")
	id := field("id", "int64", "", "")
	for _, tc := range []struct {
		name, key, value string
		kind             ErrorKind
		field            string
	}{
		{"not json", "", `xyz`, ErrMalformed, "value"},
		{"array", "", `[1]`, ErrMalformed, "value"},
		{"truncated", "", `{"before":null,"after":{"id":1`, ErrMalformed, "after"},
		{"trailing", "", `{"after":{"id":1,"user_id":2},"op":"c"} x`, ErrMalformed, "value"},
		{"not an envelope", "", `{"foo":1}`, ErrMalformed, "value"},
		{"after not object", "", `{"after":5,"op":"c"}`, ErrMalformed, "after"},
		{"payload not object", "", `{"schema":null,"payload":5}`, ErrMalformed, "payload"},
		{"schema without payload", "", `{"schema":null}`, ErrMalformed, "payload"},
		{"control char in skipped field", "", "{\"after\":{\"id\":1,\"user_id\":2,\"x\":\"a\x01\"},\"op\":\"c\"}", ErrMalformed, "after"},
		{"mismatched bracket", "", `{"after":{"id":1,"user_id":2,"x":[1}},"op":"c"}`, ErrMalformed, "after"},
		{"schema not struct", "", `{"schema":{"type":"string"},"payload":{"op":"c"}}`, ErrMalformed, "schema"},
		{"bad decimal scale", "", wrap(`{"after":null,"op":"c"}`, id, field("user_id", "bytes", "org.apache.kafka.connect.data.Decimal", `{"scale":"x"}`)), ErrMalformed, "schema.user_id"},
		{"missing op", "", `{"after":{"id":1,"user_id":2}}`, ErrUnknownOp, "op"},
		{"missing op schema", "", wrap(`{"after":{"id":1,"user_id":2}}`, id, i64), ErrUnknownOp, "payload.op"},
		{"unknown op", "", `{"after":{"id":1,"user_id":2},"op":"x"}`, ErrUnknownOp, "op"},
		{"op not string", "", `{"after":{"id":1,"user_id":2},"op":1}`, ErrUnknownOp, "op"},
		{"op null", "", `{"after":{"id":1,"user_id":2},"op":null}`, ErrUnknownOp, "op"},
		{"string for int64", "", wrap(`{"after":{"id":1,"user_id":"7"},"op":"c"}`, id, i64), ErrTypeMismatch, "payload.after.user_id"},
		{"fraction for int64", "", wrap(`{"after":{"id":1,"user_id":1.5},"op":"c"}`, id, i64), ErrTypeMismatch, "payload.after.user_id"},
		{"int8 overflow", "", wrap(`{"after":{"id":1,"user_id":128},"op":"c"}`, id, field("user_id", "int8", "", "")), ErrTypeMismatch, "payload.after.user_id"},
		{"int64 overflow", "", wrap(`{"after":{"id":1,"user_id":9223372036854775808},"op":"c"}`, id, i64), ErrTypeMismatch, "payload.after.user_id"},
		{"ms timestamp overflow", "", wrap(`{"after":{"id":1,"user_id":9223372036854776},"op":"c"}`, id, field("user_id", "int64", "io.debezium.time.Timestamp", "")), ErrTypeMismatch, "payload.after.user_id"},
		{"bool for string", "", wrap(`{"after":{"id":1,"user_id":true},"op":"c"}`, id, field("user_id", "string", "", "")), ErrTypeMismatch, "payload.after.user_id"},
		{"bad base64", "", wrap(`{"after":{"id":1,"user_id":"!!"},"op":"c"}`, id, field("user_id", "bytes", "", "")), ErrTypeMismatch, "payload.after.user_id"},
		{"bad zoned", "", wrap(`{"after":{"id":1,"user_id":"yesterday"},"op":"c"}`, id, field("user_id", "string", "io.debezium.time.ZonedTimestamp", "")), ErrTypeMismatch, "payload.after.user_id"},
		{"object for int", "", wrap(`{"after":{"id":1,"user_id":{}},"op":"c"}`, id, i64), ErrTypeMismatch, "payload.after.user_id"},
		{"bad variable decimal", "", wrap(`{"after":{"id":1,"user_id":{"scale":1}},"op":"c"}`, id, field("user_id", "struct", "io.debezium.data.VariableScaleDecimal", "")), ErrTypeMismatch, "payload.after.user_id"},
		{"huge exponent", "", `{"after":{"id":1,"user_id":1e999999},"op":"c"}`, ErrTypeMismatch, "after.user_id"},
		{"source ts_ms string", "", `{"after":{"id":1,"user_id":2},"op":"c","source":{"ts_ms":"x"}}`, ErrTypeMismatch, "source.ts_ms"},
		{"source db number", "", `{"after":{"id":1,"user_id":2},"op":"c","source":{"db":5}}`, ErrTypeMismatch, "source.db"},
		{"envelope ts_ms string", "", `{"after":{"id":1,"user_id":2},"op":"c","ts_ms":"x"}`, ErrTypeMismatch, "ts_ms"},
		{"missing column", "", `{"after":{"id":1,"usr_id":2},"op":"c"}`, ErrMissingColumn, "after.user_id"},
		{"missing column schema", "", wrap(`{"after":{"id":1},"op":"c"}`, id), ErrMissingColumn, "payload.after.user_id"},
		{"key not object", `5`, `{"after":{"id":1,"user_id":2},"op":"c"}`, ErrMalformed, "key"},
		{"key malformed", `{"id":`, `{"after":{"id":1,"user_id":2},"op":"c"}`, ErrMalformed, "key.id"},
		{"key type mismatch", `{"schema":{"type":"struct","fields":[{"type":"int64","field":"id"}]},"payload":{"id":"a"}}`, `{"after":{"id":1,"user_id":2},"op":"c"}`, ErrTypeMismatch, "key.payload.id"},
		{"key schema without payload", `{"schema":null}`, `{"after":{"id":1,"user_id":2},"op":"c"}`, ErrMalformed, "key.payload"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(cols, Options{})
			var ev Event
			var key []byte
			if tc.key != "" {
				key = []byte(tc.key)
			}
			ok, err := d.Decode(key, []byte(tc.value), &ev)
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("ok=%v err=%v, want *DecodeError", ok, err)
			}
			if ok || de.Kind != tc.kind || de.Field != tc.field {
				t.Errorf("got ok=%v kind=%s field=%q (%v), want kind=%s field=%q", ok, de.Kind, de.Field, err, tc.kind, tc.field)
			}
			if !strings.HasPrefix(err.Error(), "cdcjoin: ") || de.Reason == "" {
				t.Errorf("error text %q", err)
			}
		})
	}
}

func TestOversized(t *testing.T) {
	d := NewDecoder([]string{"id"}, Options{MaxRecordBytes: 30})
	var ev Event
	value := []byte(`{"after":{"id":1},"op":"c"}`)
	if ok, err := d.Decode([]byte(`{"id":1}`), value, &ev); !ok || err != nil {
		t.Fatalf("small record: %v %v", ok, err)
	}
	for _, tc := range []struct{ key, value, field string }{
		{`{"id":1}`, `{"after":{"id":1},"op":"c","ts_ms":12345}`, "value"},
		{`{"id":1,"padding":"xxxxxxxxxxxxxxxxxxxxxxxx"}`, string(value), "key"},
	} {
		_, err := d.Decode([]byte(tc.key), []byte(tc.value), &ev)
		var de *DecodeError
		if !errors.As(err, &de) || de.Kind != ErrOversized || de.Field != tc.field {
			t.Errorf("%s: %v", tc.field, err)
		}
	}
}

// TestReuse: a second Decode into the same Event fully overwrites the first.
func TestReuse(t *testing.T) {
	cols := []string{"id", "name"}
	d := NewDecoder(cols, Options{})
	var ev Event
	first := wrap(`{"before":{"id":1,"name":"a"},"after":{"id":1,"name":"b"},"source":{"lsn":5,"db":"x"},"op":"u","ts_ms":3}`,
		field("id", "int64", "", ""), field("name", "string", "", ""))
	if _, err := d.Decode([]byte(`{"id":1}`), []byte(first), &ev); err != nil {
		t.Fatal(err)
	}
	kept := ev.After.Values[1].Str
	if _, err := d.Decode(nil, []byte(`{"before":{"id":2},"after":null,"op":"d"}`), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Types != nil || ev.After.Present || ev.Key.Present || ev.Source != (Source{}) || ev.TsMs != 0 ||
		!ev.Before.Values[1].IsNull() || !ev.Before.Values[0].Equal(row.Int(2)) {
		t.Errorf("stale fields after reuse: %+v", ev)
	}
	if kept != "b" {
		t.Errorf("a kept string changed: %q", kept)
	}
}

// TestManyColumns exercises the map-based column matching.
func TestManyColumns(t *testing.T) {
	var cols, fields []string
	for i := 0; i < 20; i++ {
		c := "col" + string(rune('a'+i))
		cols = append(cols, c)
		fields = append(fields, `"`+c+`":`+string(rune('0'+i%10)))
	}
	ev, err := decodeOne(t, cols, "", `{"after":{`+strings.Join(fields, ",")+`},"op":"c"}`)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range ev.After.Values {
		if !v.Equal(row.Int(int64(i % 10))) {
			t.Errorf("%s = %v", cols[i], v)
		}
	}
}

// TestSchemaCache: alternating schemas, schema after payload, and a cache
// overflow all decode correctly.
func TestSchemaCache(t *testing.T) {
	d := NewDecoder([]string{"v"}, Options{})
	var ev Event
	for i := 0; i < 3*maxCachedSchemas; i++ {
		typ, json, want := "int64", "5", row.Int(5)
		if i%2 == 1 {
			typ, json, want = "int64\",\"name\":\"io.debezium.time.Timestamp", "5", row.Timestamp(5000)
		}
		sch := field("v", typ, "", "")
		sch = strings.Replace(sch, `"field"`, `"doc":"`+strings.Repeat("x", i%(maxCachedSchemas+7))+`","field"`, 1)
		value := wrap(`{"after":{"v":`+json+`},"op":"c"}`, sch)
		if i%3 == 0 { // payload before schema
			j := strings.Index(value, `,"payload":`)
			value = `{"payload":` + value[j+len(`,"payload":`):len(value)-1] + `,"schema":` + value[len(`{"schema":`):j] + `}`
		}
		if _, err := d.Decode(nil, []byte(value), &ev); err != nil {
			t.Fatalf("%d: %v\n%s", i, err, value)
		}
		if !ev.After.Values[0].Equal(want) {
			t.Fatalf("%d: got %v want %v", i, ev.After.Values[0], want)
		}
	}
}

// TestNoAllocs: decoding a repeated schema'd record with non-string
// projections allocates nothing.
func TestNoAllocs(t *testing.T) {
	d := NewDecoder([]string{"id", "user_id"}, Options{})
	value := []byte(wrap(`{"before":null,"after":{"id":1,"user_id":2,"name":"x"},"source":{"ts_ms":1,"db":"app","table":"t","snapshot":"false"},"op":"c"}`,
		field("id", "int64", "", ""), field("user_id", "int64", "", ""), field("name", "string", "", "")))
	key := []byte(`{"id":1}`)
	var ev Event
	if _, err := d.Decode(key, value, &ev); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = d.Decode(key, value, &ev) }); n != 0 {
		t.Errorf("%v allocations per decode", n)
	}
}

// TestDecimalTooLarge: a decimal beyond PostgreSQL's numeric range is
// refused instead of costing seconds of conversion.
func TestDecimalTooLarge(t *testing.T) {
	big := strings.Repeat("AAAA", (maxDecimalBytes/3)+10)
	value := wrap(`{"after":{"v":"`+big+`"},"op":"c"}`, field("v", "bytes", "org.apache.kafka.connect.data.Decimal", `{"scale":"0"}`))
	_, err := decodeOne(t, []string{"v"}, "", value)
	var de *DecodeError
	if !errors.As(err, &de) || de.Kind != ErrTypeMismatch || de.Field != "payload.after.v" {
		t.Fatalf("got %v", err)
	}
}

func TestPlainJSON(t *testing.T) {
	d := NewDecoder([]string{"ad_id", "at", "note"}, Options{Plain: true, KeyColumns: 1})
	var ev Event
	ok, err := d.Decode(nil, []byte(`{"ad_id": 7, "extra": {"x": [1]}, "at": 1714557600000000}`), &ev)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if ev.Op != OpCreate || !ev.After.Present || ev.After.Values[0].Int != 7 || ev.After.Values[1].Int != 1714557600000000 || !ev.After.Values[2].IsNull() {
		t.Errorf("decoded %+v", ev)
	}
	if ok, err := d.Decode(nil, []byte(`null`), &ev); ok || err != nil {
		t.Errorf("null value: %v %v", ok, err)
	}
	for _, bad := range []string{`[1]`, `{"ad_id": 1} x`, `{"ad_id": {"a": 1}}`} {
		if _, err := d.Decode(nil, []byte(bad), &ev); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

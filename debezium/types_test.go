package debezium

import (
	"errors"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/pgschema"
	"github.com/cdcjoin/cdcjoin/row"
)

// TestNotJSONIsABadRecord: only a nil or empty value (or JSON null) is a
// tombstone; binary values, such as the Schema Registry wire format of
// Confluent's or Apicurio's Avro/Protobuf/JSON Schema converters, are bad
// records whose message names the format and the fix.
func TestNotJSONIsABadRecord(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		kind        ErrorKind
		says        string
	}{
		{"NUL byte", "\x00", ErrNotJSON, "NUL byte"},
		{"Confluent Avro", "\x00\x00\x00\x00\x2a\x02\x06abc", ErrNotJSON, "Schema Registry wire format (magic byte 0, schema id 42)"},
		{"Confluent JSON Schema", "\x00\x00\x00\x01\x00{\"before\":null,\"after\":{\"id\":1},\"op\":\"c\"}", ErrNotJSON, "schema id 256"},
		{"Apicurio (8-byte global id)", "\x00\x00\x00\x00\x00\x00\x00\x00\x07\x02", ErrNotJSON, "JsonConverter"},
		{"Avro container", "Obj\x01\x04\x14avro.codec", ErrNotJSON, "an Avro object container"},
		{"text", "hello", ErrMalformed, "not a JSON object"},
		{"binary", "\xff\xfe\x01", ErrNotJSON, "first byte 0xff"},
		{"control byte", "\x05{}", ErrNotJSON, "binary data"},
		{"whitespace only", "  \n", ErrMalformed, "only whitespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder([]string{"id"}, Options{})
			var ev Event
			ok, err := d.Decode([]byte(`{"id":1}`), []byte(tc.value), &ev)
			var de *DecodeError
			if ok || !errors.As(err, &de) {
				t.Fatalf("ok=%v err=%v: a %s value was not a bad record", ok, err, tc.name)
			}
			if de.Kind != tc.kind || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("got %s %q, want %s saying %q", de.Kind, err, tc.kind, tc.says)
			}
		})
	}
	// A framed key is not a missing key either.
	d := NewDecoder([]string{"id"}, Options{})
	var ev Event
	ok, err := d.Decode([]byte("\x00\x00\x00\x00\x07\x02"), []byte(`{"after":{"id":1},"op":"c"}`), &ev)
	var de *DecodeError
	if ok || !errors.As(err, &de) || de.Kind != ErrNotJSON || de.Field != "key" {
		t.Errorf("framed key: ok=%v err=%v", ok, err)
	}
	if ErrNotJSON.String() != "not_json" {
		t.Error(ErrNotJSON.String())
	}
}

// TestKeyTypesWithoutSchema: a key column without a schema or declared
// type takes one number in any spelling as one key, and a value of another
// type than the column's first one is a bad record, never a second key.
func TestKeyTypesWithoutSchema(t *testing.T) {
	cols := []string{"id", "user_id", "name"}
	decode := func(d *Decoder, id, userID string) (*Event, error) {
		var ev Event
		ok, err := d.Decode([]byte(`{"id":`+id+`}`), []byte(`{"after":{"id":`+id+`,"user_id":`+userID+`,"name":"x"},"op":"c"}`), &ev)
		if err == nil && !ok {
			t.Fatal("tombstone")
		}
		return &ev, err
	}
	d := NewDecoder(cols, Options{KeyColumns: 2})
	for _, spelling := range []string{`258`, `258.0`, `2.58e2`, `25800E-2`, `258.000`} {
		ev, err := decode(d, `1`, spelling)
		if err != nil {
			t.Fatalf("%s: %v", spelling, err)
		}
		if got := ev.After.Values[1]; !got.Equal(row.Int(258)) {
			t.Errorf("user_id %s decoded as %v %q %d, want int 258", spelling, got.Kind, got.Str, got.Int)
		}
		if got := ev.Key.Values[0]; !got.Equal(row.Int(1)) {
			t.Errorf("record key id = %v", got)
		}
	}
	for _, tc := range []struct{ a, b string }{
		{`1e30`, `1000000000000000000000000000000`},
		{`1.50`, `1.5`},
		{`-0.0`, `0`},
		{`{"scale":2,"value":"AQI="}`, `2.58`}, // VariableScaleDecimal 2.58
	} {
		ea, err := decode(NewDecoder(cols, Options{KeyColumns: 2}), `1`, tc.a)
		if err != nil {
			t.Fatalf("%s: %v", tc.a, err)
		}
		eb, err := decode(NewDecoder(cols, Options{KeyColumns: 2}), `1`, tc.b)
		if err != nil {
			t.Fatalf("%s: %v", tc.b, err)
		}
		va, vb := ea.After.Values[1], eb.After.Values[1]
		if !va.Equal(vb) || string(row.AppendKey(nil, []row.Value{va})) != string(row.AppendKey(nil, []row.Value{vb})) {
			t.Errorf("%s and %s are different keys: %v %q / %v %q", tc.a, tc.b, va.Kind, va.Str, vb.Kind, vb.Str)
		}
	}
	// Another type than the first value's: a bad record.
	for _, bad := range []string{`"258"`, `true`, `{"a":1}`, `[258]`} {
		d := NewDecoder(cols, Options{KeyColumns: 2})
		if _, err := decode(d, `1`, `258`); err != nil {
			t.Fatal(err)
		}
		_, err := decode(d, `1`, bad)
		var de *DecodeError
		if !errors.As(err, &de) || de.Kind != ErrTypeMismatch || de.Field != "after.user_id" {
			t.Errorf("user_id %s after 258: err=%v, want a type mismatch at after.user_id", bad, err)
		}
	}
	// A string key column stays a string column: "258" is not 258.
	d = NewDecoder(cols, Options{KeyColumns: 2})
	if _, err := decode(d, `1`, `"258"`); err != nil {
		t.Fatal(err)
	}
	if _, err := decode(d, `1`, `258`); err == nil {
		t.Error("a number in a string key column was accepted")
	}
	// The record key is checked like the row: a string id in the key.
	d = NewDecoder(cols, Options{KeyColumns: 2})
	var ev Event
	if _, err := d.Decode([]byte(`{"id":"1"}`), []byte(`{"after":{"id":1,"user_id":2,"name":"x"},"op":"c"}`), &ev); err == nil {
		t.Error(`record key {"id":"1"} for a numeric id was accepted`)
	}
	// Non-key columns keep their spelling.
	ev2, err := decode(NewDecoder(cols, Options{KeyColumns: 2}), `1`, `2`)
	if err != nil || ev2.After.Values[2].Str != "x" {
		t.Fatal(err)
	}
	// What the decoder learned survives a restart through KeyTypes.
	d = NewDecoder(cols, Options{KeyColumns: 2})
	if _, err := decode(d, `1`, `"a"`); err != nil {
		t.Fatal(err)
	}
	d2 := NewDecoder(cols, Options{KeyColumns: 2})
	if err := d2.RestoreKeyTypes(d.KeyTypes()); err != nil {
		t.Fatal(err)
	}
	if _, err := decode(d2, `1`, `5`); err == nil {
		t.Error("restored decoder accepted a number in a string key column")
	}
	if err := d2.RestoreKeyTypes([]byte{0xff}); err == nil {
		t.Error("corrupt key types accepted")
	}
}

// TestDeclaredKeyTypes: with declared types, a key of another JSON type is
// a bad record from the first record on, and equal numbers are equal keys.
func TestDeclaredKeyTypes(t *testing.T) {
	bigint, err := pgschema.Column("bigint not null", pgschema.Modes{})
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoder([]string{"id"}, Options{Types: []row.ColumnType{bigint}, KeyColumns: 1})
	for _, tc := range []struct {
		json string
		ok   bool
	}{
		{`"258"`, false}, {`258`, true}, {`258.0`, true}, {`2.58e2`, true}, {`1e30`, false},
		{`true`, false}, {`{}`, false}, {`[1]`, false}, {`258.5`, false},
	} {
		var ev Event
		_, err := d.Decode(nil, []byte(`{"after":{"id":`+tc.json+`},"op":"c"}`), &ev)
		if (err == nil) != tc.ok {
			t.Errorf("id %s: err=%v", tc.json, err)
			continue
		}
		if tc.ok && !ev.After.Values[0].Equal(row.Int(258)) {
			t.Errorf("id %s = %v", tc.json, ev.After.Values[0])
		}
	}
}

// TestUnknownSchemaType: a schema type Kafka Connect does not have is an
// error, not the value's JSON text.
func TestUnknownSchemaType(t *testing.T) {
	_, err := decodeOne(t, []string{"v"}, "", wrap(`{"after":{"v":[1,2]},"op":"c"}`, field("v", "list", "", "")))
	var de *DecodeError
	if !errors.As(err, &de) || de.Kind != ErrMalformed || !strings.Contains(de.Reason, `"list"`) {
		t.Errorf("err = %v", err)
	}
}

// TestDeclaredTypes: a record without a schema decodes by the declared
// types exactly as the same record with its schema, and a schema that
// disagrees with a declaration is a bad record.
func TestDeclaredTypes(t *testing.T) {
	decl := func(s string) row.ColumnType {
		ct, err := pgschema.Column(s, pgschema.Modes{Time: "adaptive_time_microseconds"})
		if err != nil {
			t.Fatal(err)
		}
		return ct
	}
	cols := []string{"n", "f", "b", "ts", "a", "u"}
	types := []row.ColumnType{decl("numeric(10,2)"), decl("double precision"), decl("bytea"), decl("timestamp"), decl("integer[]"), decl("uuid")}
	payload := `{"after":{"n":"BNI=","f":"NaN","b":"AP8=","ts":-1,"a":[1,null],"u":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},"op":"c"}`
	schema := wrap(payload,
		field("n", "bytes", logicalDecimal, `{"scale":"2","connect.decimal.precision":"10"}`),
		field("f", "double", "", ""), field("b", "bytes", "", ""),
		field("ts", "int64", logicalMicroTimestamp, ""),
		`{"type":"array","items":{"type":"int32","optional":true},"optional":true,"field":"a"}`,
		field("u", "string", "io.debezium.data.Uuid", ""))
	want := []row.Value{row.Decimal("12.34"), {Kind: row.KindFloat}, row.Bytes([]byte{0, 0xff}), row.Timestamp(-1),
		row.Array([]row.Value{row.Int(1), row.Null()}), row.String("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")}
	for name, value := range map[string]string{"schema": schema, "no schema": payload} {
		d := NewDecoder(cols, Options{Types: types})
		var ev Event
		if ok, err := d.Decode(nil, []byte(value), &ev); !ok || err != nil {
			t.Fatalf("%s: ok=%v err=%v", name, ok, err)
		}
		for i, w := range want {
			got := ev.After.Values[i]
			if i == 1 {
				if got.Kind != row.KindFloat || got.Float == got.Float {
					t.Errorf("%s: f = %v, want NaN", name, got)
				}
				continue
			}
			if !got.Equal(w) {
				t.Errorf("%s: %s = %v %q, want %v %q", name, cols[i], got.Kind, got.Str, w.Kind, w.Str)
			}
		}
		if len(ev.Types) != len(cols) || ev.Types[0].Kind != row.KindDecimal || ev.Types[0].Scale != 2 || ev.Types[4].Elem == nil {
			t.Errorf("%s: types %+v", name, ev.Types)
		}
	}
	// numeric(10,4) declared, the schema says scale 2: one column, two formats.
	d := NewDecoder(cols[:1], Options{Types: []row.ColumnType{decl("numeric(10,4)")}})
	var ev Event
	_, err := d.Decode(nil, []byte(wrap(`{"after":{"n":"BNI="},"op":"c"}`,
		field("n", "bytes", logicalDecimal, `{"scale":"2"}`))), &ev)
	var de *DecodeError
	if !errors.As(err, &de) || de.Kind != ErrTypeMismatch || !strings.Contains(de.Reason, "declares") {
		t.Errorf("scale 2 schema for a scale 4 declaration: %v", err)
	}
	// A decimal without a schema and without a declaration stays base64
	// text; declared, it is the number (Debezium's decimal.handling.mode
	// precise sends the unscaled bytes).
	for _, tc := range []struct {
		types []row.ColumnType
		want  row.Value
	}{{nil, row.String("BNI=")}, {[]row.ColumnType{decl("numeric(10,2)")}, row.Decimal("12.34")}} {
		d := NewDecoder([]string{"n"}, Options{Types: tc.types})
		var ev Event
		if _, err := d.Decode(nil, []byte(`{"after":{"n":"BNI="},"op":"c"}`), &ev); err != nil {
			t.Fatal(err)
		}
		if !ev.After.Values[0].Equal(tc.want) {
			t.Errorf("declared %v: %v %q", tc.types != nil, ev.After.Values[0].Kind, ev.After.Values[0].Str)
		}
	}
}

// TestArrays: arrays are typed like scalar columns, element by element,
// and each of Debezium's array forms of the unchanged-TOAST placeholder
// (Debezium 3's UnchangedToastedPlaceholder) is recognized, with a schema,
// a declared type or neither.
func TestArrays(t *testing.T) {
	ints := `{"type":"array","items":{"type":"int32","optional":true},"optional":true,"field":"v"}`
	texts := `{"type":"array","items":{"type":"string","optional":true},"optional":true,"field":"v"}`
	uuids := `{"type":"array","items":{"type":"string","optional":true,"name":"io.debezium.data.Uuid"},"optional":true,"field":"v"}`
	bytea := `{"type":"array","items":{"type":"bytes","optional":true},"optional":true,"field":"v"}`
	nested := `{"type":"array","items":{"type":"array","items":{"type":"double","optional":true},"optional":true},"optional":true,"field":"v"}`
	placeholderInts := `[95,95,100,101,98,101,122,105,117,109,95,117,110,97,118,97,105,108,97,98,108,101,95,118,97,108,117,101]`
	for _, tc := range []struct {
		name, schema, json string
		want               row.Value
	}{
		{"ints", ints, `[1,null,-3]`, row.Array([]row.Value{row.Int(1), row.Null(), row.Int(-3)})},
		{"empty", ints, `[]`, row.Array(nil)},
		{"texts", texts, `["a b","",null,"NULL"]`, row.Array([]row.Value{row.String("a b"), row.String(""), row.Null(), row.String("NULL")})},
		{"nested doubles", nested, `[[1.5,"NaN"],[]]`, row.Array([]row.Value{row.Array([]row.Value{row.Float(1.5), {Kind: row.KindFloat}}), row.Array(nil)})},
		{"bytea", bytea, `["AP8="]`, row.Array([]row.Value{row.Bytes([]byte{0, 0xff})})},
		{"text placeholder", texts, `["__debezium_unavailable_value"]`, row.Unavailable()},
		{"int placeholder", ints, placeholderInts, row.Unavailable()},
		{"bytea placeholder", bytea, `["X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="]`, row.Unavailable()},
		{"uuid placeholder", uuids, `["b68a35a7-17ad-35b3-af2a-ae46edb4545a"]`, row.Unavailable()},
		{"legacy string placeholder", ints, `"__debezium_unavailable_value"`, row.Unavailable()},
		{"placeholder text as an element", texts, `["__debezium_unavailable_value","x"]`, row.Array([]row.Value{row.String("__debezium_unavailable_value"), row.String("x")})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := decodeOne(t, []string{"v"}, "", wrap(`{"after":{"v":`+tc.json+`},"op":"c"}`, tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			got := ev.After.Values[0]
			if tc.name == "nested doubles" { // NaN != NaN: compare the text
				if got.Text() != `[[1.5,"NaN"],[]]` {
					t.Errorf("got %s", got.Text())
				}
				return
			}
			if !got.Equal(tc.want) {
				t.Errorf("got %v %s, want %v %s", got.Kind, got.Text(), tc.want.Kind, tc.want.Text())
			}
			if ev.Types[0].Kind != row.KindArray || ev.Types[0].Elem == nil {
				t.Errorf("type %+v", ev.Types[0])
			}
		})
	}
	// A text where an int array is declared is a mismatch, not data.
	decl, _ := pgschema.Column("integer[]", pgschema.Modes{})
	d := NewDecoder([]string{"v"}, Options{Types: []row.ColumnType{decl}})
	var ev Event
	if _, err := d.Decode(nil, []byte(`{"after":{"v":["1"]},"op":"c"}`), &ev); err == nil {
		t.Error(`["1"] accepted for integer[]`)
	}
	if _, err := d.Decode(nil, []byte(`{"after":{"v":`+placeholderInts+`},"op":"c"}`), &ev); err != nil || ev.After.Values[0].Kind != row.KindUnavailable {
		t.Errorf("declared int placeholder: %v %v", ev.After.Values[0], err)
	}
}

// TestPlaceholderSetting: a connector configured with another
// unavailable.value.placeholder is followed in every form.
func TestPlaceholderSetting(t *testing.T) {
	d := NewDecoder([]string{"s", "b", "a"}, Options{Placeholder: "??"})
	var ev Event
	if _, err := d.Decode(nil, []byte(`{"after":{"s":"??","b":"Pz8=","a":[63,63]},"op":"u"}`), &ev); err != nil {
		t.Fatal(err)
	}
	for i, v := range ev.After.Values {
		if v.Kind != row.KindUnavailable {
			t.Errorf("column %d: %v", i, v)
		}
	}
}

// TestDeclaredKinds: for every declaration, the Kind pgschema says its
// values have is the Kind the decoder decodes them to.
func TestDeclaredKinds(t *testing.T) {
	for _, decl := range []string{"smallint", "integer", "bigint", "real", "double precision", "boolean", "numeric(12,2)",
		"numeric", "money", "text", "varchar(4)", "uuid", "json", "jsonb", "xml", "enum", "bytea", "bit(3)", "bit",
		"date", "time", "time(3)", "timetz", "timestamp", "timestamp(3)", "timestamptz", "interval", "integer[]", "text[][]", "date[]"} {
		for _, m := range []pgschema.Modes{{}, {Time: "adaptive_time_microseconds"}, {Time: "connect"}, {Time: "isostring"},
			{Decimal: "string"}, {Decimal: "double"}, {Binary: "hex"}, {Interval: "string"}} {
			ct, err := pgschema.Column(decl, m)
			if err != nil {
				t.Fatalf("%s %+v: %v", decl, m, err)
			}
			got := cloneType(ct)
			if _, err := resolve(&got); err != nil {
				t.Fatalf("%s %+v: %v", decl, m, err)
			}
			if !compatible(got, ct) || got.Kind != ct.Kind {
				t.Errorf("%s %+v: pgschema says %s, the decoder %s", decl, m, describeType(ct), describeType(got))
			}
		}
	}
}

// TestIntegerKeys: without a schema or declared type, a key column whose
// first number is an integer keeps integers: 34.5, 1e30 (beyond int64)
// and 1.5e0 are bad records, never keys no row can have (before: accepted
// as decimal keys, and a child whose foreign key was 71.5 was lost
// silently); 258.0 and 2.58e2 are still the integer 258. A column whose
// first number is not an integer holds any number, and a
// VariableScaleDecimal column (numeric without scale) holds integral and
// fractional values alike.
func TestIntegerKeys(t *testing.T) {
	cols := []string{"id", "user_id", "name"}
	decode := func(d *Decoder, id, userID string) error {
		var ev Event
		_, err := d.Decode([]byte(`{"id":`+id+`}`), []byte(`{"after":{"id":`+id+`,"user_id":`+userID+`,"name":"x"},"op":"c"}`), &ev)
		return err
	}
	d := NewDecoder(cols, Options{KeyColumns: 2})
	if err := decode(d, `1`, `258`); err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{`258.0`, `2.58e2`, `-7`, `9223372036854775807`} {
		if err := decode(d, `1`, ok); err != nil {
			t.Errorf("user_id %s in an integer key column: %v", ok, err)
		}
	}
	for _, bad := range []string{`34.5`, `1e30`, `71.5`, `9223372036854775808`, `0.1`} {
		err := decode(d, `1`, bad)
		var de *DecodeError
		if !errors.As(err, &de) || de.Kind != ErrTypeMismatch || de.Field != "after.user_id" || !strings.Contains(de.Reason, "integers") {
			t.Errorf("user_id %s in an integer key column: err=%v, want a type mismatch naming integers", bad, err)
		}
		if err := decode(d, bad, `258`); err == nil {
			t.Errorf("id %s in an integer key column (record key and row) was accepted", bad)
		}
	}
	// The first number decides: a fraction first, then integers are numbers too.
	d = NewDecoder(cols, Options{KeyColumns: 2})
	for _, v := range []string{`34.5`, `2`, `1e30`} {
		if err := decode(d, `1`, v); err != nil {
			t.Errorf("user_id %s after 34.5: %v", v, err)
		}
	}
	// VariableScaleDecimal: 2 (scale 0) then 2.58, either order.
	for _, order := range [][]string{{`{"scale":0,"value":"Ag=="}`, `{"scale":2,"value":"AQI="}`}, {`{"scale":2,"value":"AQI="}`, `{"scale":0,"value":"Ag=="}`}} {
		d := NewDecoder(cols, Options{KeyColumns: 2})
		for _, v := range order {
			if err := decode(d, `1`, v); err != nil {
				t.Errorf("VariableScaleDecimal user_id %s: %v", v, err)
			}
		}
	}
	// Shared classes: a foreign key linked to the parent's key column.
	shared := NewKeyClasses(2)
	parent := NewDecoder([]string{"id", "name"}, Options{KeyColumns: 1, KeyClasses: shared, KeySlots: []int{0}})
	child := NewDecoder(cols, Options{KeyColumns: 2, KeyClasses: shared, KeySlots: []int{1, 0}})
	var ev Event
	if _, err := parent.Decode([]byte(`{"id":71}`), []byte(`{"after":{"id":71,"name":"p"},"op":"c"}`), &ev); err != nil {
		t.Fatal(err)
	}
	if err := decode(child, `1`, `71.5`); err == nil {
		t.Error("a child foreign key 71.5 linked to an integer parent key was accepted")
	}
	if err := decode(child, `2`, `71.0`); err != nil {
		t.Errorf("a child foreign key 71.0 linked to an integer parent key: %v", err)
	}
	// Restored classes: the stored integer class refuses 34.5 after a restart.
	d2 := NewDecoder(cols, Options{KeyColumns: 2})
	if err := d2.RestoreKeyTypes(child.KeyTypes()); err != nil {
		t.Fatal(err)
	}
	if err := decode(d2, `3`, `34.5`); err == nil {
		t.Error("34.5 accepted after restoring an integer key column's class")
	}
}

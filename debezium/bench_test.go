package debezium

import (
	"fmt"
	"strings"
	"testing"
)

// wide40 builds a realistic 40-column update envelope (REPLICA IDENTITY FULL:
// before and after both full), with or without the JsonConverter schema.
func wide40(withSchema bool) (key, value []byte) {
	type col struct{ name, schema, value string }
	var cols []col
	for i := 0; i < 40; i++ {
		n := fmt.Sprintf("c%02d", i)
		switch i % 8 {
		case 0:
			cols = append(cols, col{n, `{"type":"int64","optional":true,"field":"` + n + `"}`, fmt.Sprint(1000000 + i)})
		case 1:
			cols = append(cols, col{n, `{"type":"string","optional":true,"field":"` + n + `"}`, `"value of column ` + n + ` with some text"`})
		case 2:
			cols = append(cols, col{n, `{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"12"},"field":"` + n + `"}`, `"AeI6"`})
		case 3:
			cols = append(cols, col{n, `{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"` + n + `"}`, `"2024-05-29T16:26:40.123456Z"`})
		case 4:
			cols = append(cols, col{n, `{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"` + n + `"}`, `19872`})
		case 5:
			cols = append(cols, col{n, `{"type":"boolean","optional":true,"field":"` + n + `"}`, `true`})
		case 6:
			cols = append(cols, col{n, `{"type":"string","optional":true,"name":"io.debezium.data.Uuid","version":1,"field":"` + n + `"}`, `"6f1c2a44-8d8e-4f0e-9d3b-0c6f0e2b7a51"`})
		case 7:
			cols = append(cols, col{n, `{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"` + n + `"}`, `1717000000123456`})
		}
	}
	var fields, row []string
	for _, c := range cols {
		fields = append(fields, c.schema)
		row = append(row, `"`+c.name+`":`+c.value)
	}
	rowJSON := "{" + strings.Join(row, ",") + "}"
	env := `{"before":` + rowJSON + `,"after":` + rowJSON + `,"source":{"version":"3.0.7.Final","connector":"postgresql","name":"pg","ts_ms":1717000000000,"snapshot":"false","db":"app","sequence":"[\"24023000\",\"24023512\"]","ts_us":1717000000000000,"ts_ns":1717000000000000000,"schema":"public","table":"wide","txId":771,"lsn":24023512,"xmin":null},"transaction":null,"op":"u","ts_ms":1717000000120,"ts_us":1717000000120000,"ts_ns":1717000000120000000}`
	if !withSchema {
		return []byte(`{"c00":1000000}`), []byte(env)
	}
	rowSchema := `{"type":"struct","fields":[` + strings.Join(fields, ",") + `],"optional":true,"name":"pg.public.wide.Value","field":"%s"}`
	schema := `{"type":"struct","fields":[` + fmt.Sprintf(rowSchema, "before") + `,` + fmt.Sprintf(rowSchema, "after") +
		`,{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},"default":"false","field":"snapshot"},{"type":"string","optional":false,"field":"db"},{"type":"string","optional":true,"field":"sequence"},{"type":"int64","optional":true,"field":"ts_us"},{"type":"int64","optional":true,"field":"ts_ns"},{"type":"string","optional":false,"field":"schema"},{"type":"string","optional":false,"field":"table"},{"type":"int64","optional":true,"field":"txId"},{"type":"int64","optional":true,"field":"lsn"},{"type":"int64","optional":true,"field":"xmin"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","version":1,"field":"source"}` +
		`,{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"}],"optional":false,"name":"pg.public.wide.Envelope","version":2}`
	key = []byte(`{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"c00"}],"optional":false,"name":"pg.public.wide.Key"},"payload":{"c00":1000000}}`)
	return key, []byte(`{"schema":` + schema + `,"payload":` + env + `}`)
}

func benchDecode(b *testing.B, cols []string, key, value []byte) {
	d := NewDecoder(cols, Options{})
	var ev Event
	if ok, err := d.Decode(key, value, &ev); !ok || err != nil {
		b.Fatalf("decode: ok=%v err=%v", ok, err)
	}
	b.SetBytes(int64(len(key) + len(value)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for b.Loop() {
		if _, err := d.Decode(key, value, &ev); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	// On a shared machine wall time includes waiting for a core; CPU time
	// (this benchmark is single-threaded and does not allocate) does not.
	if cpu := processCPU() - cpu0; cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu.Seconds(), "events/cpu-s")
	}
}

func fixture(b *testing.B, name string) (key, value []byte) {
	k, err1 := readFixture("testdata/pg/" + name + ".key.json")
	v, err2 := readFixture("testdata/pg/" + name + ".value.json")
	if err1 != nil || err2 != nil {
		b.Fatal(err1, err2)
	}
	return k, v
}

// BenchmarkDecodeNoSchema: a realistic users insert without schemas, three
// projected columns.
func BenchmarkDecodeNoSchema(b *testing.B) {
	k, v := fixture(b, "users_insert_noschema")
	benchDecode(b, []string{"id", "firstname", "lastname"}, k, v)
}

// BenchmarkDecodeSchema: the same insert with the JsonConverter schema
// (key and value), three projected columns including a Decimal.
func BenchmarkDecodeSchema(b *testing.B) {
	k, v := fixture(b, "users_insert_schema")
	benchDecode(b, []string{"id", "lastname", "balance"}, k, v)
}

// BenchmarkDecodeWide40: a 40-column update with full before and after
// images, two projected columns, schema off and on.
func BenchmarkDecodeWide40(b *testing.B) {
	for _, withSchema := range []bool{false, true} {
		b.Run(fmt.Sprintf("schema=%t", withSchema), func(b *testing.B) {
			k, v := wide40(withSchema)
			benchDecode(b, []string{"c00", "c25"}, k, v)
		})
	}
}

// BenchmarkMembers: splitting a replay input line (a users insert, and the
// 40-column update) into its members, as the replay reader does: the value
// is skipped whole.
func BenchmarkMembers(b *testing.B) {
	k, v := fixture(b, "users_insert_noschema")
	wk, wv := wide40(false)
	for _, tc := range []struct {
		name       string
		key, value []byte
	}{{"users", k, v}, {"wide40", wk, wv}} {
		b.Run(tc.name, func(b *testing.B) {
			line := []byte(`{"topic":"pg.public.users","partition":0,"offset":12,"key":` + string(tc.key) + `,"value":` + string(tc.value) + `}`)
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			n := 0
			cpu0 := processCPU()
			for b.Loop() {
				if err := Members(line, func(name, raw []byte) error { n += len(raw); return nil }); err != nil {
					b.Fatal(err)
				}
			}
			if cpu := processCPU() - cpu0; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

package debezium

import (
	"errors"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/pgschema"
	"github.com/cdcjoin/cdcjoin/row"
)

// FuzzDecode: no input makes Decode panic, every error is a *DecodeError,
// a successful decode sizes every row to the projection, and decoding the
// same record again (through the schema cache) gives the same result.
// Seeds: testdata/fuzz/FuzzDecode/ plus the cases below.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"id":1}`), []byte(`{"before":null,"after":{"id":1,"user_id":2,"v":"x"},"source":{"ts_ms":1,"sequence":"[\"1\",\"2\"]"},"op":"c","ts_ms":2}`))
	f.Add([]byte(nil), []byte(`{"schema":null,"payload":null}`))
	f.Add([]byte(`{"schema":{"type":"struct","fields":[{"type":"int64","field":"id"}]},"payload":{"id":1}}`),
		[]byte(wrap(`{"after":{"id":1,"user_id":2,"v":{"scale":2,"value":"AeI6"}},"op":"u"}`,
			field("id", "int64", "", ""), field("user_id", "int64", "io.debezium.time.NanoTimestamp", ""),
			field("v", "struct", "io.debezium.data.VariableScaleDecimal", ""))))
	f.Add([]byte(`{"id":258.0}`), []byte(`{"after":{"id":2.58e2,"user_id":"7","v":[1,null,[2]]},"op":"c"}`))
	f.Add([]byte(nil), []byte("\x00\x00\x00\x00\x01\x02"))
	cols := []string{"id", "user_id", "v"}
	arr, _ := pgschema.Column("numeric(10,2)[]", pgschema.Modes{})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		// Odd lengths: a decoder with key columns and a declared array.
		opts := Options{MaxRecordBytes: 1 << 20}
		if len(value)%2 == 1 {
			opts.KeyColumns, opts.Types = 2, []row.ColumnType{{}, {}, arr}
		}
		d := NewDecoder(cols, opts)
		var ev Event
		tm := time.AfterFunc(5*time.Second, func() { panic("HANG") })
		defer tm.Stop()
		ok, err := d.Decode(key, value, &ev)
		first := render(cols, ok, err, &ev)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || de.Kind == 0 {
				t.Fatalf("error %T %v is not a classified *DecodeError", err, err)
			}
		} else if ok {
			if len(ev.Before.Values) != len(cols) || len(ev.After.Values) != len(cols) || len(ev.Key.Values) != len(cols) {
				t.Fatal("rows not sized to the projection")
			}
			if ev.Types != nil && len(ev.Types) != len(cols) {
				t.Fatal("types not sized to the projection")
			}
		}
		ok, err = d.Decode(key, value, &ev)
		if again := render(cols, ok, err, &ev); again != first {
			t.Fatalf("second decode differs:\n%s\nvs\n%s", again, first)
		}
	})
}

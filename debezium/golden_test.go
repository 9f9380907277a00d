package debezium

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/row"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// fixtureColumns are the projections used for the fixture tables.
var fixtureColumns = map[string][]string{
	"users":   {"id", "firstname", "lastname", "balance", "created_at", "birth_date"},
	"domains": {"id", "user_id", "domain_name"},
}

// render prints a Decode result in the golden files' format.
func render(cols []string, ok bool, err error, ev *Event) string {
	var b strings.Builder
	if err != nil {
		var de *DecodeError
		if !errors.As(err, &de) {
			return fmt.Sprintf("error (not a *DecodeError): %v\n", err)
		}
		return fmt.Sprintf("error: kind=%s field=%s reason=%s\n", de.Kind, de.Field, de.Reason)
	}
	if !ok {
		return "tombstone\n"
	}
	fmt.Fprintf(&b, "op=%s ts_ms=%d\n", ev.Op, ev.TsMs)
	s := ev.Source
	fmt.Fprintf(&b, "source: ts_ms=%d snapshot=%q lsn=%d sequence=%q txId=%d db=%q schema=%q table=%q file=%q pos=%d row=%d gtid=%q\n",
		s.TsMs, s.Snapshot, s.LSN, s.Sequence, s.TxID, s.DB, s.Schema, s.Table, s.File, s.Pos, s.Row, s.GTID)
	if ev.Types == nil {
		b.WriteString("types: none\n")
	} else {
		b.WriteString("types:")
		for i, t := range ev.Types {
			fmt.Fprintf(&b, " %s=%s/%s/%s/opt=%t/scale=%d/prec=%d", cols[i], t.Kind, t.Connect, t.Logical, t.Optional, t.Scale, t.Precision)
		}
		b.WriteString("\n")
	}
	row := func(name string, r Row) {
		if !r.Present {
			fmt.Fprintf(&b, "%s: absent\n", name)
			return
		}
		b.WriteString(name + ":")
		for i, v := range r.Values {
			fmt.Fprintf(&b, " %s=%s", cols[i], renderValue(v))
		}
		b.WriteString("\n")
	}
	row("before", ev.Before)
	row("after", ev.After)
	row("key", ev.Key)
	return b.String()
}

func renderValue(v row.Value) string {
	switch v.Kind {
	case row.KindNull, row.KindUnavailable:
		return v.Kind.String()
	case row.KindString, row.KindBytes, row.KindDecimal:
		return v.Kind.String() + ":" + strconv.Quote(v.Str)
	case row.KindDate, row.KindTimestamp, row.KindTime:
		return v.Kind.String() + ":" + strconv.FormatInt(v.Int, 10) + "(" + v.Text() + ")"
	}
	return v.Kind.String() + ":" + v.Text()
}

// TestGolden decodes every testdata/pg/<table>_*.value.json (with its
// .key.json when present) and compares with the .golden file.
func TestGolden(t *testing.T) {
	values, err := filepath.Glob("testdata/pg/*.value.json")
	if err != nil || len(values) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, vf := range values {
		name := strings.TrimSuffix(filepath.Base(vf), ".value.json")
		t.Run(name, func(t *testing.T) {
			cols := fixtureColumns[strings.SplitN(name, "_", 2)[0]]
			if cols == nil {
				t.Fatalf("fixture %s: unknown table", name)
			}
			value := readFile(t, vf)
			key := readFile(t, strings.TrimSuffix(vf, ".value.json")+".key.json")
			d := NewDecoder(cols, Options{})
			var ev Event
			ok, err := d.Decode(key, value, &ev)
			got := render(cols, ok, err, &ev)
			// Decoding again must hit the schema cache and give the same.
			ok2, err2 := d.Decode(key, value, &ev)
			if again := render(cols, ok2, err2, &ev); again != got {
				t.Errorf("second decode differs:\n%s\nvs\n%s", again, got)
			}
			gf := strings.TrimSuffix(vf, ".value.json") + ".golden"
			if *update {
				if err := os.WriteFile(gf, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want := string(readFile(t, gf))
			if got != want {
				t.Errorf("mismatch (run with -update to accept):\ngot:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readFixture reads a fixture file; a missing file reads as nil.
func readFixture(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

package debezium_test

import (
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/row"
)

// typesConfig is the e2e's schemaless configuration of the types tables:
// its declarations are what this test checks against real Debezium output.
const typesConfig = "../deploy/local/e2e-types-off.yaml"

// TestRealTypes decodes the records captured from a real Debezium 3.6 for
// the table of every common PostgreSQL type (testdata/real/types-*.jsonl,
// see its README), with schemas on (typed by the records' schemas, and
// again with the declared types, which must agree) and off (typed by the
// declarations of typesConfig), and requires
//   - the three decodings to be identical, value by value;
//   - every unchanged-TOAST placeholder (text, jsonb, bytea, integer[],
//     text[], uuid[], date[]) to decode as row.KindUnavailable, and no value
//     to hold the placeholder's text;
//   - the result to equal testdata/real/types.golden (go test -update).
func TestRealTypes(t *testing.T) {
	cfg, err := config.Load(typesConfig)
	if err != nil {
		t.Fatal(err)
	}
	spec := job.MustSpec(cfg)
	sides := map[string]row.Side{"type_parents": row.Parent, "type_children": row.Child}
	decode := func(file string, opts func(row.Side, []string) debezium.Options) map[string]string {
		t.Helper()
		f, err := os.Open("testdata/real/" + file)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		decs := map[row.Side]*debezium.Decoder{}
		out := map[string]string{}
		err = engine.ReadJSONL(f, file, func(rec *engine.Record) error {
			table := rec.Topic[strings.LastIndexByte(rec.Topic, '.')+1:]
			side := sides[table]
			d := decs[side]
			if d == nil {
				cols := spec.ParentColumns
				if side == row.Child {
					cols = spec.ChildColumns
				}
				d = debezium.NewDecoder(cols, opts(side, cols))
				decs[side] = d
			}
			var ev debezium.Event
			ok, err := d.Decode(rec.Key, rec.Value, &ev)
			id := fmt.Sprintf("%s@%02d", table, rec.Offset)
			switch {
			case err != nil:
				return fmt.Errorf("%s %s: %w", file, id, err)
			case !ok:
				out[id] = "tombstone"
			default:
				out[id] = renderEvent(d.Columns(), &ev)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	declared := func(side row.Side, cols []string) debezium.Options { return job.DecoderOptions(cfg, side, cols, nil) }
	byKeys := func(side row.Side, cols []string) debezium.Options {
		o := declared(side, cols)
		o.Types = nil
		return o
	}
	on := decode("types-on.jsonl", byKeys)
	onDeclared := decode("types-on.jsonl", declared)
	off := decode("types-off.jsonl", declared)
	ids := make([]string, 0, len(on))
	for id := range on {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var golden strings.Builder
	for _, id := range ids {
		if onDeclared[id] != on[id] {
			t.Errorf("%s: schemas on, declared types differ from the schema's:\n%s\nvs\n%s", id, onDeclared[id], on[id])
		}
		if off[id] != on[id] {
			t.Errorf("%s: schemas off differs from schemas on:\n%s\nvs\n%s", id, off[id], on[id])
		}
		if strings.Contains(on[id], row.UnavailableValue) || strings.Contains(on[id], "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ") {
			t.Errorf("%s: a placeholder decoded as data:\n%s", id, on[id])
		}
		fmt.Fprintf(&golden, "%s %s\n", id, on[id])
	}
	if len(off) != len(on) {
		t.Errorf("%d records with schemas off, %d on", len(off), len(on))
	}
	for _, tc := range []struct{ id, cols string }{
		{"type_parents@08", "txt jb b ai at"},
		{"type_parents@09", "txt jb b ai at"},
		{"type_children@06", "tags blob ids days"},
		{"type_children@08", "tags blob ids days"},
	} {
		for _, c := range strings.Fields(tc.cols) {
			if !strings.Contains(on[tc.id], " "+c+"=unavailable") {
				t.Errorf("%s: %s is not unavailable:\n%s", tc.id, c, on[tc.id])
			}
		}
	}
	checkGolden(t, "testdata/real/types.golden", golden.String())
}

// renderEvent prints a decoded event: op, then the after, before and key
// images, every value with its kind.
func renderEvent(cols []string, ev *debezium.Event) string {
	var b strings.Builder
	b.WriteString("op=" + ev.Op.String())
	for _, img := range []struct {
		name string
		r    debezium.Row
	}{{"after", ev.After}, {"before", ev.Before}, {"key", ev.Key}} {
		if !img.r.Present {
			continue
		}
		b.WriteString("\n  " + img.name + ":")
		for i, v := range img.r.Values {
			if img.name != "after" && v.Kind == row.KindNull {
				continue
			}
			fmt.Fprintf(&b, " %s=%s", cols[i], renderValue(v))
		}
	}
	return b.String()
}

func renderValue(v row.Value) string {
	switch v.Kind {
	case row.KindNull, row.KindUnavailable:
		return v.Kind.String()
	case row.KindBytes:
		s := hex.EncodeToString([]byte(v.Str))
		if len(s) > 64 {
			s = fmt.Sprintf("%s…(%d bytes)", s[:48], len(v.Str))
		}
		return "bytes:" + s
	case row.KindString, row.KindDecimal:
		s := v.Str
		if len(s) > 64 {
			s = fmt.Sprintf("%s…(%d bytes)", s[:48], len(s))
		}
		return v.Kind.String() + ":" + strconv.Quote(s)
	case row.KindArray:
		s := v.Text()
		if len(s) > 64 {
			s = fmt.Sprintf("%s…(%d bytes)", s[:48], len(s))
		}
		return "array:" + s
	case row.KindDate, row.KindTimestamp, row.KindTime:
		return v.Kind.String() + ":" + strconv.FormatInt(v.Int, 10) + "(" + v.Text() + ")"
	}
	return v.Kind.String() + ":" + v.Text()
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if updateGolden() {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if string(want) != got {
		if n, w, g, ok := testkit.FirstLineDiff(string(want), got); ok {
			t.Fatalf("%s differs at line %d:\n got: %s\nwant: %s\n(go test -run %s -update rewrites it)", path, n, g, w, t.Name())
		}
	}
}

// updateGolden reports the -update flag of the package's golden tests.
func updateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

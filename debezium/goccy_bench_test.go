package debezium

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"

	json "github.com/goccy/go-json"

	"github.com/cdcjoin/cdcjoin/row"
)

// The goccy benchmarks decode the same records as BenchmarkDecode* with
// github.com/goccy/go-json, the fastest general JSON library for Go, to
// decide which belongs on the hot path (figures in doc.go):
//
//   - goccy-generic does what a config-driven projection needs: the
//     envelope into a struct, each row image into a map of raw values, then
//     the projected columns parsed (and, with a schema, the schema decoded
//     once per distinct schema block, as Decoder caches it);
//   - goccy-static unmarshals into a struct with exactly the projected
//     fields: a lower bound for goccy that a generic decoder cannot use
//     (the projection comes from the configuration).

type goccyEnvelope struct {
	Schema  json.RawMessage `json:"schema"`
	Payload json.RawMessage `json:"payload"`
}

type goccyPayload struct {
	Before map[string]json.RawMessage `json:"before"`
	After  map[string]json.RawMessage `json:"after"`
	Op     string                     `json:"op"`
}

type goccySchema struct {
	Fields []struct {
		Field  string `json:"field"`
		Fields []struct {
			Field string `json:"field"`
			Type  string `json:"type"`
			Name  string `json:"name"`
		} `json:"fields"`
	} `json:"fields"`
}

// goccyGeneric decodes like Decoder with goccy: projected after-image
// values, typed by the schema when there is one.
type goccyGeneric struct {
	cols       []string
	lastSchema []byte
	types      map[string]string
	out        []row.Value
}

func (g *goccyGeneric) decode(value []byte) error {
	body := value
	if bytes.HasPrefix(value, []byte(`{"schema"`)) {
		var env goccyEnvelope
		if err := json.Unmarshal(value, &env); err != nil {
			return err
		}
		if !bytes.Equal(env.Schema, g.lastSchema) {
			var s goccySchema
			if err := json.Unmarshal(env.Schema, &s); err != nil {
				return err
			}
			g.types = map[string]string{}
			for _, f := range s.Fields {
				if f.Field == "after" {
					for _, c := range f.Fields {
						g.types[c.Field] = c.Type + "/" + c.Name
					}
				}
			}
			g.lastSchema = append(g.lastSchema[:0], env.Schema...)
		}
		body = env.Payload
	}
	var p goccyPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return err
	}
	g.out = g.out[:0]
	for _, c := range g.cols {
		raw := p.After[c]
		switch {
		case len(raw) == 0 || string(raw) == "null":
			g.out = append(g.out, row.Null())
		case raw[0] == '"':
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return err
			}
			g.out = append(g.out, row.String(s))
		default:
			n, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil {
				return err
			}
			g.out = append(g.out, row.Int(n))
		}
	}
	return nil
}

func benchGoccyGeneric(b *testing.B, cols []string, value []byte) {
	g := &goccyGeneric{cols: cols}
	if err := g.decode(value); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		if err := g.decode(value); err != nil {
			b.Fatal(err)
		}
	}
}

func benchGoccyStatic[T any](b *testing.B, value []byte, payload func(*T) json.RawMessage) {
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		var v T
		if err := json.Unmarshal(value, &v); err != nil {
			b.Fatal(err)
		}
		_ = payload(&v)
	}
}

type usersStatic struct {
	After struct {
		ID        int64  `json:"id"`
		Firstname string `json:"firstname"`
		Lastname  string `json:"lastname"`
	} `json:"after"`
	Op string `json:"op"`
}

type usersStaticSchema struct {
	Payload struct {
		After struct {
			ID       int64  `json:"id"`
			Lastname string `json:"lastname"`
			Balance  string `json:"balance"`
		} `json:"after"`
		Op string `json:"op"`
	} `json:"payload"`
}

type wideStatic struct {
	After struct {
		C00 int64  `json:"c00"`
		C25 string `json:"c25"`
	} `json:"after"`
	Op string `json:"op"`
}

type wideStaticSchema struct {
	Payload wideStatic `json:"payload"`
}

func BenchmarkGoccy(b *testing.B) {
	nk, nv := fixture(b, "users_insert_noschema")
	_, sv := fixture(b, "users_insert_schema")
	_ = nk
	b.Run("NoSchema/generic", func(b *testing.B) { benchGoccyGeneric(b, []string{"id", "firstname", "lastname"}, nv) })
	b.Run("NoSchema/static", func(b *testing.B) {
		benchGoccyStatic(b, nv, func(*usersStatic) json.RawMessage { return nil })
	})
	b.Run("Schema/generic", func(b *testing.B) { benchGoccyGeneric(b, []string{"id", "lastname", "balance"}, sv) })
	b.Run("Schema/static", func(b *testing.B) {
		benchGoccyStatic(b, sv, func(*usersStaticSchema) json.RawMessage { return nil })
	})
	for _, withSchema := range []bool{false, true} {
		_, v := wide40(withSchema)
		b.Run(fmt.Sprintf("Wide40/schema=%t/generic", withSchema), func(b *testing.B) { benchGoccyGeneric(b, []string{"c00", "c25"}, v) })
		if withSchema {
			b.Run("Wide40/schema=true/static", func(b *testing.B) {
				benchGoccyStatic(b, v, func(*wideStaticSchema) json.RawMessage { return nil })
			})
		} else {
			b.Run("Wide40/schema=false/static", func(b *testing.B) {
				benchGoccyStatic(b, v, func(*wideStatic) json.RawMessage { return nil })
			})
		}
	}
}

// Package job compiles a validated configuration into the parts both
// drivers wire together — engine (replay, bench) and kafkarun (run): the
// join spec, a decoder for the job's two topics, and the output column
// types learned from Debezium schemas. It holds no state of its own beyond
// what each value documents.
package job

import (
	"errors"
	"fmt"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/registry"
	"github.com/cdcjoin/cdcjoin/row"
)

// Shape returns the join described by cfg.
func Shape(cfg *config.Config) keyed.Shape {
	sh := keyed.Shape{
		Left:           cfg.Join == config.Left,
		ParentKey:      cfg.Parent.Key,
		ChildKey:       cfg.Child.Key,
		ChildParentKey: cfg.Child.ParentKey,
	}
	for _, s := range cfg.Select {
		sh.Select = append(sh.Select, keyed.Column{Side: s.Side, Source: s.Column, Name: s.Name})
	}
	return sh
}

// Spec compiles the join described by cfg. A configuration that passed
// config's validation always compiles.
func Spec(cfg *config.Config) (*keyed.Spec, error) {
	if cfg.Plan() != nil {
		return nil, ErrPlan
	}
	if cfg.IsTimeJoin() {
		return nil, ErrTimeJoin
	}
	return keyed.NewSpec(Shape(cfg))
}

// ErrTimeJoin: the job is a time join (config.TimeJoin: see TimeJoin), not
// a parent/child join; `replay` and `run` run it (their own wiring:
// engine.TimeEngine, kafkarun's timejoin.go), `handover` and `bench` do
// not.
var ErrTimeJoin = errors.New("cdcjoin: this job is a time join (time_join), which `cdcjoin replay` and `cdcjoin run` run; `handover` and `bench` run regular joins only so far")

// ErrPlan: the job is a multi-stage plan (config.Plan), not a
// parent/child join (`replay`, `run` and `handover` run plans their own
// way).
var ErrPlan = errors.New("cdcjoin: this query compiles to a multi-stage plan, which `cdcjoin replay`, `run` and `handover` run; this runs the parent/child shape only so far (see `cdcjoin explain`)")

// MustSpec is Spec for configurations validated by package config (tests,
// tools); it panics on a shape Spec rejects.
func MustSpec(cfg *config.Config) *keyed.Spec {
	s, err := Spec(cfg)
	if err != nil {
		panic(err)
	}
	return s
}

// Decoder decodes the records of the job's two topics, projected to the
// spec's columns. Not safe for concurrent use: each goroutine needs its
// own (they share nothing but the immutable spec and the schema source).
type Decoder struct {
	parentTopic, childTopic string
	parent, child           *debezium.Decoder
	formats                 [3]debezium.Format // by side
	schemas                 debezium.SchemaSource
	plan                    *PlanDecoder // a plan's decoders (cfg.Plan() != nil)
}

// OpenSchemas returns the schema registry client of a job whose topics are
// Avro or Protobuf (format, schema_registry), nil for a JSON job. One
// client per process: decoders on several goroutines share it, and each id
// is fetched once. Close it when done (a nil client's Close is a no-op).
func OpenSchemas(cfg *config.Config, opts registry.Options) (*registry.Client, error) {
	if !cfg.NeedsRegistry() || cfg.SchemaRegistry == nil {
		return nil, nil
	}
	return registry.New(cfg.SchemaRegistry, opts)
}

// NewDecoder returns a decoder for cfg's topics and spec's projections.
// schemas resolves the schema ids of Avro and Protobuf records (a
// *registry.Client from OpenSchemas); nil for a JSON job. The child's
// foreign key columns share the classes of the parent's key columns
// (debezium.KeyClasses): without declared types, a foreign key of another
// type than the parent key's (71.5 for an integer id, "7" for a number) is
// a bad record, as no parent can have it. For a job with a plan
// (cfg.Plan() != nil; spec is then nil) it decodes through Plan (JSON
// records).
func NewDecoder(cfg *config.Config, spec *keyed.Spec, schemas debezium.SchemaSource) *Decoder {
	if cfg.Plan() != nil {
		return &Decoder{plan: NewPlanDecoder(cfg)}
	}
	if c, ok := schemas.(*registry.Client); ok && c == nil {
		schemas = nil
	}
	po := DecoderOptions(cfg, row.Parent, spec.ParentColumns, schemas)
	co := DecoderOptions(cfg, row.Child, spec.ChildColumns, schemas)
	pslot := map[string]int{} // parent key column → its slot
	po.KeySlots = make([]int, po.KeyColumns)
	for i := range po.KeySlots {
		po.KeySlots[i] = i
		pslot[spec.ParentColumns[i]] = i
	}
	n := po.KeyColumns
	co.KeySlots = make([]int, co.KeyColumns)
	for i := range co.KeySlots {
		co.KeySlots[i] = n
		for k, fk := range cfg.Child.ParentKey {
			if fk == spec.ChildColumns[i] && k < len(cfg.Parent.Key) {
				if sl, ok := pslot[cfg.Parent.Key[k]]; ok {
					co.KeySlots[i] = sl
				}
			}
		}
		if co.KeySlots[i] == n {
			n++
		}
	}
	shared := debezium.NewKeyClasses(n)
	po.KeyClasses, co.KeyClasses = shared, shared
	d := &Decoder{
		parentTopic: cfg.Parent.Topic, childTopic: cfg.Child.Topic, schemas: schemas,
		parent: debezium.NewDecoder(spec.ParentColumns, po),
		child:  debezium.NewDecoder(spec.ChildColumns, co),
	}
	d.formats[row.Parent] = Format(cfg.SideFormat(row.Parent))
	d.formats[row.Child] = Format(cfg.SideFormat(row.Child))
	return d
}

// Format returns the decoder format of a configured format name.
func Format(name string) debezium.Format {
	switch name {
	case config.FormatAvro:
		return debezium.FormatAvro
	case config.FormatProtobuf:
		return debezium.FormatProtobuf
	}
	return debezium.FormatJSON
}

// DecoderOptions returns the options of the decoder of side's topic that
// projects onto cols (the spec's projection of side): the record size
// limit, the declared column types (decoding records without a schema),
// the key columns, the connector's unchanged-TOAST placeholder, and the
// side's record format with the schema source resolving its ids.
func DecoderOptions(cfg *config.Config, side row.Side, cols []string, schemas debezium.SchemaSource) debezium.Options {
	return debezium.Options{
		MaxRecordBytes: cfg.Errors.MaxRecordBytes,
		Types:          cfg.DeclaredTypes(side, cols),
		KeyColumns:     cfg.KeyColumns(side, cols),
		Placeholder:    cfg.Debezium.UnavailableValuePlaceholder,
		Format:         Format(cfg.SideFormat(side)),
		Schemas:        schemas,
	}
}

// Plan returns the plan's decoders (nil for a parent/child job).
func (d *Decoder) Plan() *PlanDecoder { return d.plan }

// Prefetch makes sure the schemas a record of topic names are fetched
// (the registry client caches them), blocking while the registry cannot
// be reached: a driver calls it before a transaction, so that decoding
// inside it never waits for the registry. It fails only with the
// registry's own failure (a *debezium.SourceError, e.g. the client was
// closed); a record that is bad (not in the wire format, an unknown id)
// is left to Decode.
func (d *Decoder) Prefetch(topic string, key, value []byte, headers []debezium.Header) error {
	side := d.Side(topic)
	if side == 0 || d.formats[side] == debezium.FormatJSON || d.schemas == nil {
		return nil
	}
	for _, b := range []struct {
		field string
		data  []byte
	}{{"value", value}, {"key", key}} {
		if len(b.data) == 0 {
			continue
		}
		id, _, de := debezium.SchemaOf(b.data, headers, b.field)
		if de != nil {
			continue
		}
		if _, err := d.schemas.Schema(id); err != nil && !errors.Is(err, debezium.ErrNoSuchSchema) {
			return &debezium.SourceError{ID: id, Err: err}
		}
	}
	return nil
}

// Side returns the side whose topic is topic, or 0 when it is neither.
func (d *Decoder) Side(topic string) row.Side {
	switch topic {
	case d.parentTopic:
		return row.Parent
	case d.childTopic:
		return row.Child
	}
	return 0
}

// Decode decodes one record of topic into ev (reusing its slices). ok is
// false for a tombstone. Errors are bad-record errors naming the record's
// position: a *debezium.DecodeError, or a record of neither topic.
func (d *Decoder) Decode(topic string, partition int32, offset int64, key, value []byte, ev *debezium.Event) (side row.Side, ok bool, err error) {
	return d.DecodeHeaders(topic, partition, offset, key, value, nil, ev)
}

// DecodeHeaders is Decode for a record with headers (Apicurio's serializers
// may put the schema ids there). A *debezium.SourceError (the schema
// registry failed, not the record) is not a bad record: the driver stops.
func (d *Decoder) DecodeHeaders(topic string, partition int32, offset int64, key, value []byte, headers []debezium.Header, ev *debezium.Event) (side row.Side, ok bool, err error) {
	side = d.Side(topic)
	dec := d.parent
	switch side {
	case row.Child:
		dec = d.child
	case 0:
		return 0, false, fmt.Errorf("cdcjoin: bad record at %s/%d@%d: topic is neither parent.topic (%s) nor child.topic (%s)",
			topic, partition, offset, d.parentTopic, d.childTopic)
	}
	ok, err = dec.DecodeRecord(key, value, headers, ev)
	if err != nil {
		err = debezium.AtPosition(err, topic, partition, offset)
	}
	return side, ok, err
}

// Types collects the column types declared by the Debezium schemas of
// decoded events (the latest seen per side) and, for columns of records
// without a schema, the types their non-NULL values imply (Infer), and
// projects them onto the output. A NULL never decides a type: a column
// whose every value so far was NULL stays unknown (Missing), whatever
// order the records came in. The zero value is ready to use. Not safe for
// concurrent use.
type Types struct {
	sides    [3][]row.ColumnType // from schemas
	inferred [3][]row.ColumnType // from the values of records without one
}

// Observe records ev's column types: its schema's (or the declared ones),
// and what its values imply.
func (t *Types) Observe(side row.Side, ev *debezium.Event) {
	if int(side) >= len(t.sides) || side == 0 {
		return
	}
	if ev.Types != nil {
		st := t.sides[side]
		for len(st) < len(ev.Types) {
			st = append(st, row.ColumnType{})
		}
		for i, ct := range ev.Types {
			if ct.Known() { // a schema's, or a declared type
				st[i] = ct
			}
		}
		t.sides[side] = st
	}
	for _, img := range []*debezium.Row{&ev.After, &ev.Before} {
		if !img.Present {
			continue
		}
		inf := t.inferred[side]
		for len(inf) < len(img.Values) {
			inf = append(inf, row.ColumnType{})
		}
		for i, v := range img.Values {
			inf[i] = Infer(inf[i], v)
		}
		t.inferred[side] = inf
	}
}

// Infer merges what value v implies into the type t inferred so far for a
// column without a schema or declared type: v's kind (decimals of variable
// scale; arrays with their elements' merged type); integers and decimals
// together are decimals; kinds that do not mix are text. NULLs (and
// unavailable placeholders) change nothing.
func Infer(t row.ColumnType, v row.Value) row.ColumnType {
	if v.Kind == row.KindNull || v.Kind == row.KindUnavailable {
		return t
	}
	nt := row.ColumnType{Kind: v.Kind, Scale: -1, Optional: true}
	if v.Kind == row.KindArray {
		var e row.ColumnType
		if t.Kind == row.KindArray && t.Elem != nil {
			e = *t.Elem
		}
		elems, _ := v.Elems(nil)
		for _, x := range elems {
			e = Infer(e, x)
		}
		if !e.Known() {
			e = row.ColumnType{} // no element seen yet: the array's type is not known either
			if !t.Known() {
				return t
			}
		}
		nt.Elem = &e
	}
	switch {
	case !t.Known():
		return nt
	case t.Kind == nt.Kind && t.Kind != row.KindArray:
		return t
	case t.Kind == row.KindArray && nt.Kind == row.KindArray:
		return nt // elements merged above
	case (t.Kind == row.KindInt || t.Kind == row.KindDecimal) && (nt.Kind == row.KindInt || nt.Kind == row.KindDecimal):
		return row.ColumnType{Kind: row.KindDecimal, Scale: -1, Optional: true}
	}
	return row.ColumnType{Kind: row.KindString, Scale: -1, Optional: true}
}

// Complete reports whether both sides' types were seen.
func (t *Types) Complete() bool { return t.sides[row.Parent] != nil && t.sides[row.Child] != nil }

// Output returns the select list's types in select order: a schema's,
// else what the values implied (zero entries for columns unknown yet).
func (t *Types) Output(spec *keyed.Spec) []row.ColumnType {
	out := spec.OutputTypes(t.sides[row.Parent], t.sides[row.Child])
	inf := spec.OutputTypes(t.inferred[row.Parent], t.inferred[row.Child])
	for i := range out {
		if !out[i].Known() {
			out[i] = inf[i]
		}
	}
	return out
}

// StateOptions returns the options of a state store in dir, from cfg's
// state section (package joinstate applies its defaults to what is unset).
func StateOptions(cfg *config.Config, dir string) joinstate.Options {
	st := &cfg.State
	return joinstate.Options{
		Dir:             dir,
		CacheBytes:      int64(st.CacheMB) << 20,
		MemTableBytes:   uint64(st.MemTableMB) << 20,
		RowCacheBytes:   max(st.RowCacheMB, 0) << 20,
		DisableRowCache: st.RowCacheMB < 0,
		Sync:            st.Sync,
	}
}

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
	return keyed.NewSpec(Shape(cfg))
}

// ErrPlan: the job is a multi-stage plan (config.Plan), not a
// parent/child join; `run`, `handover` and the bench do not run plans yet.
var ErrPlan = errors.New("cdcjoin: this query compiles to a multi-stage plan, which `cdcjoin replay` runs; `run`, `handover` and `bench` run the parent/child shape only so far (see `cdcjoin explain`)")

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
// own (they share nothing but the immutable spec).
type Decoder struct {
	parentTopic, childTopic string
	parent, child           *debezium.Decoder
	plan                    *PlanDecoder // a plan's decoders (cfg.Plan() != nil)
}

// NewDecoder returns a decoder for cfg's topics and spec's projections;
// for a job with a plan (cfg.Plan() != nil; spec is then nil), one that
// decodes through Plan.
func NewDecoder(cfg *config.Config, spec *keyed.Spec) *Decoder {
	if cfg.Plan() != nil {
		return &Decoder{plan: NewPlanDecoder(cfg)}
	}
	return &Decoder{
		parentTopic: cfg.Parent.Topic, childTopic: cfg.Child.Topic,
		parent: debezium.NewDecoder(spec.ParentColumns, DecoderOptions(cfg, row.Parent, spec.ParentColumns)),
		child:  debezium.NewDecoder(spec.ChildColumns, DecoderOptions(cfg, row.Child, spec.ChildColumns)),
	}
}

// DecoderOptions returns the options of the decoder of side's topic that
// projects onto cols (the spec's projection of side): the record size
// limit, the declared column types (decoding records without a schema),
// the key columns and the connector's unchanged-TOAST placeholder.
func DecoderOptions(cfg *config.Config, side row.Side, cols []string) debezium.Options {
	return debezium.Options{
		MaxRecordBytes: cfg.Errors.MaxRecordBytes,
		Types:          cfg.DeclaredTypes(side, cols),
		KeyColumns:     cfg.KeyColumns(side, cols),
		Placeholder:    cfg.Debezium.UnavailableValuePlaceholder,
	}
}

// Plan returns the plan's decoders (nil for a parent/child job).
func (d *Decoder) Plan() *PlanDecoder { return d.plan }

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
	side = d.Side(topic)
	dec := d.parent
	switch side {
	case row.Child:
		dec = d.child
	case 0:
		return 0, false, fmt.Errorf("cdcjoin: bad record at %s/%d@%d: topic is neither parent.topic (%s) nor child.topic (%s)",
			topic, partition, offset, d.parentTopic, d.childTopic)
	}
	ok, err = dec.Decode(key, value, ev)
	if err != nil {
		err = debezium.AtPosition(err, topic, partition, offset)
	}
	return side, ok, err
}

// Types collects the column types declared by the Debezium schemas of
// decoded events (the latest seen per side) and projects them onto the
// output. The zero value is ready to use. Not safe for concurrent use.
type Types struct {
	sides [3][]row.ColumnType
}

// Observe records ev's column types (events without a schema have none).
func (t *Types) Observe(side row.Side, ev *debezium.Event) {
	if ev.Types != nil && int(side) < len(t.sides) {
		t.sides[side] = append(t.sides[side][:0], ev.Types...)
	}
}

// Complete reports whether both sides' types were seen.
func (t *Types) Complete() bool { return t.sides[row.Parent] != nil && t.sides[row.Child] != nil }

// Output returns the select list's types in select order (zero entries for
// a side not seen yet).
func (t *Types) Output(spec *keyed.Spec) []row.ColumnType {
	return spec.OutputTypes(t.sides[row.Parent], t.sides[row.Child])
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

package job

import (
	"encoding/binary"
	"fmt"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/plan"
	"github.com/cdcjoin/cdcjoin/row"
)

// PlanDecoder decodes the records of a multi-table plan's topics: one
// decoder per FROM item, projected to the item's columns (a table under
// two aliases is decoded once per alias). Not safe for concurrent use.
type PlanDecoder struct {
	p      *plan.Plan
	items  map[string][]int // topic → FROM items
	topics []string         // by FROM item
	decs   []*debezium.Decoder
}

// NewPlanDecoder returns a decoder for cfg's plan (cfg.Plan() != nil).
func NewPlanDecoder(cfg *config.Config) *PlanDecoder {
	p := cfg.Plan()
	d := &PlanDecoder{p: p, items: map[string][]int{}}
	for i, t := range p.Tables {
		topic := cfg.Tables[t.Name].Topic
		d.items[topic] = append(d.items[topic], i)
		d.topics = append(d.topics, topic)
		d.decs = append(d.decs, debezium.NewDecoder(t.Columns, debezium.Options{
			MaxRecordBytes: cfg.Errors.MaxRecordBytes,
			Types:          cfg.TableTypes(t.Name, t.Columns),
			KeyColumns:     len(t.Key),
			Placeholder:    cfg.Debezium.UnavailableValuePlaceholder,
		}))
	}
	return d
}

// Plan returns the plan.
func (d *PlanDecoder) Plan() *plan.Plan { return d.p }

// Items returns the FROM items whose table's topic is topic (none: not a
// topic of the job).
func (d *PlanDecoder) Items(topic string) []int { return d.items[topic] }

// Topic returns FROM item i's topic.
func (d *PlanDecoder) Topic(i int) string { return d.topics[i] }

// Decode decodes one record of FROM item i into ev (reusing its slices);
// ok is false for a tombstone. Errors are bad-record errors naming the
// record's position.
func (d *PlanDecoder) Decode(i int, topic string, partition int32, offset int64, key, value []byte, ev *debezium.Event) (ok bool, err error) {
	ok, err = d.decs[i].Decode(key, value, ev)
	if err != nil {
		err = debezium.AtPosition(err, topic, partition, offset)
	}
	return ok, err
}

// NotATopic is the bad-record error of a record of none of the job's
// topics.
func (d *PlanDecoder) NotATopic(topic string, partition int32, offset int64) error {
	return fmt.Errorf("cdcjoin: bad record at %s/%d@%d: the topic is not one of tables' topics", topic, partition, offset)
}

// KeyTypes is Decoder.KeyTypes for every FROM item's decoder.
func (d *PlanDecoder) KeyTypes() []byte {
	var b []byte
	for _, dec := range d.decs {
		kt := dec.KeyTypes()
		b = append(binary.AppendUvarint(b, uint64(len(kt))), kt...)
	}
	return b
}

// RestoreKeyTypes sets what KeyTypes returned; an empty b changes nothing.
func (d *PlanDecoder) RestoreKeyTypes(b []byte) error {
	for _, dec := range d.decs {
		if len(b) == 0 {
			return nil
		}
		n, m := binary.Uvarint(b)
		if m <= 0 || n > uint64(len(b)-m) {
			return fmt.Errorf("cdcjoin: key types: corrupt encoding")
		}
		if err := dec.RestoreKeyTypes(b[m : m+int(n)]); err != nil {
			return err
		}
		b = b[m+int(n):]
	}
	return nil
}

// KeyTypesLearned counts the key columns whose type the decoders fixed.
func (d *PlanDecoder) KeyTypesLearned() int {
	n := 0
	for _, dec := range d.decs {
		n += dec.KeyTypesLearned()
	}
	return n
}

// PlanTypes collects the column types declared by the schemas of decoded
// events, per FROM item, and projects them onto the plan's output. The
// zero value is ready to use; not safe for concurrent use.
type PlanTypes struct {
	items map[int][]row.ColumnType
}

// Observe records ev's column types for FROM item i.
func (t *PlanTypes) Observe(i int, ev *debezium.Event) {
	if ev.Types == nil {
		return
	}
	if t.items == nil {
		t.items = map[int][]row.ColumnType{}
	}
	t.items[i] = append(t.items[i][:0], ev.Types...)
}

// Output returns the select list's types (zero entries where unknown).
func (t *PlanTypes) Output(p *plan.Plan) []row.ColumnType {
	return plan.OutputTypes(p, func(i int, col string) row.ColumnType {
		ts := t.items[i]
		for j, c := range p.Tables[i].Columns {
			if c == col && j < len(ts) {
				return ts[j]
			}
		}
		return row.ColumnType{}
	})
}

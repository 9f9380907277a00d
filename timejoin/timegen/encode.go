package timegen

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/timejoin"
)

// Record is one Kafka record of an encoded history.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte // nil: no key
	Value     []byte // nil: a tombstone
	// Event is the index of the event it encodes (-1: a tombstone after
	// a delete).
	Event int
}

// Topics and columns of encoded histories. Every table has id (the
// primary key, text), k (the join key, text, NULL for a NULL key), t (the
// event time, timestamp: int64 µs without a schema) and v (text).
const (
	LeftTopic  = "events.left"
	RightTopic = "events.right"
)

// EncodeOptions say how to encode a history.
type EncodeOptions struct {
	// Schemas writes JsonConverter envelopes with schemas (else bare).
	Schemas bool
	// PlainLeft writes the left side as plain JSON objects (format json),
	// not Debezium envelopes.
	PlainLeft bool
	// Temporal: the right side is a CDC table (a row's later changes are
	// updates).
	Temporal bool
	// Seed picks snapshot reads (op r) among the inserts and tombstones
	// after deletes.
	Seed uint64
}

// Encode turns events into Debezium records of LeftTopic and RightTopic,
// in event order, offsets counted per partition. Inserts are op c (now and
// then r); a temporal right side's first change of a row is c, later ones
// u with before null (REPLICA IDENTITY DEFAULT), "?" values the unchanged
// TOAST placeholder, deletes d with a key-only before image (often
// followed by a tombstone), truncates t without a key. source.ts_ms is the
// event time in ms (deletes and truncates happen at it: give a temporal
// history whole milliseconds).
func Encode(events []Event, o EncodeOptions) []Record {
	rng := rand.New(rand.NewPCG(o.Seed, 7))
	offsets := map[string]int64{}
	seen := map[string]bool{}
	var out []Record
	add := func(topic string, part int32, key, value []byte, ev int) {
		k := topic + "/" + strconv.Itoa(int(part))
		out = append(out, Record{Topic: topic, Partition: part, Offset: offsets[k], Key: key, Value: value, Event: ev})
		offsets[k]++
	}
	for i, e := range events {
		topic := LeftTopic
		if e.Side == timejoin.SideRight {
			topic = RightTopic
		}
		var key []byte
		if e.Op != timejoin.Truncate {
			key = keyJSON(e.PK, o.Schemas)
		}
		if e.Side == timejoin.SideLeft && o.PlainLeft {
			add(topic, e.Partition, key, rowJSON(e, false), i)
			continue
		}
		op := "c"
		switch {
		case e.Op == timejoin.Delete:
			op = "d"
		case e.Op == timejoin.Truncate:
			op = "t"
		case seen[topic+e.PK] && e.Side == timejoin.SideRight && o.Temporal:
			op = "u"
		case rng.IntN(10) == 0:
			op = "r"
		}
		seen[topic+e.PK] = e.Op == timejoin.Insert
		var b strings.Builder
		if o.Schemas {
			b.WriteString(`{"schema":` + envelopeSchema + `,"payload":`)
		}
		b.WriteString(`{"before":`)
		if op == "d" {
			fmt.Fprintf(&b, `{"id":%q,"k":null,"t":0,"v":null}`, e.PK)
		} else {
			b.WriteString("null")
		}
		b.WriteString(`,"after":`)
		if op == "d" || op == "t" {
			b.WriteString("null")
		} else {
			b.Write(rowJSON(e, true))
		}
		ms := floorDiv(e.Time, 1000)
		fmt.Fprintf(&b, `,"source":{"version":"3.0","connector":"postgresql","name":"events","ts_ms":%d,"snapshot":"false","db":"shop","schema":"public","table":"t"},"op":%q,"ts_ms":%d}`, ms, op, ms+5)
		if o.Schemas {
			b.WriteString("}")
		}
		add(topic, e.Partition, key, []byte(b.String()), i)
		if op == "d" && rng.IntN(2) == 0 {
			add(topic, e.Partition, key, nil, -1)
		}
	}
	return out
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func keyJSON(pk string, schemas bool) []byte {
	if schemas {
		return fmt.Appendf(nil, `{"schema":{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"}],"optional":false,"name":"events.Key"},"payload":{"id":%q}}`, pk)
	}
	return fmt.Appendf(nil, `{"id":%q}`, pk)
}

// rowJSON is the event's row image.
func rowJSON(e Event, envelope bool) []byte {
	k := "null"
	if e.Key != "" {
		k = strconv.Quote(e.Key)
	}
	v := strconv.Quote(e.Val)
	if e.Val == "?" && envelope {
		v = strconv.Quote(row.UnavailableValue)
	}
	return fmt.Appendf(nil, `{"id":%q,"k":%s,"t":%d,"v":%s}`, e.PK, k, e.Time, v)
}

const rowSchema = `{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"},{"type":"string","optional":true,"field":"k"},` +
	`{"type":"int64","optional":false,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"t"},{"type":"string","optional":true,"field":"v"}],"optional":true,"name":"events.Value","field":"%s"}`

var envelopeSchema = `{"type":"struct","fields":[` + fmt.Sprintf(rowSchema, "before") + `,` + fmt.Sprintf(rowSchema, "after") +
	`,{"type":"struct","fields":[{"type":"int64","optional":false,"field":"ts_ms"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source"},` +
	`{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"}],"optional":false,"name":"events.Envelope"}`

// JSONL renders a record as a line of the replay input format.
func (r *Record) JSONL() string {
	key, value := "null", "null"
	if r.Key != nil {
		key = string(r.Key)
	}
	if r.Value != nil {
		value = string(r.Value)
	}
	return fmt.Sprintf(`{"topic":%q,"partition":%d,"offset":%d,"key":%s,"value":%s}`, r.Topic, r.Partition, r.Offset, key, value)
}

// ConfigOptions describe the job of an encoded history.
type ConfigOptions struct {
	Name string
	Spec *timejoin.Spec // kind, join type, bounds and watermark settings (µs)
	// TimeSource: the temporal right side's time is source.ts_ms (else t).
	TimeSource bool
	PlainLeft  bool
	// RightKeyIsPK: the right side's join key is id, its primary key
	// (Options.KeyIsPK histories; else k).
	RightKeyIsPK bool
	StateDir     string
	// DLQ: errors.policy dlq (topic <name>.dlq); else stop.
	DLQ bool
	// Extra is appended to the YAML (kafka, clickhouse sections, …).
	Extra string
}

// Config returns the YAML job of an encoded history: select left.v AS lv,
// right.v AS rv (and window.start AS ws, window.end AS we), the columns
// Expected and Text use.
func Config(o ConfigOptions) string {
	s := o.Spec
	d := func(us int64) string { return (time.Duration(us) * time.Microsecond).String() }
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\njoin: %s\ntime_join:\n  kind: %s\n", o.Name, s.Join, s.Kind)
	leftFmt := ""
	if o.PlainLeft {
		leftFmt = ", format: json"
	}
	fmt.Fprintf(&b, "  left:  {topic: %s, key: k, time: t, types: {t: timestamp}%s}\n", LeftTopic, leftFmt)
	rightKey := "k"
	if o.RightKeyIsPK {
		rightKey = "id"
	}
	if o.TimeSource {
		fmt.Fprintf(&b, "  right: {topic: %s, key: %s, time: source.ts_ms}\n", RightTopic, rightKey)
	} else {
		fmt.Fprintf(&b, "  right: {topic: %s, key: %s, time: t, types: {t: timestamp}}\n", RightTopic, rightKey)
	}
	switch s.Kind {
	case timejoin.Interval:
		fmt.Fprintf(&b, "  lower: %s\n  upper: %s\n", d(s.Lower), d(s.Upper))
	case timejoin.Window:
		fmt.Fprintf(&b, "  window: {size: %s, slide: %s}\n", d(s.Size), d(s.Slide))
	}
	fmt.Fprintf(&b, "  out_of_orderness: %s\n  idle_timeout: %s\n  allowed_lateness: %s\n", d(s.OutOfOrderness), d(s.IdleTimeout), d(s.AllowedLateness))
	b.WriteString("select: ")
	for i, c := range s.Out {
		if i > 0 {
			b.WriteString(", ")
		}
		switch c.From {
		case timejoin.FromLeft:
			b.WriteString("left.v AS lv")
		case timejoin.FromRight:
			b.WriteString("right.v AS rv")
		case timejoin.FromWindowStart:
			b.WriteString("window.start AS ws")
		case timejoin.FromWindowEnd:
			b.WriteString("window.end AS we")
		}
	}
	fmt.Fprintf(&b, "\nstate: {dir: %q}\n", o.StateDir)
	if o.DLQ {
		fmt.Fprintf(&b, "errors: {policy: dlq, dlq_topic: %s.dlq}\n", o.Name)
	}
	b.WriteString(o.Extra)
	return b.String()
}

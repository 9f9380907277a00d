package job

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/timejoin"
)

// TimeSpec is a compiled time join: the operator's spec and each side's
// projection (join key columns, then the time column unless it is
// source.ts_ms, then the selected columns, without duplicates).
type TimeSpec struct {
	Spec *timejoin.Spec
	// Columns are the projections of the left and right side.
	Columns [2][]string
	// Key are the positions of each side's join key columns in its row.
	Key [2][]int
	// Time is the position of each side's time column, -1 for
	// source.ts_ms.
	Time [2]int
	// Millis: each side's time column is a bigint of epoch milliseconds.
	Millis [2]bool
	// Names are the output column names.
	Names []string
}

func sideIndex(s row.Side) int {
	if s == row.Parent {
		return 0
	}
	return 1
}

// TimeJoin compiles the time join of cfg (cfg.IsTimeJoin()). A
// configuration that passed config's validation always compiles.
func TimeJoin(cfg *config.Config) (*TimeSpec, error) {
	tj := cfg.TimeJoin
	ts := &TimeSpec{}
	spec := &timejoin.Spec{
		OutOfOrderness: micros(tj.OutOfOrderness), AllowedLateness: micros(tj.AllowedLateness), IdleTimeout: micros(tj.IdleTimeout),
	}
	switch tj.Kind {
	case config.KindInterval:
		spec.Kind = timejoin.Interval
		if tj.Lower != nil {
			spec.Lower = micros(*tj.Lower)
		}
		if tj.Upper != nil {
			spec.Upper = micros(*tj.Upper)
		}
	case config.KindWindow:
		spec.Kind = timejoin.Window
		if tj.Window != nil {
			spec.Size, spec.Slide = micros(tj.Window.Size), micros(tj.Window.Slide)
		}
	case config.KindTemporal:
		spec.Kind = timejoin.Temporal
	}
	spec.Join = map[config.JoinKind]timejoin.JoinType{config.Inner: timejoin.Inner, config.Left: timejoin.LeftOuter,
		config.Right: timejoin.RightOuter, config.Full: timejoin.FullOuter}[cfg.Join]
	for i, s := range []*config.TimeSide{&tj.Left, &tj.Right} {
		cols := append([]string(nil), s.Key...)
		ts.Time[i] = -1
		if s.Time != config.TimeSource {
			cols = appendUnique(cols, s.Time)
			ts.Time[i] = indexOf(cols, s.Time)
			switch s.Types[s.Time] {
			case "bigint", "int8":
				ts.Millis[i] = true
			}
		}
		for j := range s.Key {
			ts.Key[i] = append(ts.Key[i], j)
		}
		ts.Columns[i] = cols
	}
	for _, s := range cfg.Select {
		var c timejoin.Column
		switch s.Table {
		case "left", "right":
			i := sideIndex(s.Side)
			ts.Columns[i] = appendUnique(ts.Columns[i], s.Column)
			c = timejoin.Column{From: timejoin.FromLeft, Index: indexOf(ts.Columns[i], s.Column)}
			if i == 1 {
				c.From = timejoin.FromRight
			}
		case "window":
			c.From = timejoin.FromWindowStart
			if s.Column == "end" {
				c.From = timejoin.FromWindowEnd
			}
		}
		spec.Out = append(spec.Out, c)
		ts.Names = append(ts.Names, s.Name)
	}
	spec.LeftWidth, spec.RightWidth = len(ts.Columns[0]), len(ts.Columns[1])
	spec.KeyCols, spec.TimeCol = ts.Key, ts.Time // rows are stored without them
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	ts.Spec = spec
	return ts, nil
}

func micros(d time.Duration) int64 { return d.Microseconds() }

func appendUnique(s []string, v string) []string {
	if indexOf(s, v) < 0 {
		s = append(s, v)
	}
	return s
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// Fingerprint identifies the state's shape: a state built for another
// time join must not be resumed.
func (ts *TimeSpec) Fingerprint() []byte {
	s := ts.Spec
	return fmt.Appendf(nil, "time-v1|%s|%s|%d|%d|%d|%d|%d|%d|%d|%v|%v|%v|%v", s.Kind, s.Join, s.Lower, s.Upper, s.Size, s.Slide,
		s.OutOfOrderness, s.AllowedLateness, s.IdleTimeout, ts.Columns, ts.Time, ts.Millis, s.Out)
}

// BadRecord is a record a time join's decoder refuses: Kind names why
// (decode kinds, or "time", "append_only", "key").
type BadRecord struct {
	Kind string
	Err  error
}

func (b *BadRecord) Error() string { return b.Err.Error() }
func (b *BadRecord) Unwrap() error { return b.Err }

// TimeDecoder decodes the records of a time join's two topics into
// timejoin.Records. Not safe for concurrent use: each goroutine needs its
// own.
type TimeDecoder struct {
	ts     *TimeSpec
	topics [2]string
	dec    [2]*debezium.Decoder
	cdc    [2]bool // the side is a CDC table (a temporal join's right side)
	ev     debezium.Event
	key    []row.Value
}

// NewTimeDecoder returns a decoder for cfg's time join, compiled as ts.
func NewTimeDecoder(cfg *config.Config, ts *TimeSpec) *TimeDecoder {
	d := &TimeDecoder{ts: ts}
	for i, s := range []*config.TimeSide{&cfg.TimeJoin.Left, &cfg.TimeJoin.Right} {
		side := row.Parent
		if i == 1 {
			side = row.Child
		}
		o := DecoderOptions(cfg, side, ts.Columns[i], nil)
		o.Plain = s.Format == config.TimeFormatPlain
		d.dec[i] = debezium.NewDecoder(ts.Columns[i], o)
		d.topics[i] = s.Topic
	}
	d.cdc[1] = ts.Spec.Kind == timejoin.Temporal
	return d
}

// Event returns the event the last Decode decoded (its images and, with
// a schema, its column types, in the order of the side's TimeSpec.Columns),
// valid until the next Decode; meaningful only after a Decode without
// error.
func (d *TimeDecoder) Event() *debezium.Event { return &d.ev }

// Side returns the side of topic (0 when it is neither).
func (d *TimeDecoder) Side(topic string) timejoin.Side {
	switch topic {
	case d.topics[0]:
		return timejoin.SideLeft
	case d.topics[1]:
		return timejoin.SideRight
	}
	return 0
}

// Decode decodes one record into r (reusing its slices: r's Key, PK and
// Row are valid until the next Decode). ok is false for a tombstone.
// Errors are *BadRecord naming the record's position.
func (d *TimeDecoder) Decode(topic string, partition int32, offset int64, key, value []byte, r *timejoin.Record) (ok bool, err error) {
	side := d.Side(topic)
	if side == 0 {
		return false, &BadRecord{"topic", fmt.Errorf("cdcjoin: bad record at %s/%d@%d: topic is neither time_join.left.topic (%s) nor time_join.right.topic (%s)",
			topic, partition, offset, d.topics[0], d.topics[1])}
	}
	i := 0
	if side == timejoin.SideRight {
		i = 1
	}
	bad := func(kind, format string, args ...any) error {
		return &BadRecord{kind, fmt.Errorf("cdcjoin: bad record at %s/%d@%d: %s", topic, partition, offset, fmt.Sprintf(format, args...))}
	}
	ev := &d.ev
	ok, err = d.dec[i].Decode(key, value, ev)
	if err != nil {
		err = debezium.AtPosition(err, topic, partition, offset)
		kind := "decode"
		var de *debezium.DecodeError
		if errors.As(err, &de) {
			kind = de.Kind.String()
		}
		return false, &BadRecord{kind, err}
	}
	if !ok {
		return false, nil
	}
	*r = timejoin.Record{Side: side, Partition: partition, Key: r.Key[:0], PK: r.PK[:0], Row: r.Row[:0]}
	img := &ev.After
	switch ev.Op {
	case debezium.OpCreate, debezium.OpRead:
		r.Op = timejoin.Insert
	case debezium.OpUpdate:
		if !d.cdc[i] {
			return false, bad("append_only", "the %s side (%s) is append-only (an insert-only table or an event stream): op u is not allowed", side, topic)
		}
		r.Op = timejoin.Insert
	case debezium.OpDelete:
		if !d.cdc[i] {
			return false, bad("append_only", "the %s side (%s) is append-only (an insert-only table or an event stream): op d is not allowed", side, topic)
		}
		r.Op, img = timejoin.Delete, &ev.Before
	case debezium.OpTruncate:
		if !d.cdc[i] {
			return false, bad("append_only", "the %s side (%s) is append-only (an insert-only table or an event stream): op t is not allowed", side, topic)
		}
		r.Op = timejoin.Truncate
	}
	if r.Op == timejoin.Insert && !img.Present {
		return false, bad("malformed", "op %s without an after image", ev.Op)
	}
	// The event time.
	if t := d.ts.Time[i]; t < 0 {
		r.Time = ev.Source.TsMs * 1000
	} else if r.Op != timejoin.Insert {
		// A delete or truncate happens at its commit: its before image's
		// time column is the previous version's time.
		if ev.Source.TsMs == 0 {
			return false, bad("time", "a delete or truncate without source.ts_ms (its time)")
		}
		r.Time = ev.Source.TsMs * 1000
	} else {
		tm, err := d.time(i, img.Values[t])
		if err != nil {
			return false, bad("time", "the time column %s: %v", d.ts.Columns[i][t], err)
		}
		r.Time = tm
	}
	// The row's identity: the Kafka record key (the table's primary key),
	// or where a keyless event sits.
	switch {
	case len(key) > 0 && !d.cdc[i]:
		// An event's identity among the rows of its key and time: a
		// 64-bit hash of its record key is as good and smaller.
		r.PK = binary.BigEndian.AppendUint64(r.PK, xxhash.Sum64(key))
	case len(key) > 0:
		r.PK = append(r.PK, key...)
	case r.Op == timejoin.Truncate:
	case d.cdc[i]:
		return false, bad("key", "the %s side (%s) is a CDC table: its records need the primary key as their Kafka key", side, topic)
	default:
		r.PK = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(append(r.PK, 0), uint32(partition)), uint64(offset))
	}
	if r.Op != timejoin.Insert {
		return true, nil
	}
	d.key = d.key[:0]
	for _, k := range d.ts.Key[i] {
		v := img.Values[k]
		if v.IsNull() || v.Kind == row.KindUnavailable {
			r.KeyNull = true
			v = row.Null()
		}
		d.key = append(d.key, v)
	}
	r.Key = row.AppendKey(r.Key, d.key)
	r.Row = append(r.Row, img.Values...)
	return true, nil
}

// time converts a time column's value to microseconds since the epoch.
func (d *TimeDecoder) time(i int, v row.Value) (int64, error) {
	switch v.Kind {
	case row.KindTimestamp:
		return v.Int, nil
	case row.KindInt:
		if d.ts.Millis[i] {
			if v.Int > 1<<63/1000 || v.Int < -(1<<63)/1000 {
				return 0, fmt.Errorf("%d ms is out of range", v.Int)
			}
			return v.Int * 1000, nil
		}
		return v.Int, nil
	case row.KindDate:
		return v.Int * 86400_000_000, nil
	case row.KindString:
		t, err := time.Parse(time.RFC3339Nano, v.Str)
		if err != nil {
			return 0, fmt.Errorf("%q is not an RFC 3339 timestamp", v.Str)
		}
		return t.UnixMicro(), nil
	case row.KindNull:
		return 0, fmt.Errorf("NULL (every record needs an event time)")
	}
	return 0, fmt.Errorf("a %s is not a time (declare the column's type: timestamp, timestamptz, date or bigint)", v.Kind)
}

// TimeOutput returns the select list of the time join ts in select
// order, as Output does for a regular join: the left side's types are
// those observed as row.Parent, the right side's as row.Child (events of a
// TimeDecoder, whose columns are ts.Columns); window bounds are
// timestamps.
func (t *Types) TimeOutput(ts *TimeSpec) []row.ColumnType {
	out := make([]row.ColumnType, len(ts.Spec.Out))
	for i, c := range ts.Spec.Out {
		side := row.Parent
		switch c.From {
		case timejoin.FromWindowStart, timejoin.FromWindowEnd:
			out[i] = config.WindowBoundType()
			continue
		case timejoin.FromRight:
			side = row.Child
		}
		if st := t.sides[side]; c.Index < len(st) && st[c.Index].Known() {
			out[i] = st[c.Index]
		} else if inf := t.inferred[side]; c.Index < len(inf) {
			out[i] = inf[c.Index]
		}
	}
	return out
}

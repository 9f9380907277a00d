package config

import (
	"fmt"
	"time"

	"github.com/cdcjoin/cdcjoin/row"
)

// TimeJoin is the time_join section: a time-bounded join of two event
// streams (or, temporal, of an event stream with a CDC table) instead of
// the parent/child join of two tables. See package timejoin for the
// semantics.
//
//	time_join:
//	  kind: interval             # interval | window | temporal
//	  left:  {topic: ads.impressions, key: [ad_id, user_id], time: impression_time, types: {impression_time: timestamp}}
//	  right: {topic: ads.clicks,      key: [ad_id, user_id], time: click_time,      types: {click_time: timestamp}}
//	  lower: 0s                  # interval: left.time + lower <= right.time <= left.time + upper
//	  upper: 30m
//	  window: {size: 1h, slide: 1h}   # window
//	  out_of_orderness: 10s
//	  idle_timeout: 1m
//	  allowed_lateness: 0s
type TimeJoin struct {
	// Kind is interval, window or temporal (required).
	Kind string `yaml:"kind"`
	// Left and Right are the inputs (required).
	Left  TimeSide `yaml:"left"`
	Right TimeSide `yaml:"right"`
	// Lower and Upper bound an interval join (upper required, lower
	// default 0): left.time + lower <= right.time <= left.time + upper,
	// inclusive; either may be negative.
	Lower *time.Duration `yaml:"lower"`
	Upper *time.Duration `yaml:"upper"`
	// Window is a window join's windows.
	Window *TimeWindow `yaml:"window"`
	// OutOfOrderness is subtracted from a source partition's largest event
	// time to give its watermark (default 0).
	OutOfOrderness time.Duration `yaml:"out_of_orderness"`
	// IdleTimeout (default 0: never) makes a source partition idle — the
	// join's watermark stops waiting for it — after that long without a
	// record: wall time in run, event time of the other partitions in
	// replay.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// AllowedLateness (default 0): a record with time < the join's
	// watermark − allowed_lateness when it arrives is late (a bad record,
	// reason late).
	AllowedLateness time.Duration `yaml:"allowed_lateness"`
}

// TimeWindow is a window join's windows: tumbling when slide = size
// (the default), hopping otherwise.
type TimeWindow struct {
	Size  time.Duration `yaml:"size"`
	Slide time.Duration `yaml:"slide"`
}

// TimeSide is one input of a time join.
type TimeSide struct {
	// Topic is the input topic (required).
	Topic string `yaml:"topic"`
	// Key is the join key column(s) (required; the same number a side).
	Key Columns `yaml:"key"`
	// Time is the event-time column (required), or source.ts_ms (the
	// change's commit time in the Debezium envelope, milliseconds).
	Time string `yaml:"time"`
	// Types declares column types, as Table.Types. For the time column:
	// timestamp (int64 microseconds without a schema), timestamptz, date, or
	// bigint (epoch milliseconds).
	Types map[string]string `yaml:"types"`
	// Format is debezium (default: Debezium envelopes of an insert-only
	// table; a temporal join's right side is a CDC table) or json (plain
	// JSON objects, one event per record value; not for a temporal right
	// side).
	Format string `yaml:"format"`
}

// Time-join side formats (TimeSide.Format). Not the record formats of
// Config.Format: a time-join side's "json" is a plain JSON event, not
// Kafka Connect's JsonConverter (that is "debezium").
const (
	TimeFormatDebezium = "debezium"
	TimeFormatPlain    = "json"
)

// Time-join kinds.
const (
	KindInterval = "interval"
	KindWindow   = "window"
	KindTemporal = "temporal"
)

// The join types beyond inner and left (time joins).
const (
	Right JoinKind = "right"
	Full  JoinKind = "full"
)

// TimeSource is the special time column that reads the envelope's
// source.ts_ms.
const TimeSource = "source.ts_ms"

// ModeInsert is the ClickHouse mode of time joins: a plain MergeTree of
// emitted rows.
const ModeInsert = "insert"

// IsTimeJoin reports whether c is a time join.
func (c *Config) IsTimeJoin() bool { return c.TimeJoin != nil }

func (t *TimeJoin) defaults(c *Config) {
	for _, s := range []*TimeSide{&t.Left, &t.Right} {
		if s.Format == "" {
			s.Format = TimeFormatDebezium
		}
	}
	if t.Kind == KindInterval && t.Lower == nil {
		var zero time.Duration
		t.Lower = &zero
	}
	if t.Window != nil && t.Window.Slide == 0 {
		t.Window.Slide = t.Window.Size
	}
	// The parent/child tables stand for the two sides, so that the type
	// declarations, projections and sinks of regular joins apply.
	c.Parent = Table{Topic: t.Left.Topic, Key: t.Left.Key, Types: t.Left.Types}
	c.Child = Table{Topic: t.Right.Topic, Key: t.Right.Key, Types: t.Right.Types}
}

// validateTimeJoin reports the time_join section's problems (the
// parent/child checks of regular joins do not apply).
func (c *Config) validateTimeJoin(p *Problems) {
	t := c.TimeJoin
	if c.line("parent") > 0 || c.line("child") > 0 {
		c.add(p, "time_join replaces parent and child: a job is one or the other", "time_join")
	}
	switch t.Kind {
	case KindInterval, KindWindow, KindTemporal:
	case "":
		c.add(p, "time_join.kind is required: interval, window or temporal", "time_join")
	default:
		c.add(p, fmt.Sprintf("time_join.kind %q: use interval, window or temporal", t.Kind), "time_join", "kind")
	}
	for _, s := range []struct {
		name string
		side *TimeSide
	}{{"left", &t.Left}, {"right", &t.Right}} {
		path := []string{"time_join", s.name}
		if s.side.Topic == "" {
			c.add(p, fmt.Sprintf("time_join.%s.topic is required", s.name), path...)
		}
		if len(s.side.Key) == 0 {
			c.add(p, fmt.Sprintf("time_join.%s.key is required (the join key column(s))", s.name), path...)
		}
		for _, k := range s.side.Key {
			if !identRE.MatchString(k) {
				c.add(p, fmt.Sprintf("time_join.%s.key: %q is not a column name", s.name, k), append(path, "key")...)
			}
		}
		switch {
		case s.side.Time == "":
			c.add(p, fmt.Sprintf("time_join.%s.time is required (the event-time column, or source.ts_ms)", s.name), path...)
		case s.side.Time == TimeSource:
			if s.side.Format == TimeFormatPlain {
				c.add(p, fmt.Sprintf("time_join.%s.time source.ts_ms needs Debezium envelopes (format debezium)", s.name), append(path, "time")...)
			}
		case !identRE.MatchString(s.side.Time):
			c.add(p, fmt.Sprintf("time_join.%s.time: %q is not a column name", s.name, s.side.Time), append(path, "time")...)
		}
		if d, ok := s.side.Types[s.side.Time]; ok {
			switch d {
			case "timestamp", "timestamp without time zone", "timestamptz", "timestamp with time zone", "date", "bigint", "int8":
			default:
				c.add(p, fmt.Sprintf("time_join.%s.types.%s: %q cannot be an event time (use timestamp, timestamptz, date or bigint for epoch milliseconds)", s.name, s.side.Time, d),
					append(path, "types", s.side.Time)...)
			}
		}
		switch s.side.Format {
		case TimeFormatDebezium, TimeFormatPlain:
		default:
			c.add(p, fmt.Sprintf("time_join.%s.format %q: use debezium or json", s.name, s.side.Format), append(path, "format")...)
		}
	}
	if c.Format != "" && c.Format != FormatJSON {
		c.add(p, fmt.Sprintf("format %s: a time join reads JSON records (Debezium envelopes through JsonConverter, or plain JSON events: time_join.<side>.format)", c.Format), "format")
	}
	if len(t.Left.Key) > 0 && len(t.Right.Key) > 0 && len(t.Left.Key) != len(t.Right.Key) {
		c.add(p, fmt.Sprintf("time_join: left.key has %d column(s), right.key %d; they are matched one to one", len(t.Left.Key), len(t.Right.Key)), "time_join", "right", "key")
	}
	if t.Left.Topic != "" && t.Left.Topic == t.Right.Topic {
		c.add(p, "time_join: left.topic and right.topic are the same topic; a self-join is not supported", "time_join", "right", "topic")
	}
	switch t.Kind {
	case KindInterval:
		if t.Upper == nil {
			c.add(p, "time_join.upper is required for an interval join (left.time + lower <= right.time <= left.time + upper)", "time_join")
		} else if t.Lower != nil && *t.Lower > *t.Upper {
			c.add(p, fmt.Sprintf("time_join.lower %v is above upper %v", *t.Lower, *t.Upper), "time_join", "lower")
		}
		if t.Window != nil {
			c.add(p, "time_join.window is for window joins (kind: window)", "time_join", "window")
		}
	case KindWindow:
		switch {
		case t.Window == nil || t.Window.Size <= 0:
			c.add(p, "time_join.window.size is required for a window join, e.g. window: {size: 1h, slide: 1h}", "time_join")
		case t.Window.Slide <= 0 || t.Window.Slide > t.Window.Size:
			c.add(p, fmt.Sprintf("time_join.window.slide %v must be positive and at most the size %v", t.Window.Slide, t.Window.Size), "time_join", "window", "slide")
		case t.Window.Size%time.Microsecond != 0 || t.Window.Slide%time.Microsecond != 0:
			c.add(p, "time_join.window: size and slide are whole microseconds", "time_join", "window")
		}
	case KindTemporal:
		if t.Right.Format == TimeFormatPlain {
			c.add(p, "time_join.right of a temporal join is a CDC table: format debezium", "time_join", "right", "format")
		}
	}
	if t.Kind != KindInterval && (t.Lower != nil || t.Upper != nil) {
		c.add(p, "time_join.lower and upper are for interval joins (kind: interval)", "time_join")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"out_of_orderness", t.OutOfOrderness}, {"idle_timeout", t.IdleTimeout}, {"allowed_lateness", t.AllowedLateness}} {
		if d.v < 0 {
			c.add(p, fmt.Sprintf("time_join.%s must not be negative", d.name), "time_join", d.name)
		}
	}
	switch c.Join {
	case Inner, Left:
	case Right, Full:
		if t.Kind == KindTemporal {
			c.add(p, fmt.Sprintf("join %q: a temporal join is inner or left (each left row with the right version valid at its time)", c.Join), "join")
		}
	default:
		c.add(p, fmt.Sprintf("join %q: use inner, left, right or full", c.Join), "join")
	}
	if c.ClickHouse != nil && c.ClickHouse.Mode != ModeInsert {
		c.add(p, fmt.Sprintf("clickhouse.mode %q: a time join's output is insert-only (mode insert: a MergeTree of emitted rows)", c.ClickHouse.Mode), "clickhouse", "mode")
	}
	for _, s := range c.Select {
		switch s.Table {
		case "left", "right":
		case "window":
			if t.Kind != KindWindow {
				c.add(p, fmt.Sprintf("select: window.%s belongs to window joins", s.Column), "select")
			} else if s.Column != "start" && s.Column != "end" {
				c.add(p, fmt.Sprintf("select: window.%s: a window has start and end", s.Column), "select")
			}
		default:
			c.add(p, fmt.Sprintf("select: %s.%s: a time join selects left.<column>, right.<column> (and window.start, window.end)", s.Table, s.Column), "select")
		}
	}
}

// TimeSide returns the time-join side of s (row.Parent: left, row.Child:
// right).
func (c *Config) TimeSide(s row.Side) *TimeSide {
	if s == row.Parent {
		return &c.TimeJoin.Left
	}
	return &c.TimeJoin.Right
}

// Padded reports whether side's selected columns can be NULL because of
// the join type: a LEFT join's child (right) side, a RIGHT join's left
// side, both in a FULL join.
func (c *Config) Padded(side row.Side) bool {
	if side != row.Parent && side != row.Child {
		return false // window start and end
	}
	switch c.Join {
	case Left:
		return side == row.Child
	case Right:
		return side == row.Parent
	case Full:
		return true
	}
	return false
}

// Package timejointest drives a cdcjoin time join deterministically, in
// memory, the way Kafka Streams' TopologyTestDriver drives a topology:
// pipe records with event times into named inputs (each with its
// partitions), advance a partition's time or mark it idle, end the input,
// and read the rows the join emitted and the records it judged late.
//
// It runs the same operator as `cdcjoin replay` and `cdcjoin run` (package
// timejoin) on an in-memory state, with the same semantics: watermarks per
// input partition (largest event time seen − OutOfOrderness), the join's
// watermark the minimum over the partitions that are not idle (when all
// are idle, the largest of their watermarks), a record
// late when its time is below the watermark − AllowedLateness as it stood
// just before the record, bounds inclusive to the microsecond. Idleness is
// event time (the other partitions moving IdleTimeout past a partition's
// latest record), as in replay, and whatever Idle says, as in run.
//
// Nothing here reads a clock: the same calls give the same rows.
package timejointest

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/timejoin"
)

// Config describes the join, as the time_join section of a job does.
type Config struct {
	// Kind is "interval", "window" or "temporal".
	Kind string
	// Join is "inner" (default), "left", "right" or "full" (temporal:
	// inner or left).
	Join string
	// Lower and Upper bound an interval join: left.time + Lower ≤
	// right.time ≤ left.time + Upper.
	Lower, Upper time.Duration
	// Size and Slide are a window join's windows (Slide 0: tumbling).
	Size, Slide time.Duration
	// OutOfOrderness, AllowedLateness and IdleTimeout (0: never idle by
	// event time) are the watermark settings.
	OutOfOrderness, AllowedLateness, IdleTimeout time.Duration
	// Left and Right are the inputs.
	Left, Right Input
	// Select lists the output columns: "left.<col>", "right.<col>",
	// "window.start", "window.end", each with an optional " AS <name>";
	// without AS a column is named by its column name.
	Select []string
}

// Input is one side of the join.
type Input struct {
	// Name is what records are piped to (e.g. the topic).
	Name string
	// Key is the join key column(s).
	Key []string
	// Time is the event-time column: its values are time.Time (or int64
	// microseconds since the epoch).
	Time string
	// PK is the primary key column(s): records with the same key, time and
	// PK are one row (a redelivery is a duplicate). A temporal join's
	// right side (a table) needs one; default: each record is its own row.
	PK []string
}

// Row is one output row: the select list's names and values (int64,
// float64, string, bool, time.Time in UTC, nil for NULL).
type Row struct {
	Names  []string
	Values []any
}

// Get returns the value of the column named name (nil if absent).
func (r Row) Get(name string) any {
	for i, n := range r.Names {
		if n == name {
			return r.Values[i]
		}
	}
	return nil
}

// String renders the row as {name: value, …} in select order (times in
// RFC 3339 with microseconds).
func (r Row) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range r.Names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %s", n, show(r.Values[i]))
	}
	b.WriteByte('}')
	return b.String()
}

func show(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case time.Time:
		return x.UTC().Format("2006-01-02T15:04:05.999999Z")
	case string:
		return fmt.Sprintf("%q", x)
	}
	return fmt.Sprint(v)
}

// LateRecord is a record the join judged late: its time was below the
// watermark − AllowedLateness just before it. It took no part in the join.
type LateRecord struct {
	Input     string
	Partition int32
	Time      time.Time
	Watermark time.Time
	Values    map[string]any
}

func (l LateRecord) String() string {
	return fmt.Sprintf("late %s/%d at %s (watermark %s)", l.Input, l.Partition, show(l.Time), show(l.Watermark))
}

// side is one compiled input.
type side struct {
	in    Input
	s     timejoin.Side
	cols  []string // projected row: key, time, pk, selected (no duplicates)
	key   []int
	time  int
	pk    []int
	index map[string]int
}

// Driver is one time join in memory. Not safe for concurrent use.
type Driver struct {
	spec   *timejoin.Spec
	join   *timejoin.Join
	st     *timejoin.MemState
	sides  [2]*side
	names  []string
	rows   []Row
	late   []LateRecord
	n      uint64 // records piped (default PKs)
	kbuf   []byte
	values []row.Value
}

var selectRE = regexp.MustCompile(`^(?i:(left|right|window))\.([A-Za-z_][A-Za-z0-9_$]*)(?:\s+(?i:as)\s+([A-Za-z_][A-Za-z0-9_]*))?$`)

// New compiles c into a driver; every problem is reported at once.
func New(c Config) (*Driver, error) {
	var errs []string
	spec := &timejoin.Spec{
		Lower: us(c.Lower), Upper: us(c.Upper), Size: us(c.Size), Slide: us(c.Slide),
		OutOfOrderness: us(c.OutOfOrderness), AllowedLateness: us(c.AllowedLateness), IdleTimeout: us(c.IdleTimeout),
	}
	switch strings.ToLower(c.Kind) {
	case "interval":
		spec.Kind = timejoin.Interval
	case "window":
		spec.Kind = timejoin.Window
		if spec.Slide == 0 {
			spec.Slide = spec.Size
		}
	case "temporal":
		spec.Kind = timejoin.Temporal
	default:
		errs = append(errs, fmt.Sprintf("kind %q: use interval, window or temporal", c.Kind))
	}
	switch strings.ToLower(c.Join) {
	case "", "inner":
		spec.Join = timejoin.Inner
	case "left":
		spec.Join = timejoin.LeftOuter
	case "right":
		spec.Join = timejoin.RightOuter
	case "full":
		spec.Join = timejoin.FullOuter
	default:
		errs = append(errs, fmt.Sprintf("join %q: use inner, left, right or full", c.Join))
	}
	d := &Driver{st: &timejoin.MemState{}}
	for i, in := range []Input{c.Left, c.Right} {
		sd := &side{in: in, s: timejoin.SideLeft, index: map[string]int{}}
		if i == 1 {
			sd.s = timejoin.SideRight
		}
		if in.Name == "" || len(in.Key) == 0 || in.Time == "" {
			errs = append(errs, fmt.Sprintf("the %s input needs a Name, a Key and a Time column", sd.s))
		}
		if i == 1 && spec.Kind == timejoin.Temporal && len(in.PK) == 0 {
			sd.in.PK = in.Key // a table keyed by its join key
		}
		for _, k := range in.Key {
			sd.key = append(sd.key, sd.col(k))
		}
		sd.time = sd.col(in.Time)
		for _, k := range sd.in.PK {
			sd.pk = append(sd.pk, sd.col(k))
		}
		d.sides[i] = sd
	}
	if c.Left.Name != "" && c.Left.Name == c.Right.Name {
		errs = append(errs, "the inputs need different names")
	}
	for _, item := range c.Select {
		m := selectRE.FindStringSubmatch(strings.TrimSpace(item))
		if m == nil {
			errs = append(errs, fmt.Sprintf("select %q: use left.<col>, right.<col>, window.start or window.end, with an optional AS <name>", item))
			continue
		}
		name := m[2]
		if m[3] != "" {
			name = m[3]
		}
		var col timejoin.Column
		switch strings.ToLower(m[1]) {
		case "left":
			col = timejoin.Column{From: timejoin.FromLeft, Index: d.sides[0].col(m[2])}
		case "right":
			col = timejoin.Column{From: timejoin.FromRight, Index: d.sides[1].col(m[2])}
		default:
			switch strings.ToLower(m[2]) {
			case "start":
				col.From = timejoin.FromWindowStart
			case "end":
				col.From = timejoin.FromWindowEnd
			default:
				errs = append(errs, fmt.Sprintf("select %q: a window has start and end", item))
			}
			if m[3] == "" {
				name = "window_" + strings.ToLower(m[2])
			}
		}
		spec.Out = append(spec.Out, col)
		d.names = append(d.names, name)
	}
	spec.LeftWidth, spec.RightWidth = len(d.sides[0].cols), len(d.sides[1].cols)
	for i, sd := range d.sides {
		spec.KeyCols[i], spec.TimeCol[i] = sd.key, sd.time
	}
	if err := spec.Validate(); err != nil && len(errs) == 0 {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return nil, errors.New("cdcjoin: timejointest: " + strings.Join(errs, "; "))
	}
	d.spec = spec
	d.join = timejoin.New(spec, timejoin.Options{})
	if err := d.join.Load(d.st); err != nil {
		return nil, err
	}
	return d, nil
}

// col returns the position of column name in the side's row, adding it.
func (s *side) col(name string) int {
	if i, ok := s.index[name]; ok {
		return i
	}
	s.index[name] = len(s.cols)
	s.cols = append(s.cols, name)
	return len(s.cols) - 1
}

func us(d time.Duration) int64 { return d.Microseconds() }

func (d *Driver) input(name string) (*side, error) {
	for _, s := range d.sides {
		if s.in.Name == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("cdcjoin: timejointest: no input named %q (have %q and %q)", name, d.sides[0].in.Name, d.sides[1].in.Name)
}

// Pipe feeds one record into input's partition: an event (or, on a
// temporal join's right side, an insert or update of the table's row).
// The event time is the value of the input's Time column. It reports
// whether the record was late (then it is in Late, and took no part).
func (d *Driver) Pipe(input string, partition int32, values map[string]any) (late bool, err error) {
	return d.pipe(input, partition, timejoin.Insert, values)
}

// Delete feeds the deletion of a temporal join's right row (values need
// its PK columns and the Time column: when the delete happened).
func (d *Driver) Delete(input string, partition int32, values map[string]any) (late bool, err error) {
	return d.pipe(input, partition, timejoin.Delete, values)
}

func (d *Driver) pipe(input string, partition int32, op timejoin.Op, values map[string]any) (bool, error) {
	s, err := d.input(input)
	if err != nil {
		return false, err
	}
	for name := range values {
		if _, ok := s.index[name]; !ok {
			return false, fmt.Errorf("cdcjoin: timejointest: input %q has no column %q in its key, time, pk or select list", input, name)
		}
	}
	vals := make([]row.Value, len(s.cols))
	for i, c := range s.cols {
		v, err := value(values[c])
		if err != nil {
			return false, fmt.Errorf("cdcjoin: timejointest: %s.%s: %w", input, c, err)
		}
		vals[i] = v
	}
	tv := vals[s.time]
	if tv.Kind != row.KindTimestamp && tv.Kind != row.KindInt {
		return false, fmt.Errorf("cdcjoin: timejointest: %s.%s (the time column) must be a time.Time or int64 microseconds, not %v", input, s.in.Time, values[s.in.Time])
	}
	d.n++
	r := &timejoin.Record{Side: s.s, Partition: partition, Op: op, Time: tv.Int, Row: vals}
	if op == timejoin.Insert {
		key := make([]row.Value, len(s.key))
		for i, k := range s.key {
			key[i] = vals[k]
			r.KeyNull = r.KeyNull || vals[k].IsNull()
		}
		r.Key = row.AppendKey(nil, key)
	} else {
		r.Row = nil
	}
	if len(s.pk) > 0 {
		pk := make([]row.Value, len(s.pk))
		for i, k := range s.pk {
			pk[i] = vals[k]
		}
		r.PK = row.AppendKey(nil, pk)
	} else {
		r.PK = fmt.Appendf(nil, "#%d", d.n)
	}
	res, err := d.join.Apply(d.st, r, d.emit)
	if err != nil {
		return false, err
	}
	if res.Verdict != timejoin.Late {
		return false, nil
	}
	d.late = append(d.late, LateRecord{Input: input, Partition: partition, Time: toTime(tv.Int),
		Watermark: toTime(res.Watermark), Values: values})
	return true, nil
}

func (d *Driver) emit(c *row.Change) error {
	r := Row{Names: d.names, Values: make([]any, len(c.Values))}
	for i, v := range c.Values {
		r.Values[i] = goValue(v)
	}
	d.rows = append(d.rows, r)
	return nil
}

// Advance tells the join that input's partition has reached event time
// to without a record (a watermark from upstream); it makes the partition
// active.
func (d *Driver) Advance(input string, partition int32, to time.Time) error {
	s, err := d.input(input)
	if err != nil {
		return err
	}
	return d.join.Advance(d.st, timejoin.Source{Side: s.s, Partition: partition}, to.UnixMicro(), d.emit)
}

// Idle marks input's partition idle: the join's watermark no longer
// waits for it (until it has a record again).
func (d *Driver) Idle(input string, partition int32) error {
	s, err := d.input(input)
	if err != nil {
		return err
	}
	return d.join.SetIdle(d.st, timejoin.Source{Side: s.s, Partition: partition}, true, d.emit)
}

// Declare makes input's partition known before its first record: the
// watermark waits for it (until it has records or is idle), as `run` does
// for every partition of the source topics.
func (d *Driver) Declare(input string, partition int32) error {
	s, err := d.input(input)
	if err != nil {
		return err
	}
	d.join.Declare(timejoin.Source{Side: s.s, Partition: partition})
	return nil
}

// EndOfInput moves the watermark to +∞ (`replay --end-of-input`): every
// pending outer row, temporal row and window is emitted. Later records
// are late.
func (d *Driver) EndOfInput() error { return d.join.EndOfInput(d.st, d.emit) }

// Restart saves the join's state and continues with a new operator loaded
// from it, as a restarted process does.
func (d *Driver) Restart() error {
	if err := d.join.Save(d.st); err != nil {
		return err
	}
	d.join = timejoin.New(d.spec, timejoin.Options{})
	return d.join.Load(d.st)
}

// ReadRows returns the rows emitted since the last ReadRows, in emission
// order.
func (d *Driver) ReadRows() []Row {
	r := d.rows
	d.rows = nil
	return r
}

// Late returns every record judged late so far.
func (d *Driver) Late() []LateRecord { return d.late }

// Watermark returns the join's watermark (the zero Time while it is −∞).
func (d *Driver) Watermark() time.Time { return toTime(d.join.Watermark()) }

// StateEntries returns the number of entries the join keeps (rows,
// versions, timers, watermarks).
func (d *Driver) StateEntries() int { return d.st.Len() }

func toTime(us int64) time.Time {
	switch us {
	case timejoin.MinTime:
		return time.Time{}
	case timejoin.MaxTime:
		return time.Unix(1<<62, 0).UTC()
	}
	return time.UnixMicro(us).UTC()
}

// value converts a Go value into a column value.
func value(v any) (row.Value, error) {
	switch x := v.(type) {
	case nil:
		return row.Null(), nil
	case int:
		return row.Int(int64(x)), nil
	case int32:
		return row.Int(int64(x)), nil
	case int64:
		return row.Int(x), nil
	case float64:
		return row.Float(x), nil
	case string:
		return row.String(x), nil
	case bool:
		return row.Bool(x), nil
	case time.Time:
		return row.Timestamp(x.UnixMicro()), nil
	}
	return row.Value{}, fmt.Errorf("unsupported value %T (use int, int64, float64, string, bool, time.Time or nil)", v)
}

func goValue(v row.Value) any {
	switch v.Kind {
	case row.KindInt:
		return v.Int
	case row.KindFloat:
		return v.Float
	case row.KindBool:
		return v.Int != 0
	case row.KindTimestamp:
		return time.UnixMicro(v.Int).UTC()
	case row.KindNull:
		return nil
	}
	return v.Str
}

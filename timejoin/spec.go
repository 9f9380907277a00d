// Package timejoin is the core of cdcjoin's time-bounded joins of
// append-only event streams: interval joins (Flink's interval join, Kafka
// Streams' JoinWindows), window joins (tumbling and hopping) and event-time
// temporal joins of a stream with a CDC table (FOR SYSTEM_TIME AS OF),
// INNER, LEFT, RIGHT and FULL, with per-source-partition watermarks,
// idleness and allowed lateness.
//
// A Join is a pure state machine, like package keyed's: no goroutines,
// clocks or I/O. It reads and writes a small ordered key-value State that
// the driver commits atomically with its input positions (joinstate's
// Space in pebble, MemState in tests), keeps its watermarks in memory
// between Load and Save, and emits the joined rows through a callback.
// The same records applied in the same order to the same state always
// emit the same rows with the same sequence numbers, which is what makes
// the insert-only output exactly once across crashes (see row.Insert).
//
// # Semantics
//
// Times are int64 microseconds since the Unix epoch; arithmetic on them
// saturates. Each source partition p (a side and a partition of its
// topic) has max[p], the largest event time seen in it, and the watermark
// max[p] − OutOfOrderness. The join's watermark W is the minimum over the
// known partitions that are not idle (when all are idle: the largest
// watermark of any), never moving back (it starts at −∞). With E = W − AllowedLateness, each record is, in order: judged
// against E as it stood just before it (late iff its time < E: the
// record takes no part in the join and the caller treats it as a bad
// record); applied; observed by its partition's watermark; then every
// timer whose time is < E fires (outer rows, temporal rows, window
// closes, retirement). See Spec for the kinds' rules.
//
// Idleness: with IdleTimeout > 0 a partition is idle when the largest
// event time seen in any partition is IdleTimeout past the one at its
// latest record (event time: deterministic, what replay uses), or when
// the driver says so (SetIdle: run decides by wall time and records its
// decision in the keyed log). A record in a partition makes it active.
package timejoin

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Kind is the kind of time join.
type Kind uint8

// Time join kinds.
const (
	// Interval joins a left row at time t with the right rows of the same
	// key whose time is in [t+Lower, t+Upper] (inclusive). A pair is
	// emitted as soon as both rows are there. A left row that matched
	// nothing is emitted NULL-padded (LeftOuter, FullOuter) when E passes
	// t+Upper; a right row (RightOuter, FullOuter) when E passes t−Lower.
	// A row is retired once E passes its bound and its own time.
	Interval Kind = iota + 1
	// Window joins the rows of both sides in the same window [s, s+Size),
	// s a multiple of Slide (tumbling when Slide = Size, hopping
	// otherwise; a row is in every window that contains its time). A
	// window's rows are emitted when it closes (E ≥ its end): every pair of
	// the key, or, when only one side has rows there, that side's rows
	// padded (by the outer join types). Window start and end are
	// selectable.
	Window
	// Temporal joins each left row (append-only) with the version of the
	// right rows (a CDC table: inserts, updates, deletes) valid at the left
	// row's time: per right primary key the newest change with time ≤ the
	// left time, none when that change is a delete or moved the row to
	// another key. It is emitted once E passes the left time (LeftOuter:
	// padded without a match). Right versions older than the newest one
	// below E are retired.
	Temporal
)

func (k Kind) String() string {
	switch k {
	case Interval:
		return "interval"
	case Window:
		return "window"
	case Temporal:
		return "temporal"
	}
	return "invalid"
}

// JoinType is the SQL join type.
type JoinType uint8

// Join types.
const (
	Inner JoinType = iota + 1
	LeftOuter
	RightOuter
	FullOuter
)

func (j JoinType) String() string {
	switch j {
	case Inner:
		return "inner"
	case LeftOuter:
		return "left"
	case RightOuter:
		return "right"
	case FullOuter:
		return "full"
	}
	return "invalid"
}

// keeps reports whether unmatched rows of side are emitted padded.
func (j JoinType) keeps(s Side) bool {
	if s == SideLeft {
		return j == LeftOuter || j == FullOuter
	}
	return j == RightOuter || j == FullOuter
}

// Side is one input of the join. Its value is the byte that stands for it
// in state keys.
type Side byte

// Sides.
const (
	SideLeft  Side = 'L'
	SideRight Side = 'R'
)

func (s Side) String() string {
	if s == SideLeft {
		return "left"
	}
	return "right"
}

func (s Side) other() Side {
	if s == SideLeft {
		return SideRight
	}
	return SideLeft
}

// From says where an output column comes from.
type From uint8

// Output column sources.
const (
	FromLeft        From = iota + 1 // a column of the left row
	FromRight                       // a column of the right row
	FromWindowStart                 // the window's start (Window), a timestamp
	FromWindowEnd                   // the window's end (exclusive), a timestamp
)

// Column is one output column: From, and for FromLeft/FromRight the
// column's position in that side's projected row.
type Column struct {
	From  From
	Index int
}

// Times that stand for the infinities.
const (
	MinTime int64 = math.MinInt64 // −∞: no record yet
	MaxTime int64 = math.MaxInt64 // +∞: end of input
)

// Spec is a compiled time join. It is immutable once validated and safe
// to share between Joins.
type Spec struct {
	Kind Kind
	Join JoinType
	// Lower and Upper bound an interval join: left.time + Lower ≤
	// right.time ≤ left.time + Upper, in µs (Lower ≤ Upper; either may be
	// negative).
	Lower, Upper int64
	// Size and Slide (µs) are a window join's windows (0 < Slide ≤ Size).
	Size, Slide int64
	// OutOfOrderness is subtracted from a partition's largest event time
	// to give its watermark (µs, ≥ 0).
	OutOfOrderness int64
	// AllowedLateness (µs, ≥ 0): a record with time < W − AllowedLateness
	// is late; rows wait for W − AllowedLateness to pass their bounds.
	AllowedLateness int64
	// IdleTimeout (µs, ≥ 0; 0: never idle by event time) is the event
	// time the other partitions must advance past a partition's latest
	// record for it to be idle.
	IdleTimeout int64
	// LeftWidth and RightWidth are the number of columns of each side's
	// projected rows (padding).
	LeftWidth, RightWidth int
	// KeyCols (optional) are, per side (0 left, 1 right), the positions of
	// the join key columns in its rows, in key order, and TimeCol the
	// position of its time column (-1: none). With them the Join stores a
	// row without the values its state key holds (Record.Key must then be
	// row.AppendKey of exactly those columns).
	KeyCols [2][]int
	TimeCol [2]int
	// Out are the output columns, in select order.
	Out []Column
}

// Validate reports every problem of s at once.
func (s *Spec) Validate() error {
	var errs []string
	switch s.Kind {
	case Interval:
		if s.Lower > s.Upper {
			errs = append(errs, fmt.Sprintf("interval lower bound %d µs is above the upper bound %d µs", s.Lower, s.Upper))
		}
	case Window:
		if s.Size <= 0 {
			errs = append(errs, "window size must be positive")
		}
		if s.Slide <= 0 || s.Slide > s.Size {
			errs = append(errs, "window slide must be positive and at most the size")
		}
	case Temporal:
		if s.Join == RightOuter || s.Join == FullOuter {
			errs = append(errs, "a temporal join is inner or left")
		}
	default:
		errs = append(errs, "unknown kind")
	}
	if s.Join < Inner || s.Join > FullOuter {
		errs = append(errs, "unknown join type")
	}
	if s.OutOfOrderness < 0 || s.AllowedLateness < 0 || s.IdleTimeout < 0 {
		errs = append(errs, "out_of_orderness, allowed_lateness and idle_timeout must not be negative")
	}
	if len(s.Out) == 0 {
		errs = append(errs, "no output columns")
	}
	for i, w := range []int{s.LeftWidth, s.RightWidth} {
		for _, c := range s.KeyCols[i] {
			if c < 0 || c >= w {
				errs = append(errs, "a key column is outside its side's row")
			}
		}
		if len(s.KeyCols[i]) > 0 && s.TimeCol[i] >= w {
			errs = append(errs, "the time column is outside its side's row")
		}
	}
	for i, c := range s.Out {
		switch {
		case c.From == FromLeft && (c.Index < 0 || c.Index >= s.LeftWidth),
			c.From == FromRight && (c.Index < 0 || c.Index >= s.RightWidth):
			errs = append(errs, fmt.Sprintf("output column %d is outside its side's row", i))
		case (c.From == FromWindowStart || c.From == FromWindowEnd) && s.Kind != Window:
			errs = append(errs, fmt.Sprintf("output column %d: window start/end belong to window joins", i))
		case c.From < FromLeft || c.From > FromWindowEnd:
			errs = append(errs, fmt.Sprintf("output column %d has no source", i))
		}
	}
	if len(errs) > 0 {
		return errors.New("cdcjoin: time join: " + strings.Join(errs, "; "))
	}
	return nil
}

// bound returns the time after which E passing it means no partner of a
// row of side at time t can still arrive (interval joins).
func (s *Spec) bound(side Side, t int64) int64 {
	if side == SideLeft {
		return addTime(t, s.Upper)
	}
	return addTime(t, -s.Lower)
}

// addTime is a + b, saturating at MinTime and MaxTime (which stay put).
func addTime(a, b int64) int64 {
	if a == MinTime || a == MaxTime {
		return a
	}
	c := a + b
	if b > 0 && c < a {
		return MaxTime
	}
	if b < 0 && c > a {
		return MinTime
	}
	return c
}

// windowStart returns the start of the last window containing t (a
// multiple of slide, floor division).
func windowStart(t, slide int64) int64 {
	q := t / slide
	if t%slide != 0 && t < 0 {
		q--
	}
	return q * slide
}

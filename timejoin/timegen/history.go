// Package timegen generates seeded event histories for cdcjoin's time
// joins and computes what a time join must emit for them: a reference
// model of package timejoin's semantics (Late, Expected), independent of
// its implementation. Tests of the core, the drivers and the bench use it;
// Encode turns a history into Debezium records.
package timegen

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/timejoin"
)

// Options shape a history.
type Options struct {
	Kind timejoin.Kind
	// N is the number of events.
	N int
	// OutOfOrderness is how far (µs) most events lag the clock.
	OutOfOrderness int64
	// Steady leaves out the quiet partitions and the events far behind
	// the clock: a history at a constant rate, nothing late.
	Steady bool
	// Partitions per side (default 3) and join keys (default 4).
	Partitions, Keys int
	// Start is the first event time (µs; default 1000), Step the largest
	// clock advance between events (default 3).
	Start, Step int64
	// Scale multiplies every time (default 1; 1000 makes whole
	// milliseconds, as source.ts_ms needs).
	Scale int64
	// KeyIsPK (temporal): the right side's join key is its primary key,
	// so a row never moves between keys, and the left keys are drawn from
	// the right's primary keys (Keys is unused; the job:
	// ConfigOptions.RightKeyIsPK), and no truncates (as NoTruncate).
	KeyIsPK bool
	// NoTruncate leaves out the temporal right side's truncates (run keys
	// each source partition on its own: a truncate's order against the
	// other partitions' changes is undefined there): an upsert takes a
	// truncate's place, the random draws stay the same.
	NoTruncate bool
}

// Generate returns a random history: several partitions a side, keys
// reused, times moving forward with disorder mostly within
// OutOfOrderness, some events far behind (late), partitions going quiet
// for a while (idle), redelivered events, NULL keys. A temporal join's
// right side gets creates, updates (some moving the row to another key,
// some with an unchanged TOAST value), deletes and now and then a
// truncate, each row's changes in time order.
func Generate(rng *rand.Rand, o Options) []Event {
	if o.Partitions == 0 {
		o.Partitions = 3
	}
	if o.Keys == 0 {
		o.Keys = 4
	}
	if o.Start == 0 {
		o.Start = 1000
	}
	if o.Step == 0 {
		o.Step = 3
	}
	ooo := o.OutOfOrderness
	var out []Event
	clock := o.Start
	quiet := map[timejoin.Source]int{} // events left before a quiet partition speaks again
	live := map[string]string{}
	for len(out) < o.N {
		clock += rng.Int64N(o.Step + 1)
		side := timejoin.SideLeft
		if rng.IntN(2) == 0 {
			side = timejoin.SideRight
		}
		src := timejoin.Source{Side: side, Partition: int32(rng.IntN(o.Partitions))}
		if quiet[src] > 0 {
			quiet[src]--
			continue
		}
		if rng.IntN(60) == 0 && !o.Steady {
			quiet[src] = 20 + rng.IntN(40)
		}
		tm := clock - rng.Int64N(ooo+1)
		switch rng.IntN(25) {
		case 0:
			if !o.Steady {
				tm = clock - ooo - 5 - rng.Int64N(30) // behind the watermark
			}
		case 1:
			if len(out) > 0 { // a redelivery
				out = append(out, out[len(out)-1-rng.IntN(min(len(out), 10))])
				continue
			}
		}
		key := strconv.Itoa(rng.IntN(o.Keys))
		if o.KeyIsPK {
			key = fmt.Sprintf("u%d", rng.IntN(o.Partitions)*10+rng.IntN(4))
		}
		if rng.IntN(30) == 0 {
			key = ""
		}
		name := "l"
		if side == timejoin.SideRight {
			name = "r"
		}
		r := Event{Side: side, Partition: src.Partition, Op: timejoin.Insert, Time: tm, Key: key,
			PK: fmt.Sprintf("%s%d", name, len(out)), Val: fmt.Sprintf("%s%d", name, len(out))}
		if o.Kind == timejoin.Temporal && side == timejoin.SideRight {
			// A row lives in one partition; its changes come in time order.
			pk := fmt.Sprintf("u%d", int(src.Partition)*10+rng.IntN(4))
			r.PK, r.Time = pk, clock
			switch x := rng.IntN(10); {
			case x == 0 && live[pk] != "":
				r.Op, r.Key, r.Val = timejoin.Delete, "", ""
				delete(live, pk)
			case x == 1 && rng.IntN(10) == 0 && !o.KeyIsPK && !o.NoTruncate:
				r.Op, r.Key, r.Val = timejoin.Truncate, "", ""
				clear(live)
			case x == 2 && live[pk] != "":
				r.Val = "?" // TOAST: keeps the stored value
				r.Key = live[pk]
			default:
				if o.KeyIsPK {
					r.Key = pk
				}
				if r.Key == "" {
					r.Key = "0"
				}
				live[pk] = r.Key
			}
		}
		out = append(out, r)
	}
	if o.Scale > 1 {
		for i := range out {
			out[i].Time *= o.Scale
		}
	}
	return out
}

// Text renders an output row of s (values in s.Out order) as Expected
// does: each column's text and a comma, NULL as null, window start and
// end as ws<µs>, we<µs>.
func Text(s *timejoin.Spec, vals []row.Value) string {
	var b strings.Builder
	for i, col := range s.Out {
		v := vals[i]
		switch {
		case v.Kind == row.KindNull:
			b.WriteString("null,")
		case col.From == timejoin.FromWindowStart:
			fmt.Fprintf(&b, "ws%d,", v.Int)
		case col.From == timejoin.FromWindowEnd:
			fmt.Fprintf(&b, "we%d,", v.Int)
		default:
			b.WriteString(v.Text() + ",")
		}
	}
	return b.String()
}

// WithFlush appends to events one flush event in every partition of
// both sides (partitions 0..partitions-1), at a time past every event by
// more than margin, with keys of their own (they never join). When a
// driver has seen them all, its watermark is that time minus
// out_of_orderness whatever idleness did on the way (every partition's
// largest time is the same), so every row of events is due if margin is
// more than the bounds, windows, out_of_orderness and lateness; the flush
// rows themselves never are. It returns the events and the flush time.
func WithFlush(events []Event, partitions int32, margin int64) ([]Event, int64) {
	var at int64
	for _, e := range events {
		at = max(at, e.Time)
	}
	at += margin
	for _, side := range []Side{timejoin.SideLeft, timejoin.SideRight} {
		for p := int32(0); p < partitions; p++ {
			id := fmt.Sprintf("flush-%s%d", side, p)
			events = append(events, Event{Side: side, Partition: p, Op: timejoin.Insert, Time: at, Key: id, PK: id, Val: "flush"})
		}
	}
	return events, at
}

// RandomSpec returns a spec of kind and jt as the oracles draw them: in
// whole milliseconds (µs), out_of_orderness 0-4 ms, allowed_lateness 0-2
// ms, idle_timeout one of idle (µs), interval bounds within ±4 ms and up to
// 9 ms apart, windows of 1-10 ms sliding by a whole part of them; the
// columns left.v and right.v (and the window's start and end), as Config
// selects them.
func RandomSpec(rng *rand.Rand, kind timejoin.Kind, jt timejoin.JoinType, idle []int64) *timejoin.Spec {
	const ms = 1000
	s := &timejoin.Spec{Kind: kind, Join: jt, LeftWidth: 1, RightWidth: 1,
		Out:            []timejoin.Column{{From: timejoin.FromLeft}, {From: timejoin.FromRight}},
		OutOfOrderness: rng.Int64N(5) * ms, AllowedLateness: rng.Int64N(3) * ms, IdleTimeout: idle[rng.IntN(len(idle))]}
	switch kind {
	case timejoin.Interval:
		s.Lower = (rng.Int64N(9) - 4) * ms
		s.Upper = s.Lower + rng.Int64N(10)*ms
	case timejoin.Window:
		s.Size = (1 + rng.Int64N(10)) * ms
		s.Slide = (1 + rng.Int64N(s.Size/ms)) * ms
		s.Out = append(s.Out, timejoin.Column{From: timejoin.FromWindowStart}, timejoin.Column{From: timejoin.FromWindowEnd})
	}
	return s
}

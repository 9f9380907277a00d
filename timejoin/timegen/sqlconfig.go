package timegen

import (
	"fmt"
	"strings"
	"time"

	"github.com/cdcjoin/cdcjoin/timejoin"
)

// SQLConfig returns the SQL form (tables with time, query, watermark) of
// Config's job for an interval spec: the same topics, types, bounds,
// watermark settings and select. on is the ON condition with %[1]s and
// %[2]s standing for "+ INTERVAL …" / "- INTERVAL …" of the lower and upper
// bound (l is the left table's alias, r the right's); empty: l.k = r.k AND
// r.t BETWEEN l.t %[1]s AND l.t %[2]s. The join type comes from the spec.
func SQLConfig(o ConfigOptions, on string) string {
	s := o.Spec
	iv := func(us int64) string {
		if us < 0 {
			return fmt.Sprintf("- INTERVAL '%d microseconds'", -us)
		}
		return fmt.Sprintf("+ INTERVAL '%d' SECOND + INTERVAL '%d microseconds'", us/1e6, us%1e6)
	}
	d := func(us int64) string { return (time.Duration(us) * time.Microsecond).String() }
	if on == "" {
		on = "l.k = r.k AND r.t BETWEEN l.t %[1]s AND l.t %[2]s"
	}
	join := map[timejoin.JoinType]string{timejoin.Inner: "JOIN", timejoin.LeftOuter: "LEFT JOIN",
		timejoin.RightOuter: "RIGHT OUTER JOIN", timejoin.FullOuter: "FULL OUTER JOIN"}[s.Join]
	leftFmt := ""
	if o.PlainLeft {
		leftFmt = ", format: json"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\ntables:\n", o.Name)
	fmt.Fprintf(&b, "  lt: {topic: %s, time: t, types: {t: timestamp}%s}\n", LeftTopic, leftFmt)
	fmt.Fprintf(&b, "  rt: {topic: %s, key: k, time: t, types: {t: timestamp}}\n", RightTopic)
	fmt.Fprintf(&b, "query: |\n  SELECT l.v AS lv, r.v AS rv\n  FROM lt l %s rt r\n    ON %s\n", join, fmt.Sprintf(on, iv(s.Lower), iv(s.Upper)))
	fmt.Fprintf(&b, "watermark: {out_of_orderness: %s, idle_timeout: %s, allowed_lateness: %s}\n", d(s.OutOfOrderness), d(s.IdleTimeout), d(s.AllowedLateness))
	fmt.Fprintf(&b, "state: {dir: %q}\n", o.StateDir)
	if o.DLQ {
		fmt.Fprintf(&b, "errors: {policy: dlq, dlq_topic: %s.dlq}\n", o.Name)
	}
	b.WriteString(o.Extra)
	return b.String()
}

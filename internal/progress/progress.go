// Package progress explains a run-until-converged test that timed out:
// which keyed partitions the rows still missing (or extra, or different)
// belong to, so that the failure names where the pipeline stopped. Tests
// print it next to the runtime's Status (what each worker waits on).
package progress

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
)

// Counts are a partition's differences between the join and the sink.
type Counts struct{ Missing, Extra, Different int }

// ByPartition compares want with got and counts the differences per keyed
// partition of the rows' parent keys (partitions: the keyed topic's count).
// Integer parent keys are encoded as the job's integer keys, others as
// strings.
func ByPartition(want, got []cdcgen.JoinedRow, partitions int32) map[int32]*Counts {
	out := map[int32]*Counts{}
	at := func(k cdcgen.RowKey) *Counts {
		p := Partition(k.Parent, partitions)
		if out[p] == nil {
			out[p] = &Counts{}
		}
		return out[p]
	}
	cdcgen.EachDifference(want, got, func(w, g *cdcgen.JoinedRow) {
		switch {
		case g == nil:
			at(w.Key).Missing++
		case w == nil:
			at(g.Key).Extra++
		default:
			at(w.Key).Different++
		}
	})
	return out
}

// Partition is the keyed partition of a parent key's text.
func Partition(parent string, partitions int32) int32 {
	v := row.String(parent)
	if n, err := strconv.ParseInt(parent, 10, 64); err == nil {
		v = row.Int(n)
	}
	return keyedlog.Partition(row.AppendKey(nil, []row.Value{v}), partitions)
}

// Report renders ByPartition, one line per partition with a difference
// ("" when none).
func Report(want, got []cdcgen.JoinedRow, partitions int32) string {
	m := ByPartition(want, got, partitions)
	ps := make([]int32, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	var b strings.Builder
	for _, p := range ps {
		c := m[p]
		fmt.Fprintf(&b, "keyed partition %d: %d rows missing, %d extra, %d different\n", p, c.Missing, c.Extra, c.Different)
	}
	return b.String()
}

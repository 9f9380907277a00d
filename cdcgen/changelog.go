package cdcgen

import (
	"fmt"
	"slices"
	"strings"
)

// VersionedCollapsingMergeTree models a ClickHouse
// VersionedCollapsingMergeTree(sign, version) changelog table once merged:
// a +1 row and a -1 row with the same row key and version cancel, whatever
// order they arrived in; what is left per row key is the live row.
//
// Duplicates: a row (key, version, sign, values) inserted again is ignored,
// as ClickHouse's insert deduplication does for a replayed batch; the model
// checks the join's cancel logic (every -1 names the version and values a
// +1 was emitted with), not the sink's exactly-once delivery. Not safe for
// concurrent use.
type VersionedCollapsingMergeTree struct {
	rows map[vcmtID]*vcmtRow
	seen map[string]bool
	// Duplicates counts re-inserted identical rows (ignored).
	Duplicates int
}

type vcmtID struct {
	key     RowKey
	version uint64
}

type vcmtRow struct {
	sum    int
	values []string
}

// NewVersionedCollapsingMergeTree returns an empty table.
func NewVersionedCollapsingMergeTree() *VersionedCollapsingMergeTree {
	return &VersionedCollapsingMergeTree{rows: map[vcmtID]*vcmtRow{}, seen: map[string]bool{}}
}

// Apply inserts one row with sign +1 or -1. values is copied.
func (m *VersionedCollapsingMergeTree) Apply(key RowKey, version uint64, sign int, values []string) {
	dup := fmt.Sprintf("%s\x00%d\x00%d\x00%s", key, version, sign, strings.Join(values, "\x00"))
	if m.seen[dup] {
		m.Duplicates++
		return
	}
	m.seen[dup] = true
	id := vcmtID{key, version}
	r := m.rows[id]
	if r == nil {
		r = &vcmtRow{}
		m.rows[id] = r
	}
	r.sum += sign
	if sign > 0 || r.values == nil {
		r.values = slices.Clone(values)
	}
}

// Live returns the rows left after collapsing, sorted, or an error naming
// a (row key, version) whose signs do not add up to 0 or +1 (a cancel of a
// row never emitted, or a row emitted twice), or a row key with more than
// one live version.
func (m *VersionedCollapsingMergeTree) Live() ([]JoinedRow, error) {
	var rows []JoinedRow
	live := map[RowKey]uint64{}
	for id, r := range m.rows {
		switch r.sum {
		case 0:
		case 1:
			if v, ok := live[id.key]; ok {
				return nil, fmt.Errorf("cdcjoin: cdcgen: changelog: row %s is live at versions %d and %d", id.key, v, id.version)
			}
			live[id.key] = id.version
			rows = append(rows, JoinedRow{Key: id.key, Values: slices.Clone(r.values)})
		default:
			return nil, fmt.Errorf("cdcjoin: cdcgen: changelog: row %s version %d has sign sum %d", id.key, id.version, r.sum)
		}
	}
	SortRows(rows)
	return rows, nil
}

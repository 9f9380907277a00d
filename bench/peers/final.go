package peers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
)

// Diff is the difference between two final joins (multisets of rows).
type Diff struct {
	// RowsA and RowsB are the row counts of the two sides.
	RowsA, RowsB int
	// OnlyA and OnlyB count rows missing from the other side (a row present
	// twice on one side and once on the other counts once).
	OnlyA, OnlyB int
	// Examples holds up to 5 differing rows, prefixed "-" (only in A) or
	// "+" (only in B).
	Examples []string
}

// Equal reports whether the two sides held the same rows.
func (d Diff) Equal() bool { return d.OnlyA == 0 && d.OnlyB == 0 }

// String summarizes d.
func (d Diff) String() string {
	if d.Equal() {
		return fmt.Sprintf("%d rows, equal", d.RowsA)
	}
	return fmt.Sprintf("%d vs %d rows: %d only in the first, %d only in the second; e.g. %v", d.RowsA, d.RowsB, d.OnlyA, d.OnlyB, d.Examples)
}

// CompareFinal compares two files of final join rows, one JSON object per
// line (`cdcjoin replay --final`, or a peer's collecting sink), as
// multisets: member order, whitespace, escapes and line order do not
// matter; numbers compare by their literal text.
func CompareFinal(a, b string) (Diff, error) {
	var d Diff
	ra, err := readRows(a)
	if err != nil {
		return d, err
	}
	rb, err := readRows(b)
	if err != nil {
		return d, err
	}
	d.RowsA, d.RowsB = len(ra), len(rb)
	count := map[string]int{}
	for _, r := range ra {
		count[r]++
	}
	for _, r := range rb {
		count[r]--
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		n := count[k]
		switch {
		case n > 0:
			d.OnlyA += n
		case n < 0:
			d.OnlyB -= n
		default:
			continue
		}
		if len(d.Examples) < 5 {
			sign := "-"
			if n < 0 {
				sign = "+"
			}
			d.Examples = append(d.Examples, sign+k)
		}
	}
	return d, nil
}

// readRows reads path's JSON objects in a canonical form (encoding/json's:
// sorted members, its escapes).
func readRows(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: peers: %w", err)
	}
	defer f.Close()
	var rows []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("cdcjoin: peers: %s line %d: %w", path, n, err)
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("cdcjoin: peers: %s line %d: %w", path, n, err)
		}
		rows = append(rows, string(b))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cdcjoin: peers: %s: %w", path, err)
	}
	return rows, nil
}

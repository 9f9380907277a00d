package testkit

import (
	"fmt"
	"slices"
)

// StateDiff describes the first key (in key order) at which two dumps of a
// state differ, the row-by-row path's (want) and the bulk path's (got),
// or "" when they are equal.
func StateDiff(want, got map[string]string) string {
	keys := make([]string, 0, len(want)+len(got))
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		w, wok := want[k]
		g, gok := got[k]
		if w != g || wok != gok {
			return fmt.Sprintf("%d entries, want %d; key %q: row by row %q (%v), bulk %q (%v)", len(got), len(want), k, w, wok, g, gok)
		}
	}
	return ""
}

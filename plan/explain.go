package plan

import (
	"fmt"
	"strings"

	"github.com/cdcjoin/cdcjoin/expr"
)

// TableInfo is what Explain shows of a table besides the plan: its topic.
type TableInfo struct{ Topic string }

// Explain renders p for humans: the inputs, every stage with its key,
// kind, conditions and what it stores, and the output. info (by table
// name; may be nil) adds the topics.
func Explain(p *Plan, info map[string]TableInfo) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("%d stage(s); output row key: (%s)", len(p.Stages), names(p, p.Last().Out, p.RowKey))
	if p.Materialize {
		w("; through a materializer keyed by it")
	}
	w("\n\ninputs (one index per table: primary key → its last projected row):\n")
	for _, t := range p.Tables {
		w("  %s = %s", t.Alias, t.Name)
		if in, ok := info[t.Name]; ok && in.Topic != "" {
			w(" (%s)", in.Topic)
		}
		w(", key (%s), columns (%s)\n", strings.Join(t.Key, ", "), strings.Join(t.Columns, ", "))
	}
	for i := range p.Stages {
		st := &p.Stages[i]
		w("\nstage %d: %s JOIN", st.N, st.Kind)
		if st.Kind != st.Written {
			w(" (written %s; WHERE rejects its padded rows)", st.Written)
		}
		var keys []string
		for j := range st.L.Key {
			keys = append(keys, st.L.Layout[st.L.Key[j]].name(p)+" = "+st.R.Layout[st.R.Key[j]].name(p))
		}
		w(" on %s\n", strings.Join(keys, " AND "))
		for _, sd := range []struct {
			name string
			s    *Side
			pad  bool
		}{{"left ", &st.L, st.Kind == Left || st.Kind == Full}, {"right", &st.R, st.Kind == Right || st.Kind == Full}} {
			src := p.Tables[sd.s.Table].Alias
			if sd.s.Stage > 0 {
				src = fmt.Sprintf("stage %d", sd.s.Stage)
			}
			w("  %s  %s, keyed by (%s)", sd.name, src, names(p, sd.s.Layout, sd.s.Key))
			if sd.pad {
				w(", preserved (padded when unmatched)")
			}
			w("\n")
			if sd.s.Filter != nil {
				w("         filter: %s\n", showExpr(p, sd.s.Filter, sd.s.Layout))
			}
			if sd.s.Match != nil {
				w("         matches only when: %s\n", showExpr(p, sd.s.Match, sd.s.Layout))
			}
			w("         stores (%s)\n", names(p, sd.s.Layout, seq(len(sd.s.Layout))))
		}
		if st.Residual != nil {
			w("  then filter: %s\n", showExpr(p, st.Residual, st.Out))
		}
		w("  emits (%s)", names(p, st.Out, seq(len(st.Out))))
		var tags []string
		if st.TagJoined {
			tags = append(tags, "joined")
		}
		if st.TagPadL {
			tags = append(tags, "left-padded")
		}
		if st.TagPadR {
			tags = append(tags, "right-padded")
		}
		if len(tags) > 0 {
			w("; %s rows can move between join keys (tagged with their key, merged by the materializer)", strings.Join(tags, " and "))
		}
		w("\n  state: s|%d|r|J|side|row identity → flags, version, row", st.N)
		if st.Kind != Inner {
			w("; s|%d|p|J|side → version (pad epochs)", st.N)
		}
		w("\n")
	}
	if p.Materialize {
		w("\nmaterializer: keyed by the output row key; state m|i|row key|incarnation → row, m|c|row key → version, row\n")
	}
	w("\nselect:")
	for i, o := range p.Select {
		if i > 0 {
			w(",")
		}
		w(" %s AS %s", showExpr(p, o.Expr, p.Last().Out), o.Name)
	}
	w("\n")
	return b.String()
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// showExpr renders a bound expression with its columns' names.
func showExpr(p *Plan, e expr.Expr, _ []Slot) string { return e.String() }

// KeyColumns describes the output row key's two halves as the sinks store
// them: ParentKey (ClickHouse _pk) is the first FROM item's key, ChildKey
// (_ck) the other items' keys in FROM order, NULL for a padded item.
func KeyColumns(p *Plan) (pk, ck string) {
	var parts []string
	for i, t := range p.Tables[1:] {
		parts = append(parts, fmt.Sprintf("%s (%s.%s)", p.Tables[i+1].Name, t.Alias, strings.Join(t.Key, ", "+t.Alias+".")))
	}
	t0 := p.Tables[0]
	return fmt.Sprintf("%s (%s.%s)", t0.Name, t0.Alias, strings.Join(t0.Key, ", "+t0.Alias+".")), strings.Join(parts, ", ")
}

package skew_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
)

// Shared test helpers: a join spec, a generator of keyed inputs (what the
// keyer makes of a random history over a few parents, one of them hot), and
// sink models that check what the changes add up to.

func testSpec(t testing.TB, left bool) *keyed.Spec {
	return testkit.Spec(t, left, []string{"name"}, []string{"domain"})
}

func key(v int64) []byte { return row.AppendKey(nil, []row.Value{row.Int(v)}) }

// apply steps op with the input in at version ver, emitting into emit.
func apply(op interface {
	Step(keyed.State, *keyedlog.Msg, keyedlog.Out) error
}, st keyed.State, in *keyed.Input, ver uint64, emit keyed.Emit) error {
	m := keyedlog.Msg{Kind: keyedlog.KindInput, In: *in, Version: ver}
	return op.Step(st, &m, keyedlog.Out{Emit: emit})
}

// inputGen makes keyed inputs like the keyer would: a child that changes
// parent is deleted under the old one first.
type inputGen struct {
	rng      *rand.Rand
	parents  int
	children int
	hot      float64 // probability that a child's parent is parent 1
	where    map[int64]int64
	truncate float64
}

func (g *inputGen) next() []keyed.Input {
	r := g.rng.Float64()
	pid := func() int64 {
		if g.rng.Float64() < g.hot {
			return 1
		}
		return 1 + g.rng.Int64N(int64(g.parents))
	}
	switch {
	case r < g.truncate:
		side := row.Parent
		if g.rng.IntN(2) == 0 {
			side = row.Child
			clear(g.where)
		}
		return []keyed.Input{{Kind: keyed.Truncate, Side: side}}
	case r < 0.25:
		p := pid()
		return []keyed.Input{{Kind: keyed.ParentUpsert, Side: row.Parent, JoinKey: key(p),
			Row: []row.Value{row.Int(p), row.String(fmt.Sprintf("n%d", g.rng.IntN(4)))}}}
	case r < 0.30:
		return []keyed.Input{{Kind: keyed.ParentDelete, Side: row.Parent, JoinKey: key(pid())}}
	case r < 0.85:
		c := 1 + g.rng.Int64N(int64(g.children))
		p := pid()
		var out []keyed.Input
		if old, ok := g.where[c]; ok && old != p {
			out = append(out, keyed.Input{Kind: keyed.ChildDelete, Side: row.Child, JoinKey: key(old), ChildKey: key(c)})
		}
		g.where[c] = p
		return append(out, keyed.Input{Kind: keyed.ChildUpsert, Side: row.Child, JoinKey: key(p), ChildKey: key(c),
			Row: []row.Value{row.Int(c), row.Int(p), row.String(fmt.Sprintf("d%d", g.rng.IntN(3)))}})
	default:
		c := 1 + g.rng.Int64N(int64(g.children))
		old, ok := g.where[c]
		if !ok {
			return nil
		}
		delete(g.where, c)
		return []keyed.Input{{Kind: keyed.ChildDelete, Side: row.Child, JoinKey: key(old), ChildKey: key(c)}}
	}
}

// history is a list of inputs with their versions.
type history struct {
	in  []keyed.Input
	ver []uint64
}

func genHistory(seed uint64, n, parents, children int, hot, truncate float64) history {
	g := &inputGen{rng: rand.New(rand.NewPCG(seed, 1)), parents: parents, children: children, hot: hot,
		where: map[int64]int64{}, truncate: truncate}
	var h history
	v := uint64(100)
	for len(h.in) < n {
		for _, in := range g.next() {
			v++
			h.in = append(h.in, in)
			h.ver = append(h.ver, v)
		}
	}
	return h
}

func rowKeyOf(c *row.Change) string {
	k := c.ParentKey[0].Text() + "|"
	if c.ChildKey == nil {
		return k + "NULL"
	}
	return k + c.ChildKey[0].Text()
}

func valsText(vs []row.Value) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		if v.IsNull() {
			parts[i] = "NULL"
		} else {
			parts[i] = v.Text()
		}
	}
	return strings.Join(parts, ",")
}

func changeText(c *row.Change) string {
	s := fmt.Sprintf("%s v%d [%s]", c.Op, c.Version, valsText(c.Values))
	if c.Prev != nil || c.Op == row.Retract {
		s += fmt.Sprintf(" prev=[%s]@%d", valsText(c.Prev), c.PrevVersion)
	}
	return s
}

// changes records, per row key, the distinct changes in the order first
// seen (re-emissions after a crash are identical and not repeated), and
// the live rows of a ReplacingMergeTree and of a VersionedCollapsingMergeTree
// (set semantics: an exact re-emission inserts nothing).
type changes struct {
	seq   map[string][]string
	seen  map[string]bool
	rmt   map[string]rmtRow
	vcmt  map[string]int // rowkey|version|values → sign sum
	vcmtV map[string]string
	err   error
}

type rmtRow struct {
	v    uint64
	del  bool
	vals string
}

func newChanges() *changes {
	return &changes{seq: map[string][]string{}, seen: map[string]bool{}, rmt: map[string]rmtRow{},
		vcmt: map[string]int{}, vcmtV: map[string]string{}}
}

func (m *changes) emit(c *row.Change) error {
	k := rowKeyOf(c)
	txt := changeText(c)
	if m.seen[k+" "+txt] {
		return nil
	}
	m.seen[k+" "+txt] = true
	if s := m.seq[k]; len(s) > 0 && m.err == nil {
		var last uint64
		fmt.Sscanf(strings.Fields(s[len(s)-1])[1], "v%d", &last)
		if c.Version <= last {
			m.err = fmt.Errorf("row %s: %s after v%d", k, txt, last)
		}
	}
	m.seq[k] = append(m.seq[k], txt)
	if old, ok := m.rmt[k]; !ok || c.Version >= old.v {
		m.rmt[k] = rmtRow{c.Version, c.Op == row.Retract, valsText(c.Values)}
	}
	sign := func(vals []row.Value, v uint64, d int) {
		id := fmt.Sprintf("%s|%d|%s", k, v, valsText(vals))
		m.vcmt[id] += d
		m.vcmtV[id] = k + " " + valsText(vals)
	}
	switch {
	case c.Op == row.Retract:
		sign(c.Values, c.PrevVersion, -1)
	case c.Prev != nil:
		sign(c.Prev, c.PrevVersion, -1)
		sign(c.Values, c.Version, +1)
	default:
		sign(c.Values, c.Version, +1)
	}
	return nil
}

func (m *changes) liveRMT() []string {
	var out []string
	for k, r := range m.rmt {
		if !r.del {
			out = append(out, k+" "+r.vals)
		}
	}
	sort.Strings(out)
	return out
}

func (m *changes) liveVCMT() ([]string, error) {
	var out []string
	for id, n := range m.vcmt {
		switch n {
		case 0:
		case 1:
			out = append(out, m.vcmtV[id])
		default:
			return nil, fmt.Errorf("changelog row %s has sign sum %d", id, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

func materialize(t testing.TB, st keyed.State, spec *keyed.Spec) []string {
	t.Helper()
	var out []string
	err := keyed.Materialize(st, spec, func(pk, ck, vals []row.Value) error {
		k := pk[0].Text() + "|"
		if ck == nil {
			k += "NULL"
		} else {
			k += ck[0].Text()
		}
		out = append(out, k+" "+valsText(vals))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func sortStrings(s []string) { sort.Strings(s) }

func diffLists(want, got []string) string {
	if slices.Equal(want, got) {
		return ""
	}
	var b strings.Builder
	w, g := map[string]bool{}, map[string]bool{}
	for _, s := range want {
		w[s] = true
	}
	for _, s := range got {
		g[s] = true
	}
	n := 0
	for _, s := range want {
		if !g[s] && n < 10 {
			fmt.Fprintf(&b, "-%s\n", s)
			n++
		}
	}
	for _, s := range got {
		if !w[s] && n < 20 {
			fmt.Fprintf(&b, "+%s\n", s)
			n++
		}
	}
	if b.Len() == 0 {
		return fmt.Sprintf("same rows, different multiplicity (%d vs %d)", len(want), len(got))
	}
	return b.String()
}

func cloneChange(c *row.Change) row.Change {
	cp := *c
	cp.ParentKey = append([]row.Value(nil), c.ParentKey...)
	if c.ChildKey != nil {
		cp.ChildKey = append([]row.Value(nil), c.ChildKey...)
	}
	cp.Values = append([]row.Value(nil), c.Values...)
	if c.Prev != nil {
		cp.Prev = append([]row.Value(nil), c.Prev...)
	}
	return cp
}

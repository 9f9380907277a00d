package stage

import (
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/expr"
	"github.com/cdcjoin/cdcjoin/plan"
	"github.com/cdcjoin/cdcjoin/query"
	"github.com/cdcjoin/cdcjoin/row"
)

// The exhaustive tests run plans on MemKV over every interleaving of small
// per-table histories (each table's own order kept, as a Kafka partition
// keeps it), for every join kind, with conditions in ON and WHERE, both
// REPLICA IDENTITY modes and redelivered suffixes. After every event they
// check, in the style of keyed's exhaustive tests:
//   - the upsert sink (highest version wins, retractions delete) holds
//     exactly the query's result over the tables as consumed so far,
//     computed by a reference evaluator of the logical query (nested
//     loops, PostgreSQL's definitions of the join kinds);
//   - the changelog sink is exact: every retraction names the live row's
//     values and version, every insert finds no live row, every update
//     names the live row as its previous values;
//   - per output row key, versions strictly increase;
//   - the pipeline's Final equals the sink.

// schema: every table's columns, key first.
var schema = map[string][]string{
	"users":   {"id", "name"},
	"domains": {"id", "user_id", "name"},
	"records": {"id", "domain_id", "rtype"},
}

func testTables() map[string]*query.Table {
	return map[string]*query.Table{
		"users": {Key: []string{"id"}}, "domains": {Key: []string{"id"}}, "records": {Key: []string{"id"}},
	}
}

// op is one change of a source table.
type op struct {
	kind   byte // 'c', 'u', 'd', 't'
	vals   []row.Value
	toast  []int // columns sent as placeholders (updates)
	oldKey int64 // 'u': an in-place key change from oldKey
}

var (
	i64 = row.Int
	str = row.String
	nul = row.Null()
)

func ins(v ...row.Value) op { return op{kind: 'c', vals: v} }
func upd(v ...row.Value) op { return op{kind: 'u', vals: v} }
func del(k int64) op        { return op{kind: 'd', vals: []row.Value{i64(k)}} }
func trunc() op             { return op{kind: 't'} }

// Scripts per table; each covers hard cases of NOTES.md section 3.
var userScripts = map[string][]op{
	"create":          {ins(i64(1), str("Egor"))},
	"rename-x":        {ins(i64(1), str("Egor")), upd(i64(1), str("x"))},
	"delete-recreate": {ins(i64(1), str("Egor")), del(1), ins(i64(1), str("x"))},
	"two":             {ins(i64(2), str("Olga")), ins(i64(1), str("x")), upd(i64(2), str("Olga2"))},
	"truncate":        {ins(i64(1), str("Egor")), trunc(), ins(i64(2), str("Olga"))},
	"pk-inline":       {ins(i64(1), str("Egor")), {kind: 'u', vals: []row.Value{i64(2), str("Egor")}, oldKey: 1}},
	"toast":           {ins(i64(1), str("x")), {kind: 'u', vals: []row.Value{i64(1), str("x")}, toast: []int{1}}, upd(i64(1), str("Vera"))},
	"null-name":       {ins(i64(1), nul), upd(i64(1), str("Egor"))},
}

var domainScripts = map[string][]op{
	"create":     {ins(i64(10), i64(1), str("a.com"))},
	"update-x":   {ins(i64(10), i64(1), str("a.com")), upd(i64(10), i64(1), str("x"))},
	"move":       {ins(i64(10), i64(1), str("a.com")), upd(i64(10), i64(2), str("a.com"))},
	"move-toast": {ins(i64(10), i64(1), str("a.com")), {kind: 'u', vals: []row.Value{i64(10), i64(2), str("a.com")}, toast: []int{2}}},
	"delete":     {ins(i64(10), i64(1), str("a.com")), ins(i64(11), i64(1), str("c.com")), del(10)},
	"null-fk":    {ins(i64(10), i64(1), str("a.com")), upd(i64(10), nul, str("a.com")), upd(i64(10), i64(1), str("d.com"))},
	"truncate":   {ins(i64(10), i64(2), str("a.com")), trunc(), ins(i64(11), i64(1), str("c.com"))},
	"pk-split":   {ins(i64(10), i64(1), str("a.com")), del(10), ins(i64(12), i64(1), str("a.com"))},
}

var recordScripts = map[string][]op{
	"create":  {ins(i64(100), i64(10), str("A"))},
	"txt":     {ins(i64(100), i64(10), str("TXT")), upd(i64(100), i64(10), str("A"))},
	"move":    {ins(i64(100), i64(10), str("A")), upd(i64(100), i64(11), str("A")), del(100)},
	"two":     {ins(i64(100), i64(10), str("A")), ins(i64(101), i64(12), nul)},
	"null-fk": {ins(i64(100), nul, str("A")), upd(i64(100), i64(10), str("MX"))},
}

// run is one table's history in a test.
type tableRun struct {
	name string // schema table
	item int    // FROM item
	ops  []op
}

// event builds the Debezium event of o projected to cols, given the
// table before it; full = REPLICA IDENTITY FULL.
func event(o op, table map[int64][]row.Value, cols, all []string, full bool) *debezium.Event {
	ev := &debezium.Event{Op: debezium.Op(o.kind)}
	project := func(vals []row.Value) []row.Value {
		out := make([]row.Value, len(cols))
		for i, c := range cols {
			if j := slices.Index(all, c); j >= 0 && j < len(vals) {
				out[i] = vals[j]
			}
		}
		return out
	}
	keyOnly := func(k int64) []row.Value {
		v := make([]row.Value, len(all))
		v[0] = i64(k)
		return project(v)
	}
	switch o.kind {
	case 'c', 'u':
		after := slices.Clone(o.vals)
		for _, c := range o.toast {
			after[c] = row.Unavailable()
		}
		ev.After = debezium.Row{Present: true, Values: project(after)}
		ev.Key = debezium.Row{Present: true, Values: keyOnly(o.vals[0].Int)}
		old := o.vals[0].Int
		if o.oldKey != 0 {
			old = o.oldKey
		}
		switch {
		case o.kind == 'u' && full && table[old] != nil:
			ev.Before = debezium.Row{Present: true, Values: project(table[old])}
		case o.kind == 'u' && o.oldKey != 0:
			ev.Before = debezium.Row{Present: true, Values: keyOnly(o.oldKey)}
		}
	case 'd':
		k := o.vals[0].Int
		ev.Key = debezium.Row{Present: true, Values: keyOnly(k)}
		if full && table[k] != nil {
			ev.Before = debezium.Row{Present: true, Values: project(table[k])}
		} else {
			ev.Before = debezium.Row{Present: true, Values: keyOnly(k)}
		}
	}
	return ev
}

func applyTable(table map[int64][]row.Value, o op) {
	switch o.kind {
	case 'c', 'u':
		if o.oldKey != 0 {
			delete(table, o.oldKey)
		}
		vals := slices.Clone(o.vals)
		for _, c := range o.toast {
			vals[c] = table[o.vals[0].Int][c]
		}
		table[o.vals[0].Int] = vals
	case 'd':
		delete(table, o.vals[0].Int)
	case 't':
		clear(table)
	}
}

// reference evaluates q over the tables (FROM item → its table's rows in
// schema order) the way PostgreSQL defines the join kinds: the result
// keyed by row key text, each row's select values as text.
func reference(t testing.TB, q *query.Query, p *plan.Plan, tables []map[int64][]row.Value, names []string) map[string]string {
	// Global layout: every item's projected columns.
	offset := make([]int, len(q.From)+1)
	for i := range q.From {
		offset[i+1] = offset[i] + len(p.Tables[i].Columns)
	}
	width := offset[len(q.From)]
	bind := func(e expr.Expr) expr.Expr {
		b, err := expr.Bind(e, func(c *expr.Col) (int, error) {
			i := slices.Index(p.Tables[c.Table].Columns, c.Column)
			if i < 0 {
				return 0, fmt.Errorf("no column %s", c.Name)
			}
			return offset[c.Table] + i, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	rowsOf := func(item int) [][]row.Value {
		all := schema[q.From[item].Table]
		var out [][]row.Value
		var keys []int64
		for k := range tables[item] {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			vals := tables[item][k]
			r := make([]row.Value, len(p.Tables[item].Columns))
			for i, c := range p.Tables[item].Columns {
				r[i] = vals[slices.Index(all, c)]
			}
			out = append(out, r)
		}
		return out
	}
	truth := func(conds []query.Cond, r []row.Value) bool {
		for _, c := range conds {
			ok, err := expr.IsTrue(bind(c.Expr), r)
			if err != nil {
				t.Fatalf("reference: %v", err)
			}
			if !ok {
				return false
			}
		}
		return true
	}
	var cur [][]row.Value
	for _, r := range rowsOf(0) {
		g := make([]row.Value, width)
		copy(g[offset[0]:], r)
		cur = append(cur, g)
	}
	for k := 1; k < len(q.From); k++ {
		j := q.Joins[k-1]
		right := rowsOf(k)
		matchedR := make([]bool, len(right))
		var next [][]row.Value
		for _, a := range cur {
			matched := false
			for bi, b := range right {
				g := slices.Clone(a)
				copy(g[offset[k]:], b)
				if truth(j.On, g) {
					next = append(next, g)
					matched, matchedR[bi] = true, true
				}
			}
			if !matched && (j.Kind == query.Left || j.Kind == query.Full) {
				next = append(next, slices.Clone(a))
			}
		}
		if j.Kind == query.Right || j.Kind == query.Full {
			for bi, b := range right {
				if !matchedR[bi] {
					g := make([]row.Value, width)
					copy(g[offset[k]:], b)
					next = append(next, g)
				}
			}
		}
		cur = next
	}
	out := map[string]string{}
	for _, g := range cur {
		if !truth(q.Where, g) {
			continue
		}
		var key []row.Value
		for i := range q.From {
			for ki := range p.Tables[i].Key {
				key = append(key, g[offset[i]+ki])
			}
		}
		w := p.KeyWidth[0]
		rk := rowKeyText(key[:w], key[w:])
		var vals []row.Value
		for _, s := range q.Select {
			v, err := bind(s.Expr).Eval(g)
			if err != nil {
				t.Fatalf("reference select: %v", err)
			}
			vals = append(vals, v)
		}
		if _, dup := out[rk]; dup {
			t.Fatalf("reference: row key %s twice", rk)
		}
		out[rk] = fmtVals(vals)
	}
	return out
}

func fmtVals(vals []row.Value) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		if v.IsNull() {
			parts[i] = "NULL"
		} else {
			parts[i] = v.Kind.String() + ":" + v.Text()
		}
	}
	return strings.Join(parts, ",")
}

func rowKeyText(pk, ck []row.Value) string { return fmtVals(pk) + "|" + fmtVals(ck) }

// sinks models both ClickHouse sink modes and checks every change.
type sinks struct {
	upsert  map[string]sinkRow
	live    map[string]sinkRow
	lastVer map[string]uint64
}

type sinkRow struct {
	ver     uint64
	vals    string
	deleted bool
}

func newSinks() *sinks {
	return &sinks{upsert: map[string]sinkRow{}, live: map[string]sinkRow{}, lastVer: map[string]uint64{}}
}

func (s *sinks) apply(c *row.Change) error {
	k := rowKeyText(c.ParentKey, c.ChildKey)
	if c.Version <= s.lastVer[k] {
		return fmt.Errorf("row %s: version %d after %d", k, c.Version, s.lastVer[k])
	}
	s.lastVer[k] = c.Version
	vals := fmtVals(c.Values)
	s.upsert[k] = sinkRow{c.Version, vals, c.Op == row.Retract}
	live, ok := s.live[k]
	switch {
	case c.Op == row.Retract:
		if !ok || live.ver != c.PrevVersion || live.vals != vals {
			return fmt.Errorf("row %s: retract of [%s]@%d, live row %v [%s]@%d", k, vals, c.PrevVersion, ok, live.vals, live.ver)
		}
		delete(s.live, k)
	case c.Prev != nil:
		if !ok || live.ver != c.PrevVersion || live.vals != fmtVals(c.Prev) {
			return fmt.Errorf("row %s: update of [%s]@%d, live row %v [%s]@%d", k, fmtVals(c.Prev), c.PrevVersion, ok, live.vals, live.ver)
		}
		s.live[k] = sinkRow{ver: c.Version, vals: vals}
	default:
		if ok {
			return fmt.Errorf("row %s: insert of [%s] over live row [%s]@%d", k, vals, live.vals, live.ver)
		}
		s.live[k] = sinkRow{ver: c.Version, vals: vals}
	}
	return nil
}

func (s *sinks) table() map[string]string {
	out := map[string]string{}
	for k, r := range s.upsert {
		if !r.deleted {
			out[k] = r.vals
		}
	}
	return out
}

func (s *sinks) changelog() map[string]string {
	out := map[string]string{}
	for k, r := range s.live {
		out[k] = r.vals
	}
	return out
}

func diff(want, got map[string]string) string {
	var lines []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			lines = append(lines, "missing "+k+" ["+v+"]")
		} else if g != v {
			lines = append(lines, "wrong   "+k+" ["+g+"] want ["+v+"]")
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			lines = append(lines, "extra   "+k+" ["+v+"]")
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// harness runs one interleaving of runs through a pipeline.
type harness struct {
	t     testing.TB
	q     *query.Query
	p     *plan.Plan
	pl    *Pipeline
	kv    *MemState
	sinks *sinks
	ver   uint64
	// tables: by FROM item (a self-joined table's items share a map).
	tables []map[int64][]row.Value
	// items: per schema table, its FROM items.
	items map[string][]int
	names []string
	// broken, if set, corrupts every change (the negative control).
	broken func(*row.Change)
}

func compileQuery(t testing.TB, sql string) (*query.Query, *plan.Plan) {
	q, errs := query.Parse(sql, testTables())
	if errs != nil {
		t.Fatalf("%s: %v", sql, errs)
	}
	p, errs := plan.Compile(q)
	if errs != nil {
		t.Fatalf("%s: %v", sql, errs)
	}
	return q, p
}

func newHarness(t testing.TB, q *query.Query, p *plan.Plan) *harness {
	h := &harness{t: t, q: q, p: p, pl: NewPipeline(p), kv: NewMemState(), sinks: newSinks(), items: map[string][]int{}, names: p.Names()}
	// Every input the Feeders mark absent is checked to be so.
	for _, j := range h.pl.joins {
		j.verifyAbsent = true
	}
	shared := map[string]map[int64][]row.Value{}
	for i, f := range q.From {
		if shared[f.Table] == nil {
			shared[f.Table] = map[int64][]row.Value{}
		}
		h.tables = append(h.tables, shared[f.Table])
		h.items[f.Table] = append(h.items[f.Table], i)
	}
	return h
}

// step applies one op of a schema table and checks everything.
func (h *harness) step(name string, o op, full, redelivered bool) error {
	items := h.items[name]
	table := h.tables[items[0]]
	for _, it := range items {
		ev := event(o, table, h.p.Tables[it].Columns, schema[name], full)
		err := h.pl.Apply(h.kv, it, ev, func() uint64 { h.ver++; return h.ver }, func(c *row.Change) error {
			if h.broken != nil {
				h.broken(c)
			}
			return h.sinks.apply(c)
		})
		if err != nil {
			return err
		}
	}
	if !redelivered {
		applyTable(table, o)
	}
	return nil
}

func (h *harness) check(redelivering bool) error {
	if redelivering {
		return nil // a re-sent suffix in progress matches no DB state
	}
	want := reference(h.t, h.q, h.p, h.tables, h.names)
	if d := diff(want, h.sinks.table()); d != "" {
		return fmt.Errorf("upsert sink:\n%s", d)
	}
	if d := diff(want, h.sinks.changelog()); d != "" {
		return fmt.Errorf("changelog sink:\n%s", d)
	}
	final := map[string]string{}
	err := h.pl.Final(h.kv, func(c *row.Change) error {
		final[rowKeyText(c.ParentKey, c.ChildKey)] = fmtVals(c.Values)
		return nil
	})
	if err != nil {
		return err
	}
	if d := diff(want, final); d != "" {
		return fmt.Errorf("Final:\n%s", d)
	}
	return nil
}

// interleavings calls fn with every merge of the runs' ops (each run's
// order kept), as a list of run indexes; limit > 0 samples that many
// merges at random (seeded) instead of all.
func interleavings(lens []int, limit int, rng *rand.Rand, fn func(order []int) bool) {
	total := 0
	for _, l := range lens {
		total += l
	}
	if limit > 0 {
		for i := 0; i < limit; i++ {
			var order []int
			for r, l := range lens {
				for j := 0; j < l; j++ {
					order = append(order, r)
				}
			}
			rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
			if !fn(order) {
				return
			}
		}
		return
	}
	left := slices.Clone(lens)
	order := make([]int, 0, total)
	var rec func() bool
	rec = func() bool {
		if len(order) == total {
			return fn(order)
		}
		for r := range left {
			if left[r] == 0 {
				continue
			}
			left[r]--
			order = append(order, r)
			ok := rec()
			order = order[:len(order)-1]
			left[r]++
			if !ok {
				return false
			}
		}
		return true
	}
	rec()
}

// runCase runs every interleaving (or a sample) of runs through sql, with
// both replica identities and a redelivered suffix of the first run.
// runCase runs every interleaving of runs (limit > 0: a sample) through
// sql's pipeline, checking every step; chunk > 0 applies every stage input
// in fan-out chunks of that many changes (Join.ApplyChunked).
func runCase(t *testing.T, sql string, runs []tableRun, limit int, rng *rand.Rand, chunk int) (checks int) {
	q, p := compileQuery(t, sql)
	var lens []int
	for _, r := range runs {
		lens = append(lens, len(r.ops))
	}
	for _, full := range []bool{true, false} {
		interleavings(lens, limit, rng, func(order []int) bool {
			h := newHarness(t, q, p)
			h.pl.chunk = chunk
			pos := make([]int, len(runs))
			var trace []string
			fail := func(err error) bool {
				t.Errorf("%s\nfull=%v, after %s:\n%v", sql, full, strings.Join(trace, " "), err)
				return false
			}
			for _, r := range order {
				o := runs[r].ops[pos[r]]
				pos[r]++
				trace = append(trace, fmt.Sprintf("%s:%c", runs[r].name, o.kind))
				if err := h.step(runs[r].name, o, full, false); err != nil {
					return fail(err)
				}
				checks++
				if err := h.check(false); err != nil {
					return fail(err)
				}
			}
			// At-least-once: the first run's last two ops again.
			rr := runs[0]
			for i := max(0, len(rr.ops)-2); i < len(rr.ops); i++ {
				trace = append(trace, "redelivered:"+string(rr.ops[i].kind))
				if err := h.step(rr.name, rr.ops[i], full, true); err != nil {
					return fail(err)
				}
			}
			if err := h.check(false); err != nil {
				return fail(err)
			}
			return true
		})
	}
	return checks
}

func sortedNames(m map[string][]op) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestExhaustiveTwoTables: every kind, conditions in ON on either side
// (filters of the non-preserved side, match conditions of a preserved
// one), WHERE conditions, every pair of scripts, every interleaving.
func TestExhaustiveTwoTables(t *testing.T) {
	queries := []string{}
	for _, kind := range []string{"JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"} {
		base := "SELECT u.id AS uid, u.name AS uname, d.id AS did, d.name AS dname FROM users u " + kind + " domains d ON d.user_id = u.id"
		queries = append(queries, base, base+" AND d.name <> 'x' AND u.name <> 'x'", base+" WHERE u.name IS NULL OR d.name LIKE '%.com'")
	}
	// Many to many on a non-key column, from the child's side.
	queries = append(queries, "SELECT d.id AS did, d2.id AS d2id, d.name AS dname FROM domains d FULL JOIN domains d2 ON d2.user_id = d.user_id AND d2.name <> 'x'")
	checks := 0
	for _, sql := range queries {
		for _, un := range sortedNames(userScripts) {
			for _, dn := range sortedNames(domainScripts) {
				runs := []tableRun{{name: "users", ops: userScripts[un]}, {name: "domains", ops: domainScripts[dn]}}
				if strings.Contains(sql, "domains d2") {
					runs = runs[1:]
				}
				checks += runCase(t, sql, runs, 0, nil, 0)
				if t.Failed() {
					t.Fatalf("scripts users=%s domains=%s", un, dn)
				}
			}
		}
	}
	t.Logf("%d checks", checks)
}

// TestExhaustiveThreeTables: chains with every kind at each join, a
// sample of interleavings per script triple.
func TestExhaustiveThreeTables(t *testing.T) { exhaustiveThreeTables(t, 0) }

// TestExhaustiveThreeTablesChunked is TestExhaustiveThreeTables with every
// stage input's fan-out done in chunks of one change (Join.ApplyChunked
// continued until done, as `run`'s stages do between other keys' inputs):
// every change checked, the tables equal to the reference at every step.
// Negative control: TestChunkedCatchesBrokenResume.
func TestExhaustiveThreeTablesChunked(t *testing.T) { exhaustiveThreeTables(t, 1) }

func exhaustiveThreeTables(t *testing.T, chunk int) {
	rng := rand.New(rand.NewSource(1))
	kinds := []string{"JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"}
	checks := 0
	for _, k1 := range kinds {
		for _, k2 := range kinds {
			sql := "SELECT u.id AS uid, u.name AS uname, d.id AS did, d.name AS dname, r.id AS rid, r.rtype FROM users u " +
				k1 + " domains d ON d.user_id = u.id " + k2 + " records r ON r.domain_id = d.id AND r.rtype <> 'TXT'"
			for _, un := range []string{"two", "delete-recreate", "truncate", "pk-inline"} {
				for _, dn := range []string{"move", "delete", "null-fk", "truncate"} {
					for _, rn := range sortedNames(recordScripts) {
						runs := []tableRun{{name: "users", ops: userScripts[un]}, {name: "domains", ops: domainScripts[dn]}, {name: "records", ops: recordScripts[rn]}}
						checks += runCase(t, sql, runs, 12, rng, chunk)
						if t.Failed() {
							t.Fatalf("scripts users=%s domains=%s records=%s", un, dn, rn)
						}
					}
				}
			}
		}
	}
	t.Logf("%d checks", checks)
}

// TestChunkedCatchesBrokenResume is the negative control of
// TestExhaustiveThreeTablesChunked: fan-outs in chunks of one change whose
// continuation starts over (instead of after the last row done) must fail
// the checks.
func TestChunkedCatchesBrokenResume(t *testing.T) {
	// (The last stage's fan-out: a re-emitted change of an inner stage
	// is a no-op at the next one.)
	q, p := compileQuery(t, "SELECT u.id AS uid, u.name AS uname, d.id AS did FROM users u LEFT JOIN domains d ON d.user_id = u.id")
	// A user with three domains, renamed: fan-outs of three rows.
	hist := []struct {
		table string
		o     op
	}{
		{"domains", ins(i64(10), i64(1), str("a.com"))}, {"domains", ins(i64(11), i64(1), str("b.com"))},
		{"domains", ins(i64(12), i64(1), str("c.com"))}, {"users", ins(i64(1), str("Egor"))},
		{"users", upd(i64(1), str("Olga"))}, {"domains", del(11)}, {"users", del(1)},
	}
	caught, cases := 0, 0
	for _, broken := range []bool{false, true} {
		h := newHarness(t, q, p)
		h.pl.chunk = 1
		for _, j := range h.pl.joins {
			j.resumeFromStart = broken
		}
		var err error
		for _, e := range hist {
			if err = h.step(e.table, e.o, false, false); err == nil {
				err = h.check(false)
			}
			if err != nil {
				break
			}
		}
		switch {
		case !broken && err != nil:
			t.Fatalf("the control's history fails with a correct resume: %v", err)
		case broken:
			cases++
			if err != nil {
				caught++
				t.Logf("caught: %v", err)
			}
		}
	}
	if caught < cases {
		t.Fatal("a fan-out resumed from the start passed every check")
	}
}

// TestExhaustiveCatchesBrokenJoin: the negative control — a join that
// drops a retraction now and then must fail the checks.
func TestExhaustiveCatchesBrokenJoin(t *testing.T) {
	q, p := compileQuery(t, "SELECT u.id AS uid, d.id AS did FROM users u LEFT JOIN domains d ON d.user_id = u.id")
	caught := 0
	for _, dn := range sortedNames(domainScripts) {
		h := newHarness(t, q, p)
		n := 0
		h.broken = func(c *row.Change) {
			n++
			if c.Op == row.Retract && n%2 == 0 {
				c.Op = row.Upsert
				c.Prev = nil
			}
		}
		var err error
		for _, o := range userScripts["two"] {
			if err = h.step("users", o, false, false); err == nil {
				err = h.check(false)
			}
			if err != nil {
				break
			}
		}
		for _, o := range domainScripts[dn] {
			if err != nil {
				break
			}
			if err = h.step("domains", o, false, false); err == nil {
				err = h.check(false)
			}
		}
		if err != nil {
			caught++
		}
	}
	if caught == 0 {
		t.Fatal("a broken join passed every check")
	}
}

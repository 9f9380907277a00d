package keyed_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
)

// The exhaustive tests run the keyer and the join on keyed.MemState over
// every interleaving of small per-table histories (each table's own order
// kept, as Kafka keeps a partition's), for both join kinds, both REPLICA
// IDENTITY modes, at-least-once redelivery, and both topologies (keyer and
// join on one state, as in replay; or a keying stage with its own index
// and parent index feeding the join through encoded keyed-topic records,
// as in run). After every event they check, in the style of etcd raft's
// core tests:
//   - the upsert sink (highest version wins, retractions delete) holds
//     exactly the SQL join of the tables as consumed so far;
//   - the changelog sink is exact: every cancel names the live row's
//     values and version, and every insert finds no live row;
//   - per output row key, versions strictly increase;
//   - keyed.Materialize of the state equals the sink.

// Columns: users(id, firstname), domains(id, user_id, name).
func exhaustiveSpec(t testing.TB, left bool) *keyed.Spec {
	return testkit.Spec(t, left, []string{"firstname"}, []string{"name"})
}

// op is one change of a source table: an upsert of a full row (ins/upd), a
// delete by key, or a truncate. toast marks columns an update leaves
// unchanged and Debezium sends as placeholders; oldKey (updates) changes
// the primary key in place.
type op struct {
	kind   byte // 'c', 'u', 'd', 't'
	vals   []row.Value
	toast  []bool
	oldKey int64 // 'u' with a key change: the old key (0: none)
}

func ins(vals ...row.Value) op { return op{kind: 'c', vals: vals} }
func upd(vals ...row.Value) op { return op{kind: 'u', vals: vals} }
func del(key int64) op         { return op{kind: 'd', vals: []row.Value{row.Int(key)}} }
func trunc() op                { return op{kind: 't'} }
func toast(o op, cols ...int) op {
	o.toast = make([]bool, len(o.vals))
	for _, c := range cols {
		o.toast[c] = true
	}
	return o
}
func rekey(o op, old int64) op { o.oldKey = old; return o }

var (
	i64 = row.Int
	str = row.String
	nul = row.Null()
)

// Per-table histories ("scripts"): keys 1, 2 for users; 10, 11, 12 for
// domains. Each covers a hard case of NOTES.md section 3.
var parentScripts = map[string][]op{
	"create":           {ins(i64(1), str("Egor"))},
	"rename":           {ins(i64(1), str("Egor")), upd(i64(1), str("Pavel"))},
	"delete":           {ins(i64(1), str("Egor")), del(1)},
	"delete-recreate":  {ins(i64(1), str("Egor")), del(1), ins(i64(1), str("Mitya"))},
	"two-parents":      {ins(i64(2), str("Olga")), ins(i64(1), str("Egor")), upd(i64(2), str("Olga2"))},
	"truncate":         {ins(i64(1), str("Egor")), trunc(), ins(i64(2), str("Olga"))},
	"pk-change-split":  {ins(i64(1), str("Egor")), del(1), ins(i64(2), str("Egor"))},
	"pk-change-inline": {ins(i64(1), str("Egor")), rekey(upd(i64(2), str("Egor")), 1)},
	"toast-unchanged":  {ins(i64(1), str("Egor")), toast(upd(i64(1), str("Egor")), 1), upd(i64(1), str("Vera"))},
}

var childScripts = map[string][]op{
	"create":          {ins(i64(10), i64(1), str("a.com"))},
	"update":          {ins(i64(10), i64(1), str("a.com")), upd(i64(10), i64(1), str("b.com"))},
	"move":            {ins(i64(10), i64(1), str("a.com")), upd(i64(10), i64(2), str("a.com"))},
	"move-toast":      {ins(i64(10), i64(1), str("a.com")), toast(upd(i64(10), i64(2), str("a.com")), 2)},
	"delete":          {ins(i64(10), i64(1), str("a.com")), ins(i64(11), i64(1), str("c.com")), del(10)},
	"null-fk":         {ins(i64(10), i64(1), str("a.com")), upd(i64(10), nul, str("a.com")), upd(i64(10), i64(1), str("d.com"))},
	"truncate":        {ins(i64(10), i64(2), str("a.com")), trunc(), ins(i64(11), i64(1), str("c.com"))},
	"pk-change-split": {ins(i64(10), i64(1), str("a.com")), del(10), ins(i64(12), i64(1), str("a.com"))},
	"toast-noop":      {ins(i64(10), i64(1), str("a.com")), toast(upd(i64(10), i64(1), str("a.com")), 2)},
}

// event builds the Debezium event of o given the table before it (for
// `before` images): full before images under REPLICA IDENTITY FULL, none
// for updates and key-only for deletes under DEFAULT.
func event(o op, table map[int64][]row.Value, full bool, width int) *debezium.Event {
	ev := &debezium.Event{Op: debezium.Op(o.kind)}
	key := func(k int64) []row.Value {
		v := make([]row.Value, width)
		v[0] = i64(k)
		return v
	}
	switch o.kind {
	case 'c', 'u':
		after := slices.Clone(o.vals)
		for i, t := range o.toast {
			if t {
				after[i] = row.Unavailable()
			}
		}
		ev.After = debezium.Row{Present: true, Values: after}
		ev.Key = debezium.Row{Present: true, Values: key(o.vals[0].Int)}
		if o.kind == 'u' && full {
			old := o.vals[0].Int
			if o.oldKey != 0 {
				old = o.oldKey
			}
			ev.Before = debezium.Row{Present: true, Values: slices.Clone(table[old])}
		} else if o.kind == 'u' && o.oldKey != 0 {
			// Debezium always sends the old key of an in-place key change.
			ev.Before = debezium.Row{Present: true, Values: key(o.oldKey)}
		}
	case 'd':
		k := o.vals[0].Int
		ev.Key = debezium.Row{Present: true, Values: key(k)}
		if full && table[k] != nil {
			ev.Before = debezium.Row{Present: true, Values: slices.Clone(table[k])}
		} else {
			ev.Before = debezium.Row{Present: true, Values: key(k)}
		}
	}
	return ev
}

// applyTable applies o to a table (the source database's view).
func applyTable(table map[int64][]row.Value, o op) {
	switch o.kind {
	case 'c', 'u':
		if o.oldKey != 0 {
			delete(table, o.oldKey)
		}
		vals := slices.Clone(o.vals)
		for i, t := range o.toast {
			if t {
				vals[i] = table[o.vals[0].Int][i]
			}
		}
		table[o.vals[0].Int] = vals
	case 'd':
		delete(table, o.vals[0].Int)
	case 't':
		clear(table)
	}
}

// sqlJoin is the join of the tables, keyed by row key text.
func sqlJoin(parents, children map[int64][]row.Value, left bool) map[string]string {
	out := map[string]string{}
	has := map[int64]bool{}
	for ck, c := range children {
		if c[1].IsNull() {
			continue
		}
		if p := parents[c[1].Int]; p != nil {
			has[c[1].Int] = true
			out[fmt.Sprintf("%d|%d", c[1].Int, ck)] = fmtVals([]row.Value{p[0], p[1], c[0], c[2]})
		}
	}
	if left {
		for pk, p := range parents {
			if !has[pk] {
				out[fmt.Sprintf("%d|NULL", pk)] = fmtVals([]row.Value{p[0], p[1], nul, nul})
			}
		}
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

func rowKey(pk, ck []row.Value) string {
	c := "NULL"
	if ck != nil {
		c = fmtValues(ck)
	}
	return fmtValues(pk) + "|" + c
}

// sinks models both ClickHouse sink modes and checks every change.
type sinks struct {
	upsert map[string]struct {
		ver     uint64
		vals    string
		deleted bool
	}
	live map[string]struct {
		ver  uint64
		vals string
	} // changelog: the uncancelled row
	lastVer map[string]uint64
}

func newSinks() *sinks {
	return &sinks{upsert: map[string]struct {
		ver     uint64
		vals    string
		deleted bool
	}{},
		live: map[string]struct {
			ver  uint64
			vals string
		}{}, lastVer: map[string]uint64{}}
}

func (s *sinks) apply(c *row.Change) error {
	k := rowKey(c.ParentKey, c.ChildKey)
	if c.Version <= s.lastVer[k] {
		return fmt.Errorf("row %s: version %d after %d", k, c.Version, s.lastVer[k])
	}
	s.lastVer[k] = c.Version
	vals := fmtVals(c.Values)
	s.upsert[k] = struct {
		ver     uint64
		vals    string
		deleted bool
	}{c.Version, vals, c.Op == row.Retract}
	live, ok := s.live[k]
	switch {
	case c.Op == row.Retract:
		if !ok || live.ver != c.PrevVersion || live.vals != vals {
			return fmt.Errorf("row %s: retract of [%s]@%d, live row %v [%s]@%d", k, vals, c.PrevVersion, ok, live.vals, live.ver)
		}
		delete(s.live, k)
	case c.Prev != nil:
		if !ok || live.ver != c.PrevVersion || live.vals != fmtVals(c.Prev) {
			return fmt.Errorf("row %s: update cancels [%s]@%d, live row %v [%s]@%d", k, fmtVals(c.Prev), c.PrevVersion, ok, live.vals, live.ver)
		}
		s.live[k] = struct {
			ver  uint64
			vals string
		}{c.Version, vals}
	default:
		if ok {
			return fmt.Errorf("row %s: insert [%s] over live row [%s]@%d (changelog double count)", k, vals, live.vals, live.ver)
		}
		s.live[k] = struct {
			ver  uint64
			vals string
		}{c.Version, vals}
	}
	return nil
}

func (s *sinks) check(want map[string]string) error {
	got := map[string]string{}
	for k, r := range s.upsert {
		if !r.deleted {
			got[k] = r.vals
		}
	}
	if err := diffMaps("upsert sink", want, got); err != nil {
		return err
	}
	got = map[string]string{}
	for k, r := range s.live {
		got[k] = r.vals
	}
	return diffMaps("changelog sink", want, got)
}

func diffMaps(what string, want, got map[string]string) error {
	var d []string
	for k, v := range want {
		if got[k] != v {
			d = append(d, fmt.Sprintf("  %s: want [%s] got [%s]", k, v, got[k]))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("  %s: extra [%s]", k, v))
		}
	}
	if len(d) == 0 {
		return nil
	}
	slices.Sort(d)
	return fmt.Errorf("%s differs from the SQL join:\n%s", what, strings.Join(d, "\n"))
}

// pipeline is the keyer and the join in one of the two topologies.
type pipeline struct {
	spec    *keyed.Spec
	shared  bool // replay: keyer and join on one state
	index   *keyed.MemState
	state   *keyed.MemState
	keyer   *keyed.Keyer
	join    *keyed.Join
	version uint64
	rec     keyedlog.Msg
}

func newPipeline(spec *keyed.Spec, shared bool) *pipeline {
	p := &pipeline{spec: spec, shared: shared, state: keyed.NewMemState(), keyer: keyed.NewKeyer(spec), join: keyed.NewJoin(spec)}
	p.index = p.state
	if !shared {
		p.index = keyed.NewMemState()
		p.keyer.ResolveParents = true
	}
	return p
}

func (p *pipeline) apply(side row.Side, ev *debezium.Event, emit func(*row.Change) error) error {
	return p.keyer.Key(p.index, side, 0, ev, func(in *keyed.Input) error {
		p.version++
		if p.shared {
			return p.join.Apply(p.state, in, p.version, emit)
		}
		// Through the keyed topic's encoding, as the join stage reads it:
		// the compact form the keying stage writes, and every other record
		// the full form of older keyed topics.
		key := keyedlog.AppendInputKey(nil, in)
		val := keyedlog.AppendCompactValue(p.spec, nil, key, in)
		if p.version%2 == 1 {
			val = keyedlog.AppendInputValue(nil, in)
		}
		if err := keyedlog.Decode(p.spec, key, val, nil, &p.rec); err != nil {
			return err
		}
		return p.join.Apply(p.state, &p.rec.In, p.version, emit)
	})
}

// interleavings calls fn with every merge of a and b that keeps each one's
// order (true: take from a).
func interleavings(na, nb int, fn func(order []bool) error) error {
	order := make([]bool, 0, na+nb)
	var rec func(i, j int) error
	rec = func(i, j int) error {
		if i == na && j == nb {
			return fn(order)
		}
		if i < na {
			order = append(order, true)
			if err := rec(i+1, j); err != nil {
				return err
			}
			order = order[:len(order)-1]
		}
		if j < nb {
			order = append(order, false)
			if err := rec(i, j+1); err != nil {
				return err
			}
			order = order[:len(order)-1]
		}
		return nil
	}
	return rec(0, 0)
}

// delivery is one delivered event and the source change it carries.
type delivery struct {
	op op
	ev *debezium.Event
}

// deliveries turns a script into its Debezium events, with before images
// taken from the table as the script changes it, then re-sends the events
// from index redeliverFrom on (at-least-once redelivery after a connector
// restart: the same events again; -1 for none).
func deliveries(ops []op, full bool, width, redeliverFrom int) []delivery {
	table := map[int64][]row.Value{}
	var out []delivery
	for _, o := range ops {
		out = append(out, delivery{o, event(o, table, full, width)})
		applyTable(table, o)
	}
	if redeliverFrom >= 0 {
		out = append(out, out[redeliverFrom:]...)
	}
	return out
}

func TestExhaustive(t *testing.T) {
	names := func(m map[string][]op) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	runs := 0
	for _, left := range []bool{false, true} {
		spec := exhaustiveSpec(t, left)
		for _, shared := range []bool{true, false} {
			for _, full := range []bool{true, false} {
				for _, pn := range names(parentScripts) {
					for _, cn := range names(childScripts) {
						ps, cs := parentScripts[pn], childScripts[cn]
						// Variants: as written; the parents' last event
						// re-sent; the children's last two re-sent.
						variants := [][2]int{{-1, -1}, {len(ps) - 1, -1}, {-1, max(0, len(cs)-2)}}
						for vi, v := range variants {
							pd, cd := deliveries(ps, full, 2, v[0]), deliveries(cs, full, 3, v[1])
							err := interleavings(len(pd), len(cd), func(order []bool) error {
								runs++
								return runHistory(spec, shared, left, pd, cd, order)
							})
							if err != nil {
								t.Fatalf("join left=%v, shared state=%v, identity full=%v, parents %q, children %q, variant %d:\n%v",
									left, shared, full, pn, cn, vi, err)
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d histories", runs)
}

func runHistory(spec *keyed.Spec, shared, left bool, ps, cs []delivery, order []bool) error {
	p := newPipeline(spec, shared)
	parents, children := map[int64][]row.Value{}, map[int64][]row.Value{}
	s := newSinks()
	var trace []string
	i, j := 0, 0
	for _, fromParents := range order {
		var d delivery
		var side row.Side
		var table map[int64][]row.Value
		if fromParents {
			d, side, table = ps[i], row.Parent, parents
			i++
		} else {
			d, side, table = cs[j], row.Child, children
			j++
		}
		trace = append(trace, fmt.Sprintf("%s %c %s", side, d.op.kind, fmtVals(d.op.vals)))
		applyTable(table, d.op)
		err := p.apply(side, d.ev, s.apply)
		if err == nil {
			err = s.check(sqlJoin(parents, children, left))
		}
		if err == nil {
			err = checkMaterialized(p, s)
		}
		if err != nil {
			return fmt.Errorf("after %s\n%w", strings.Join(trace, "; "), err)
		}
	}
	return nil
}

// checkMaterialized compares the join held in the state with the sink.
func checkMaterialized(p *pipeline, s *sinks) error {
	got := map[string]string{}
	err := keyed.Materialize(p.state, p.spec, func(pk, ck, vals []row.Value) error {
		got[rowKey(pk, ck)] = fmtVals(vals)
		return nil
	})
	if err != nil {
		return err
	}
	want := map[string]string{}
	for k, r := range s.live {
		want[k] = r.vals
	}
	if err := diffMaps("materialized state", want, got); err != nil {
		return err
	}
	return nil
}

// TestExhaustiveCatchesBrokenJoin is the negative control: a sink that
// drops retractions must be caught.
func TestExhaustiveCatchesBrokenJoin(t *testing.T) {
	spec := exhaustiveSpec(t, false)
	ps, cs := deliveries(parentScripts["delete"], true, 2, -1), deliveries(childScripts["create"], true, 3, -1)
	caught := false
	_ = interleavings(len(ps), len(cs), func(order []bool) error {
		p := newPipeline(spec, true)
		parents, children := map[int64][]row.Value{}, map[int64][]row.Value{}
		s := newSinks()
		i, j := 0, 0
		for _, fromParents := range order {
			d, side, table := cs[min(j, len(cs)-1)], row.Child, children
			if fromParents {
				d, side, table = ps[i], row.Parent, parents
				i++
			} else {
				j++
			}
			applyTable(table, d.op)
			err := p.apply(side, d.ev, func(c *row.Change) error {
				if c.Op == row.Retract {
					return nil // the bug
				}
				return s.apply(c)
			})
			if err == nil {
				err = s.check(sqlJoin(parents, children, false))
			}
			if err != nil {
				caught = true
				return err
			}
		}
		return nil
	})
	if !caught {
		t.Fatal("a join whose retractions are lost passed the exhaustive check")
	}
}

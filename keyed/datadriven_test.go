package keyed_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
)

// The golden tests drive the keyer and the join with decoded events:
//
//	init join=inner|left
//	parent op=c|u|r|d id=1 firstname=Egor …   (column=value; null, toast)
//	child op=u id=3 user_id=2 domain_name=X
//	truncate side=parent|child
//	table                                       (the materialized join)
//
// Each event prints the changes it caused. Values that parse as integers are
// ints; "null" is NULL; "toast" is Debezium's unavailable placeholder.
// before.<col>=v fills the before image (REPLICA IDENTITY FULL); without it
// updates have no before image (REPLICA IDENTITY DEFAULT) and deletes carry
// only the key.

const ddConfig = `
name: dd
parent: {topic: users, key: id}
child:  {topic: domains, key: id, parent_key: user_id}
join: %s
select: parent.id AS user_id, parent.firstname, parent.lastname, child.id AS domain_id, child.domain_name
state: {dir: /dd}
`

type ddHarness struct {
	mem     bool // run on keyed.MemState instead of pebble
	spec    *keyed.Spec
	store   *joinstate.Store
	model   *keyed.MemState
	keyer   *keyed.Keyer
	join    *keyed.Join
	version uint64
}

// state is what one event runs on: a pebble Txn (commit or abort) or the
// in-memory model (undone on abort by restoring a snapshot).
type ddState interface {
	keyed.State
	keyed.Index
}

func (h *ddHarness) begin() (ddState, func(ok bool) error) {
	if h.mem {
		snap := h.model.Clone()
		return h.model, func(ok bool) error {
			if !ok {
				h.model = snap
			}
			return nil
		}
	}
	txn := h.store.Begin()
	return txn, func(ok bool) error {
		if !ok {
			txn.Abort()
			return nil
		}
		return txn.Commit()
	}
}

func (h *ddHarness) close() {
	if h.store != nil {
		h.store.Close()
		h.store = nil
	}
}

func parseValue(s string) row.Value {
	switch s {
	case "null":
		return row.Null()
	case "toast":
		return row.Unavailable()
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return row.Int(n)
	}
	return row.String(s)
}

func fmtValues(vals []row.Value) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		if v.IsNull() {
			parts[i] = "NULL"
		} else {
			parts[i] = v.Text()
		}
	}
	return strings.Join(parts, ",")
}

func fmtChange(c *row.Change) string {
	ck := "NULL"
	if c.ChildKey != nil {
		ck = fmtValues(c.ChildKey)
	}
	s := fmt.Sprintf("%s v%d (%s|%s) [%s]", c.Op, c.Version, fmtValues(c.ParentKey), ck, fmtValues(c.Values))
	if c.Prev != nil {
		s += fmt.Sprintf(" prev=[%s]", fmtValues(c.Prev))
	}
	if c.PrevVersion != 0 {
		s += fmt.Sprintf(" prev@v%d", c.PrevVersion)
	}
	return s
}

// TestGolden runs every golden file twice, on pebble and on the in-memory
// model: both must print exactly the expected output.
func TestGolden(t *testing.T) {
	for _, mem := range []bool{false, true} {
		name := "pebble"
		if mem {
			name = "memstate"
		}
		t.Run(name, func(t *testing.T) { golden(t, mem) })
	}
}

func golden(t *testing.T, mem bool) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &ddHarness{mem: mem}
		defer h.close()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "init":
				h.close()
				join := "inner"
				d.MaybeScanArgs(t, "join", &join)
				cfg, err := config.Parse([]byte(fmt.Sprintf(ddConfig, join)), "dd.yaml")
				if err != nil {
					t.Fatal(err)
				}
				h.spec = job.MustSpec(cfg)
				if h.mem {
					h.model = keyed.NewMemState()
				} else if h.store, err = joinstate.Open(joinstate.Options{Dir: "/dd", FS: vfs.NewMem()}); err != nil {
					t.Fatal(err)
				}
				h.keyer, h.join, h.version = keyed.NewKeyer(h.spec), keyed.NewJoin(h.spec), 0
				d.MaybeScanArgs(t, "resolve_parents", &h.keyer.ResolveParents)
				return ""
			case "parent", "child", "truncate":
				return h.event(t, d)
			case "table":
				var b strings.Builder
				st, end := h.begin()
				err := keyed.Materialize(st, h.spec, func(_, _ []row.Value, vals []row.Value) error {
					fmt.Fprintf(&b, "%s\n", fmtValues(vals))
					return nil
				})
				end(false)
				if err != nil {
					t.Fatal(err)
				}
				if b.Len() == 0 {
					return "(empty)"
				}
				return b.String()
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
	})
}

func (h *ddHarness) event(t *testing.T, d *datadriven.TestData) string {
	side := row.Parent
	if d.Cmd == "child" {
		side = row.Child
	}
	ev := debezium.Event{}
	if d.Cmd == "truncate" {
		var s string
		d.ScanArgs(t, "side", &s)
		side = row.Parent
		if s == "child" {
			side = row.Child
		}
		ev.Op = debezium.OpTruncate
	} else {
		cols := h.spec.Columns(side)
		after := make([]row.Value, len(cols))
		before := make([]row.Value, len(cols))
		hasBefore := false
		for _, a := range d.CmdArgs {
			if a.Key == "op" {
				ev.Op = debezium.Op(a.Vals[0][0])
				continue
			}
			name, isBefore := strings.CutPrefix(a.Key, "before.")
			idx := -1
			for i, c := range cols {
				if c == name {
					idx = i
				}
			}
			if idx < 0 {
				t.Fatalf("unknown column %q", a.Key)
			}
			if isBefore {
				before[idx], hasBefore = parseValue(a.Vals[0]), true
			} else {
				after[idx] = parseValue(a.Vals[0])
			}
		}
		if ev.Op == debezium.OpDelete {
			// Deletes: the key comes from before (identity DEFAULT: key only).
			ev.Before = debezium.Row{Present: true, Values: after}
			ev.Key = debezium.Row{Present: true, Values: after}
		} else {
			ev.After = debezium.Row{Present: true, Values: after}
			if hasBefore {
				ev.Before = debezium.Row{Present: true, Values: before}
			}
		}
	}
	st, end := h.begin()
	var b strings.Builder
	err := h.keyer.Key(st, side, 0, &ev, func(in *keyed.Input) error {
		h.version++
		return h.join.Apply(st, in, h.version, func(c *row.Change) error {
			fmt.Fprintln(&b, fmtChange(c))
			return nil
		})
	})
	if err != nil {
		end(false)
		return "error: " + err.Error()
	}
	if err := end(true); err != nil {
		t.Fatal(err)
	}
	if b.Len() == 0 {
		return "(no changes)"
	}
	return b.String()
}

package stage

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
)

// chunkRec is one record of a stage's log.
type chunkRec struct{ key, value []byte }

// hotUserLog is the log of stage 1 of a two-table plan, keyed by
// Source: user 1 with five domains and user 2 with one, then renames of
// user 1 (a fan-out of five rows), of user 2 and of user 1 again.
func hotUserLog(t *testing.T) (*Source, []chunkRec, *harness) {
	t.Helper()
	q, p := compileQuery(t, "SELECT u.id AS uid, u.name AS uname, d.id AS did, d.name AS dname FROM users u JOIN domains d ON d.user_id = u.id")
	h := newHarness(t, q, p)
	src := NewSource(p)
	idx := NewMemState()
	hist := []struct {
		table string
		o     op
	}{
		{"users", ins(i64(1), str("Egor"))}, {"users", ins(i64(2), str("Olga"))},
		{"domains", ins(i64(10), i64(1), str("a.com"))}, {"domains", ins(i64(11), i64(1), str("b.com"))},
		{"domains", ins(i64(12), i64(1), str("c.com"))}, {"domains", ins(i64(13), i64(1), str("d.com"))},
		{"domains", ins(i64(14), i64(1), str("e.com"))}, {"domains", ins(i64(20), i64(2), str("f.com"))},
		{"users", upd(i64(1), str("x"))}, {"users", upd(i64(2), str("Vera"))}, {"users", upd(i64(1), str("y"))},
		{"domains", ins(i64(21), i64(2), str("g.com"))},
	}
	var recs []chunkRec
	for _, e := range hist {
		it := h.items[e.table][0]
		table := h.tables[it]
		ev := event(e.o, table, p.Tables[it].Columns, schema[e.table], true)
		err := src.Key(idx, it, ev, 1, func(_ int32, key, value []byte) error {
			recs = append(recs, chunkRec{slices.Clone(key[1:]), slices.Clone(value)}) // (Msg.Key: after the kind byte)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		applyTable(table, e.o)
	}
	return src, recs, h
}

// chunkDriver runs one stage partition's log through an Operator the way
// `run`'s worker does when it steps by input: after every record the work
// in progress advances by chunk changes, and at the end of the log by
// step markers of 8 chunks until none is left. Batches commit every
// `every` records; crash(i), if set, makes the batch in progress at
// record i abort (its changes discarded, as a crashed run's), the
// operator be made anew and loaded from the committed state, and the
// records from the committed position be read again.
type chunkDriver struct {
	t     *testing.T
	h     *harness
	chunk int
	every int
	crash func(i int) bool
	// changes: the changes of committed batches, each "rec i: line".
	changes []string
	// overtook: changes of another key emitted while a fan-out was in
	// progress.
	overtook          int
	chunked, waited   uint64
	crashes, restarts int
	midChunk          int // crashes with a fan-out in progress
}

func (d *chunkDriver) run(recs []chunkRec) {
	t := d.t
	st, err := joinstate.Open(joinstate.Options{Dir: "/s", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	newOp := func() *Operator {
		op, err := NewOperator(d.h.p, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		op.SetChunk(d.chunk)
		return op
	}
	op := newOp()
	tx := st.Begin()
	if err := op.Load(tx); err != nil {
		t.Fatal(err)
	}
	var batch []string
	committed := 0 // records below it are committed
	cur := -1      // the record whose work is stepped
	busyKey := ""  // a user with a fan-out in progress, when one is
	out := keyedlog.Out{Emit: func(c *row.Change) error {
		line := fmt.Sprintf("rec %d: %s %v|%v v%d %v", cur, c.Op, fmtVals(c.ParentKey), fmtVals(c.ChildKey), c.Version, fmtVals(c.Values))
		if busyKey != "" && fmtVals(c.ParentKey) != busyKey {
			d.overtook++
		}
		batch = append(batch, line)
		return nil
	}}
	commit := func(next int) {
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		d.changes = append(d.changes, batch...)
		batch, committed = nil, next
		d.chunked, d.waited = d.chunked+op.Chunked(), d.waited+op.Waited()
		op = newOp() // a restart at every commit: only the state carries the work
		d.restarts++
		tx = st.Begin()
		if err := op.Load(tx); err != nil {
			t.Fatal(err)
		}
	}
	markers := 0
	for i := 0; i < len(recs) || op.Busy(); i++ {
		if i >= len(recs) {
			// A step marker read back: appended to the log, so that a
			// re-read after a crash finds it too.
			recs = append(recs, chunkRec{})
			markers++
			if markers > 1000 {
				t.Fatal("the work in progress never finished")
			}
		}
		if d.crash != nil && d.crash(i) {
			d.crashes++
			if op.Busy() {
				d.midChunk++
			}
			tx.Abort()
			batch = nil
			op = newOp()
			tx = st.Begin()
			if err := op.Load(tx); err != nil {
				t.Fatal(err)
			}
			i = committed - 1
			continue
		}
		cur = i
		r := recs[i]
		budget := d.chunk
		if r.key == nil {
			budget = 8 * d.chunk
		} else {
			m := &keyedlog.Msg{Kind: keyedlog.KindStage, Key: r.key, Value: r.value, Pos: int64(i), Version: uint64(i + 1)}
			if err := op.Step(tx, m, out); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := op.Advance(tx, budget, out); err != nil {
			t.Fatal(err)
		}
		busyKey = ""
		if op.Busy() {
			busyKey = fmtVals([]row.Value{i64(1)}) // the only key with a fan-out larger than a chunk
		}
		if (i+1)%d.every == 0 || i == len(recs)-1 && !op.Busy() {
			commit(i + 1)
		}
	}
}

// final is the join's rows after changes (row key → values).
func chunkFinal(changes []string) map[string]string {
	out := map[string]string{}
	for _, l := range changes {
		f := strings.SplitN(l, " ", 6) // rec, i:, op, key, version, values
		if f[2] == row.Retract.String() {
			delete(out, f[3])
		} else {
			out[f[3]] = f[5]
		}
	}
	return out
}

// TestOperatorChunksKeepOtherKeysMoving: a stage Operator with chunks of
// one change, driven as `run`'s worker drives it in changelog mode (steps
// by input, step markers at the end of the log, its memory made anew from
// the committed state at every commit): user 1's rename, a fan-out of five
// rows, becomes work in progress, user 2's rename read after it is
// emitted before that fan-out ends (it does not wait), and user 1's next
// rename waits behind it. The join's rows equal those of an Operator
// without chunks, every row key's changes are the same in the same
// order; and runs that crash (the batch in progress aborted, the records
// since the commit read again) emit exactly the changes of the run that
// did not. Negative controls: without chunks nothing overtakes (the
// assertion can fail), and a re-run with another chunk size emits other
// changes (the comparison can fail).
func TestOperatorChunksKeepOtherKeysMoving(t *testing.T) {
	_, recs, h := hotUserLog(t)
	plain := &chunkDriver{t: t, h: h, chunk: -1, every: 3}
	plain.run(slices.Clone(recs))
	if plain.overtook != 0 || plain.chunked != 0 {
		t.Fatalf("negative control: without chunks %d changes overtook a fan-out (%d chunked)", plain.overtook, plain.chunked)
	}
	chunked := &chunkDriver{t: t, h: h, chunk: 1, every: 3}
	chunked.run(slices.Clone(recs))
	t.Logf("chunks of 1: %d fan-outs chunked, %d inputs waited, %d changes of other keys overtook a fan-out, %d restarts",
		chunked.chunked, chunked.waited, chunked.overtook, chunked.restarts)
	if chunked.chunked == 0 || chunked.waited == 0 || chunked.overtook == 0 {
		t.Fatalf("chunks of 1: %d chunked, %d waited, %d overtook: user 2's rename waited for user 1's fan-out", chunked.chunked, chunked.waited, chunked.overtook)
	}
	if d := diff(chunkFinal(plain.changes), chunkFinal(chunked.changes)); d != "" {
		t.Fatalf("chunked rows differ from the unchunked ones:\n%s", d)
	}
	perKey := func(changes []string) map[string][]string {
		out := map[string][]string{}
		for _, l := range changes {
			f := strings.SplitN(l, " ", 4)
			out[strings.Fields(f[3])[0]] = append(out[strings.Fields(f[3])[0]], f[2]+" "+f[3])
		}
		return out
	}
	pp, pc := perKey(plain.changes), perKey(chunked.changes)
	for k, seq := range pp {
		if !slices.Equal(seq, pc[k]) {
			t.Fatalf("row %s: changes\n%s\nchunked:\n%s", k, strings.Join(seq, "\n"), strings.Join(pc[k], "\n"))
		}
	}
	crashes, midChunk := 0, 0
	for i := range 12 {
		fired := map[int]bool{}
		crashy := &chunkDriver{t: t, h: h, chunk: 1, every: 3, crash: func(r int) bool {
			if m := 2 + i%5; r%m == i%m && !fired[r] { // each record's batch crashes at most once
				fired[r] = true
				return true
			}
			return false
		}}
		crashy.run(slices.Clone(recs))
		if crashy.crashes == 0 {
			t.Fatalf("crash pattern %d: no crash fired", i)
		}
		crashes, midChunk = crashes+crashy.crashes, midChunk+crashy.midChunk
		if !slices.Equal(crashy.changes, chunked.changes) {
			t.Fatalf("crash pattern %d (%d crashes): the changes differ from the run without crashes:\n%s\nwant:\n%s",
				i, crashy.crashes, strings.Join(crashy.changes, "\n"), strings.Join(chunked.changes, "\n"))
		}
	}
	t.Logf("%d crashes, %d of them with a fan-out in progress: the same changes", crashes, midChunk)
	if midChunk == 0 {
		t.Fatal("no crash hit a fan-out in progress")
	}
	other := &chunkDriver{t: t, h: h, chunk: 2, every: 3}
	other.run(slices.Clone(recs))
	if slices.Equal(other.changes, chunked.changes) {
		t.Fatal("negative control: chunks of 2 emit the same changes in the same order as chunks of 1: the comparison cannot fail")
	}
}

// TestOperatorStepOnDoesNotChunk: StepOn (run's bulk rebuild of a stage
// partition) does every fan-out at once whatever SetChunk says: an
// Operator with chunks of one change stepping hotUserLog on a MemState
// emits exactly the changes, in the same order, of an Operator without
// chunks driven by input, and never has work in progress; with a fan-out
// in progress (Step on a transaction with chunks of one, not advanced)
// StepOn fails instead of applying a record past it (negative control: the
// same Operator is Busy there, so the guard is what refuses).
func TestOperatorStepOnDoesNotChunk(t *testing.T) {
	_, recs, h := hotUserLog(t)
	plain := &chunkDriver{t: t, h: h, chunk: -1, every: 3}
	plain.run(slices.Clone(recs))
	op, err := NewOperator(h.p, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	op.SetChunk(1)
	mem := NewMemState()
	var got []string
	cur := 0
	out := keyedlog.Out{Emit: func(c *row.Change) error {
		got = append(got, fmt.Sprintf("rec %d: %s %v|%v v%d %v", cur, c.Op, fmtVals(c.ParentKey), fmtVals(c.ChildKey), c.Version, fmtVals(c.Values)))
		return nil
	}}
	for i, r := range recs {
		cur = i
		m := &keyedlog.Msg{Kind: keyedlog.KindStage, Key: r.key, Value: r.value, Pos: int64(i), Version: uint64(i + 1)}
		if err := op.StepOn(mem, m, out); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if op.Busy() || op.Chunked() != 0 {
			t.Fatalf("record %d: StepOn left work in progress (busy %v, %d chunked)", i, op.Busy(), op.Chunked())
		}
	}
	chunked := &chunkDriver{t: t, h: h, chunk: 1, every: 3}
	chunked.run(slices.Clone(recs))
	if slices.Equal(chunked.changes, plain.changes) {
		t.Fatal("negative control: Step with chunks of 1 emits what an Operator without chunks does: the comparison cannot fail")
	}
	if !slices.Equal(got, plain.changes) {
		t.Fatalf("StepOn with chunks of 1 emits\n%s\nwant (no chunks):\n%s", strings.Join(got, "\n"), strings.Join(plain.changes, "\n"))
	}

	st, err := joinstate.Open(joinstate.Options{Dir: "/s", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tx := st.Begin()
	defer tx.Abort()
	busy, err := NewOperator(h.p, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	busy.SetChunk(1)
	if err := busy.Load(tx); err != nil {
		t.Fatal(err)
	}
	i := 0
	for ; i < len(recs) && !busy.Busy(); i++ {
		m := &keyedlog.Msg{Kind: keyedlog.KindStage, Key: recs[i].key, Value: recs[i].value, Pos: int64(i), Version: uint64(i + 1)}
		if err := busy.Step(tx, m, out); err != nil {
			t.Fatal(err)
		}
	}
	if !busy.Busy() || i >= len(recs) {
		t.Fatalf("negative control: no fan-out in progress after %d records with chunks of 1", i)
	}
	m := &keyedlog.Msg{Kind: keyedlog.KindStage, Key: recs[i].key, Value: recs[i].value, Pos: int64(i), Version: uint64(i + 1)}
	if err := busy.StepOn(NewMemState(), m, out); err == nil {
		t.Fatal("StepOn with a fan-out in progress applied a record")
	}
}

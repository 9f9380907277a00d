package stage

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/internal/nilbytes"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/plan"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/skew"
)

// A plan in `run`: every stage n (1-based) has its own keyed log, and an
// Operator per partition of it; a materializer, when the plan needs one,
// is stage len(Stages)+1. The keying stage writes the base tables' inputs
// (Source) to the logs of the stages they feed; a stage's output goes to
// the next stage's log (keyedlog.Out.Next) or, at the last stage, to the
// sink (Out.Emit). The records (keyedlog.KindStage, the bytes after 'S'):
//
//	'I' side uvarint(len J) J id   flags (1: matchable) row | tombstone   a side's row at J (Input)
//	'T' side                       0x01                                  clear the side (a truncate)
//	'M' uvarint(len rk) rk id      row | tombstone                       an incarnation of output row rk
//
// and load records, which install a row with its version as it is and
// emit nothing (a handover: handover.go).
//
// Record keys are what stays live, so a compacted log rebuilds the stage:
// a row's last record at (side, J, id) is its state there; a clear keeps
// its latest record, after every row it cleared. Partitions: hash(J), or
// hash(id) for a row at Unmatchable; hash(rk) for the materializer.

// Record kinds of a stage's log.
const (
	recInput = 'I'
	recClear = 'T'
	recMat   = 'M'
)

// AppendInputRecord appends the key and value of in (for side s) to key
// and val; the value is nil for a delete.
func AppendInputRecord(key, val []byte, s Side, in *Input) ([]byte, []byte) {
	key = append(keyedlog.AppendStageKey(key, []byte{recInput, byte(s)}), binary.AppendUvarint(nil, uint64(len(in.Key)))...)
	key = append(append(key, in.Key...), in.ID...)
	if in.Delete {
		return key, nil
	}
	f := byte(0)
	if in.Matchable {
		f = 1
	}
	return key, row.AppendRow(append(val[:0], f), in.Row)
}

// AppendClearRecord appends the key and value of a clear of side s.
func AppendClearRecord(key, val []byte, s Side) ([]byte, []byte) {
	return keyedlog.AppendStageKey(key, []byte{recClear, byte(s)}), append(val[:0], 1)
}

// AppendMatRecord appends the key and value of an incarnation d of output
// row rk (for the materializer); the value is nil for a retraction.
func AppendMatRecord(key, val, rk []byte, d *Delta) ([]byte, []byte) {
	key = append(keyedlog.AppendStageKey(key, []byte{recMat}), binary.AppendUvarint(nil, uint64(len(rk)))...)
	key = append(append(key, rk...), d.ID...)
	if d.Op == row.Retract {
		return key, nil
	}
	return key, row.AppendRow(val[:0], d.Row)
}

// InputPartition is the partition of n of an input at position key with
// identity id.
func InputPartition(key, id []byte, n int32) int32 {
	if len(key) == 1 && key[0] == Unmatchable {
		return keyedlog.Partition(id, n)
	}
	return keyedlog.Partition(key, n)
}

// splitLen splits b into a uvarint-length-prefixed part and the rest.
func splitLen(b []byte) (part, rest []byte, err error) {
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return nil, nil, fmt.Errorf("%w: stage record key", row.ErrCorrupt)
	}
	return b[n : n+int(l)], b[n+int(l):], nil
}

// Sent counts records a Source or Operator sent, per destination.
type Sent struct{ Records int }

// Source keys the events of the plan's base tables for `run`'s keying
// stage: Keyer, the input's filter and position (Feeder), and the records
// of the stage the table feeds. Not safe for concurrent use.
type Source struct {
	p      *plan.Plan
	keyers []*Keyer
	feeds  []*Feeder
	key    []byte
	val    []byte
}

// NewSource returns the keying of p's base tables.
func NewSource(p *plan.Plan) *Source {
	s := &Source{p: p}
	for t := range p.Tables {
		s.keyers = append(s.keyers, NewKeyer(p, t))
		n, side := Feeds(t)
		s.feeds = append(s.feeds, NewFeeder(&p.Stages[n-1], side))
	}
	return s
}

// Feeds returns the stage (1-based) and side FROM item t feeds.
func Feeds(t int) (int, Side) {
	if t == 0 {
		return 1, L
	}
	return t, R
}

// Key keys event ev of FROM item t on the item's index kv (what Keyer
// keeps), calling send with each record for stage Feeds(t) (partition
// chosen by the caller's broadcast for a clear: partition -1). Errors are
// Keyer's (*KeyError: a bad record), *ExprError, kv's and send's.
func (s *Source) Key(kv State, t int, ev *debezium.Event, parts int32, send func(partition int32, key, value []byte) error) error {
	_, side := Feeds(t)
	f := s.feeds[t]
	return s.keyers[t].Key(kv, ev, func(d *Delta) error {
		return f.Feed(d, func(in *Input) error {
			s.key, s.val = AppendInputRecord(s.key[:0], s.val[:0], side, in)
			return send(InputPartition(in.Key, in.ID, parts), s.key, s.val)
		})
	}, func() error {
		s.key, s.val = AppendClearRecord(s.key[:0], s.val[:0], side)
		return send(-1, s.key, s.val)
	})
}

// Operator is stage n of a plan (n = len(Stages)+1: its materializer) as
// the driver of `run` runs it over one partition of the stage's log
// (driver.Operator): records of its log in, changes to the next stage's log
// (Out.Next, partitions of parts) or, at the end of the plan, to the sink
// (Out.Emit). The state must be a joinstate.Txn (a keyed.State with
// ScanChildren). Not safe for concurrent use.
//
// Fair fan-out (SetChunk > 0, join stages): an input's fan-out over the
// other side's rows at its join key that does not fit the chunk becomes a
// task of a skew.Scheduler (Join.ApplyChunked's FanOut, kept in the
// state's Aux keyspace with the key's later inputs waiting behind it),
// continued by Advance between other keys' inputs; Busy and Runnable
// report such tasks. The Scheduler's turns are kept in the state, so the
// steps are a function of the committed state and the records (what a
// driver stepping by input needs). A clear or a load record first
// finishes every task (Drain). Rows at Unmatchable never fan out and are
// applied at once. The materializer does each input at once.
type Operator struct {
	p     *plan.Plan
	n     int
	parts int32
	join  *Join
	mat   *Materializer
	next  *Feeder // the next stage's left side
	out   Output

	filtered Delta
	in       Input
	d        Delta
	vals     []row.Value
	key, val []byte
	rk       []byte
	kv       keyedState
	o        keyedlog.Out
	// Sent counts the records sent to the next stage.
	Sent Sent

	sched *skew.Scheduler // fan-outs in chunks (nil: the materializer)
	chunk int             // rows an input's fan-out emits in Step; <= 0: all at once
	xop   skew.Op
	fo    FanOut
	task  []byte
}

// NewOperator returns the operator of stage n (1-based; len(p.Stages)+1
// is the materializer) whose next stage's log has parts partitions.
func NewOperator(p *plan.Plan, n int, parts int32) (*Operator, error) {
	last := len(p.Stages)
	if p.Materialize {
		last++
	}
	if n < 1 || n > last {
		return nil, fmt.Errorf("cdcjoin: plan: no stage %d (the plan has %d)", n, last)
	}
	op := &Operator{p: p, n: n, parts: parts, out: Output{p: p}}
	if n <= len(p.Stages) {
		op.join = NewJoin(&p.Stages[n-1])
		op.sched = skew.NewScheduler(opExec{op})
		if n < len(p.Stages) {
			op.next = NewFeeder(&p.Stages[n], L)
		}
	} else {
		op.mat = NewMaterializer(p)
	}
	return op, nil
}

// Stages returns how many stages p runs as in `run` (its joins and, when it
// needs one, its materializer).
func Stages(p *plan.Plan) int {
	if p.Materialize {
		return len(p.Stages) + 1
	}
	return len(p.Stages)
}

// Stats returns the join's counters (zero for the materializer).
func (op *Operator) Stats() Stats {
	if op.join == nil {
		return Stats{}
	}
	return op.join.Stats
}

// SetChunk sets how many changes an input's fan-out emits in Step before
// the rest becomes work in progress for Advance (rows <= 0: none, every
// input is done at once; the default). Work in progress left in the state
// by a chunked run is still finished by Advance.
func (op *Operator) SetChunk(rows int) { op.chunk = rows }

// Chunked returns the number of fan-outs that did not fit one chunk, and
// Waited the number of inputs that waited behind one (since NewOperator;
// zero for the materializer).
func (op *Operator) Chunked() uint64 {
	if op.sched == nil {
		return 0
	}
	return op.sched.Started
}

// Waited: see Chunked.
func (op *Operator) Waited() uint64 {
	if op.sched == nil {
		return 0
	}
	return op.sched.Queued
}

// Load implements driver.Operator: the fan-outs in progress committed in t.
func (op *Operator) Load(t keyed.State) error {
	if op.sched == nil {
		return nil
	}
	return op.sched.Load(t)
}

// Busy implements driver.Operator: fan-outs are in progress.
func (op *Operator) Busy() bool { return op.sched != nil && op.sched.Busy() > 0 }

// Runnable implements driver.Operator: a fan-out in progress waits for
// nothing but its turn, so it is Busy.
func (op *Operator) Runnable() bool { return op.Busy() }

// Advance implements driver.Operator: the fan-outs in progress, round
// robin, by up to budget changes (budget < 0, or an Operator without
// chunking: all of them).
func (op *Operator) Advance(t keyed.State, budget int, out keyedlog.Out) (int, error) {
	if !op.Busy() {
		return 0, nil
	}
	if err := op.bind(t, out); err != nil {
		return 0, err
	}
	if op.chunk <= 0 {
		budget = -1
	}
	return op.sched.Step(t, budget, out)
}

// bind makes t and out the state and output of the calls that follow.
func (op *Operator) bind(t keyed.State, out keyedlog.Out) error {
	sc, ok := t.(scanner)
	if !ok {
		return errors.New("cdcjoin: plan stage: the state cannot scan rows across groups")
	}
	op.kv = keyedState{t: t, scan: sc}
	op.o = out
	return nil
}

// Step implements driver.Operator: one record of the stage's log.
func (op *Operator) Step(t keyed.State, m *keyedlog.Msg, out keyedlog.Out) error {
	if err := op.bind(t, out); err != nil {
		return err
	}
	return op.step(&op.kv, t, m, out)
}

// StepOn is Step on a State without chunks: the same record applied the
// same way to st, but every input's fan-out done at once, as Step does with
// SetChunk <= 0 (run's bulk rebuild of a stage partition steps its log up
// to the group's committed offset on an in-memory State with a Quiet out,
// then writes that State out: the same rows and values Step leaves in the
// pebble state over KeyedState at that offset, a position without fan-outs
// in progress, where a chunked fan-out has written what Apply writes). It
// fails while fan-outs are in progress (Busy: those live in a keyed.State).
func (op *Operator) StepOn(st State, m *keyedlog.Msg, out keyedlog.Out) error {
	if op.Busy() {
		return fmt.Errorf("cdcjoin: plan stage %d: internal: a record stepped on a State with fan-outs in progress", op.n)
	}
	op.o = out
	return op.step(st, nil, m, out)
}

// step applies record m to st (the view of t, when t is set: then inputs
// go through the Scheduler, and clears and loads drain it first; without t
// every input is done at once).
func (op *Operator) step(st State, t keyed.State, m *keyedlog.Msg, out keyedlog.Out) error {
	if m.Kind != keyedlog.KindStage {
		return fmt.Errorf("cdcjoin: plan stage %d: unexpected record kind %d in its log", op.n, m.Kind)
	}
	k := m.Key
	if len(k) < 1 {
		return fmt.Errorf("%w: empty stage record key", row.ErrCorrupt)
	}
	switch {
	case k[0] == recMat && op.mat != nil:
		rk, id, err := splitLen(k[1:])
		if err != nil {
			return err
		}
		if len(m.Value) > 0 && m.Value[0] == matLoad {
			ver, n := binary.Uvarint(m.Value[1:])
			if n <= 0 {
				return fmt.Errorf("%w: materializer load record", row.ErrCorrupt)
			}
			if op.vals, err = row.DecodeRow(op.vals[:0], m.Value[1+n:]); err != nil {
				return err
			}
			return op.mat.Load(st, rk, id, ver, op.vals)
		}
		op.d = Delta{Op: row.Retract, ID: id}
		if m.Value != nil {
			if op.vals, err = row.DecodeRow(op.vals[:0], m.Value); err != nil {
				return err
			}
			op.d.Op, op.d.Row = row.Upsert, op.vals
		}
		return op.mat.ApplyAt(st, rk, &op.d, m.Version, op.output)
	case op.join == nil:
		return fmt.Errorf("%w: stage record %q in the materializer's log", row.ErrCorrupt, k[0])
	case k[0] == recClear && len(k) == 2:
		if err := op.drain(t, out); err != nil {
			return err
		}
		return op.join.Clear(st, Side(k[1]), m.Version, op.emitter())
	case k[0] == recInput && len(k) >= 2:
		if len(m.Value) > 0 && m.Value[0]&flagLoad != 0 {
			s := Side(k[1])
			key, id, err := splitLen(k[2:])
			if err != nil {
				return err
			}
			if err := op.drain(t, out); err != nil {
				return err
			}
			f := m.Value[0]
			ver, pad, vals, err := decodeLoad(f, m.Value[1:], op.vals)
			op.vals = vals
			if err != nil {
				return err
			}
			return op.join.Load(st, s, key, id, f&flagMatchable != 0, ver, pad, vals)
		}
		s, err := op.decodeInput(k, m.Value)
		if err != nil {
			return err
		}
		if t == nil || op.in.Key[0] == Unmatchable || op.chunk <= 0 && !op.Busy() {
			return op.join.Apply(st, s, &op.in, m.Version, op.emitter())
		}
		op.xop = skew.Op{Kind: skew.OpApply, In: keyed.Input{JoinKey: k, ChildKey: m.Value}, Version: m.Version}
		budget := op.chunk
		if budget <= 0 {
			budget = -1
		}
		_, err = op.sched.Submit(t, op.in.Key, &op.xop, budget, out)
		return err
	}
	return fmt.Errorf("%w: stage record kind %q", row.ErrCorrupt, k[0])
}

// decodeInput decodes an input record (not a load) of the stage's log into
// op.in, returning its side.
func (op *Operator) decodeInput(k, value []byte) (Side, error) {
	s := Side(k[1])
	key, id, err := splitLen(k[2:])
	if err != nil {
		return 0, err
	}
	if len(key) == 0 {
		return 0, fmt.Errorf("%w: stage record without a join key", row.ErrCorrupt)
	}
	op.in = Input{Delete: true, Key: key, ID: id}
	if value != nil {
		if len(value) < 1 {
			return 0, fmt.Errorf("%w: stage record value", row.ErrCorrupt)
		}
		if op.vals, err = row.DecodeRow(op.vals[:0], value[1:]); err != nil {
			return 0, err
		}
		op.in = Input{Key: key, ID: id, Row: op.vals, Matchable: value[0]&flagMatchable != 0}
	}
	return s, nil
}

// drain finishes every fan-out in progress (before a clear or a load).
func (op *Operator) drain(t keyed.State, out keyedlog.Out) error {
	if t == nil || !op.Busy() {
		return nil
	}
	if err := op.sched.Drain(t, out); err != nil {
		return err
	}
	return op.bind(t, out)
}

// opExec is an Operator's skew.Executor. Its ops are input records of the
// stage's log: In.JoinKey is the record's key and In.ChildKey its value
// (nil: a delete), Version the input's version; its tasks are
// appendTask's encodings.
type opExec struct{ op *Operator }

// Run implements skew.Executor.
func (x opExec) Run(t keyed.State, _ []byte, sop *skew.Op, budget int, out keyedlog.Out) ([]byte, int, error) {
	if sop.Kind != skew.OpApply {
		return nil, 0, fmt.Errorf("cdcjoin: plan stage: unexpected op kind %d", sop.Kind)
	}
	x.op.fo = FanOut{}
	return x.op.runInput(t, sop.In.JoinKey, sop.In.ChildKey, sop.Version, budget, out)
}

// Resume implements skew.Executor.
func (x opExec) Resume(t keyed.State, _, task []byte, budget int, out keyedlog.Out) ([]byte, int, error) {
	key, value, version, err := decodeTask(task, &x.op.fo)
	if err != nil {
		return nil, 0, err
	}
	return x.op.runInput(t, key, value, version, budget, out)
}

// runInput runs (or continues, from op.fo) the input record key/value
// with version for up to budget changes; a task when work is left.
func (op *Operator) runInput(t keyed.State, key, value []byte, version uint64, budget int, out keyedlog.Out) ([]byte, int, error) {
	if err := op.bind(t, out); err != nil {
		return nil, 0, err
	}
	s, err := op.decodeInput(key, value)
	if err != nil {
		return nil, 0, err
	}
	before := op.fo.Fan
	more, err := op.join.ApplyChunked(&op.kv, s, &op.in, version, &op.fo, budget, op.emitter())
	used := int(op.fo.Fan - before)
	if err != nil || !more {
		return nil, used, err
	}
	op.task = appendTask(op.task[:0], key, value, version, &op.fo)
	return op.task, used, nil
}

// appendTask appends a fan-out in progress: uvarint version, the record's
// key and value (each uvarint(len+1) and the bytes, 0 for nil), a flag
// byte (1: Exists), uvarint Fan, the last identity done (as the key).
func appendTask(dst, key, value []byte, version uint64, fo *FanOut) []byte {
	dst = binary.AppendUvarint(dst, version)
	dst = nilbytes.Append(nilbytes.Append(dst, key), value)
	flags := byte(0)
	if fo.Exists {
		flags = 1
	}
	dst = binary.AppendUvarint(append(dst, flags), fo.Fan)
	return nilbytes.Append(dst, fo.After)
}

// decodeTask decodes appendTask's encoding; key and value alias b, fo's
// After is copied.
func decodeTask(b []byte, fo *FanOut) (key, value []byte, version uint64, err error) {
	bad := fmt.Errorf("%w: plan stage fan-out task", row.ErrCorrupt)
	version, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, nil, 0, bad
	}
	b = b[n:]
	var ok bool
	if key, b, ok = nilbytes.Read(b); !ok || key == nil {
		return nil, nil, 0, bad
	}
	if value, b, ok = nilbytes.Read(b); !ok || len(b) < 1 {
		return nil, nil, 0, bad
	}
	exists := b[0] == 1
	fan, n := binary.Uvarint(b[1:])
	if n <= 0 {
		return nil, nil, 0, bad
	}
	after, rest, ok := nilbytes.Read(b[1+n:])
	if !ok || len(rest) != 0 {
		return nil, nil, 0, bad
	}
	*fo = FanOut{Started: true, Exists: exists, Fan: fan}
	if after != nil {
		fo.After = append([]byte(nil), after...)
	}
	return key, value, version, nil
}

// emitter is where the join's output goes: its residual filter, then the
// next stage's log, the materializer's, or the sink.
func (op *Operator) emitter() Emit {
	var to Emit
	switch {
	case op.next != nil:
		to = op.toNext
	case op.p.Materialize:
		to = op.toMat
	default:
		to = op.output
	}
	if r := op.p.Stages[op.n-1].Residual; r != nil {
		return func(d *Delta) error { return Filter(r, d, &op.filtered, to) }
	}
	return to
}

func (op *Operator) send(p int32) error {
	if op.o.Next == nil {
		return keyedlog.ErrNoSender
	}
	op.Sent.Records++
	return op.o.Next.Send(p, op.key, op.val, nil)
}

func (op *Operator) toNext(d *Delta) error {
	if op.o.Quiet {
		return nil // an earlier owner sent it
	}
	return op.next.Feed(d, func(in *Input) error {
		op.key, op.val = AppendInputRecord(op.key[:0], op.val[:0], L, in)
		return op.send(InputPartition(in.Key, in.ID, op.parts))
	})
}

func (op *Operator) toMat(d *Delta) error {
	if op.o.Quiet {
		return nil
	}
	op.rk = RowKey(op.rk[:0], op.p, d.Row)
	op.key, op.val = AppendMatRecord(op.key[:0], op.val[:0], op.rk, d)
	return op.send(keyedlog.Partition(op.rk, op.parts))
}

func (op *Operator) output(d *Delta) error {
	c, err := op.out.Change(d)
	if err != nil {
		return err
	}
	return op.o.Emit(c)
}

// IsClearRecord reports whether key, a stage record's key after its kind
// (keyedlog.Msg.Key of a keyedlog.KindStage record), is a clear of a side
// (a truncate: a scan across the side's groups).
func IsClearRecord(key []byte) bool { return len(key) > 0 && key[0] == recClear }

// scanner is the scan across groups a State needs (joinstate.Txn has it).
type scanner interface {
	ScanChildren(prefix []byte, fn func(key, value []byte) error) error
}

// KeyedState returns a State over a keyed.State that can scan across groups
// (a joinstate.Txn): rows in its child keyspace, values in its parent
// keyspace (so the row cache answers point reads, absences included).
func KeyedState(t keyed.State) (State, error) {
	sc, ok := t.(scanner)
	if !ok {
		return nil, errors.New("cdcjoin: plan stage: the state cannot scan rows across groups")
	}
	return &keyedState{t: t, scan: sc}, nil
}

type keyedState struct {
	t    keyed.State
	scan scanner
}

func stopOK(err error) error {
	if err == ErrStop {
		return nil
	}
	return err
}

func (k *keyedState) Row(group, id []byte) ([]byte, bool, error) { return k.t.Child(group, id) }
func (k *keyedState) PutRow(group, id, value []byte) error       { return k.t.PutChild(group, id, value) }
func (k *keyedState) DeleteRow(group, id []byte) error           { return k.t.DeleteChild(group, id) }
func (k *keyedState) Rows(group []byte, fn func(id, value []byte) error) error {
	return stopOK(k.t.Children(group, fn))
}
func (k *keyedState) RowsAfter(group, after []byte, fn func(id, value []byte) error) error {
	return stopOK(k.t.ChildrenAfter(group, after, fn))
}
func (k *keyedState) ScanRows(prefix []byte, fn func(key, value []byte) error) error {
	return stopOK(k.scan.ScanChildren(prefix, fn))
}
func (k *keyedState) Value(key []byte) ([]byte, bool, error) { return k.t.Parent(key) }
func (k *keyedState) PutValue(key, value []byte) error       { return k.t.PutParent(key, value) }
func (k *keyedState) DeleteValue(key []byte) error           { return k.t.DeleteParent(key) }

package skew

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cdcjoin/cdcjoin/internal/nilbytes"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
)

// RouterConfig is a Router's partition and thresholds.
type RouterConfig struct {
	// Partition is the keyed partition the router joins; Partitions the
	// keyed topic's partition count.
	Partition, Partitions int32
	// Hot is the child count at which a key is salted (0: never); Cool
	// the count at or below which a salted key goes back to one key.
	Hot, Cool int64
	// Salts is the number of replicas of a key salted from now on.
	Salts int
	// Chunk is the rows (or forwards) per step of a fan-out or a move
	// (<= 0: every one at once).
	Chunk int
}

// HotKey is a salted key of the partition (for metrics and logs).
type HotKey struct {
	JoinKey  []byte
	Children int64
	Salts    int
	// Cooling: a release round is out (see Router).
	Cooling bool
}

// layout is a salted own key's state (Aux 'h' joinKey).
type layout struct {
	HotKey
	coolOrigin int64  // the release round out (when Cooling)
	acks       []byte // salts that confirmed it (bitmap)
}

func (l *layout) encode() []byte {
	b := binary.AppendUvarint(nil, uint64(l.Salts))
	if !l.Cooling {
		return b
	}
	b = binary.AppendVarint(b, l.coolOrigin)
	return append(b, l.acks...)
}

// acked reports whether every salt confirmed the round out.
func (l *layout) acked() bool {
	for s := 0; s < l.Salts; s++ {
		if l.acks[s/8]&(1<<(s%8)) == 0 {
			return false
		}
	}
	return true
}

func (l *layout) decode(v []byte) error {
	rd := newReader(v)
	l.Salts = int(rd.uvarint())
	if rd.ok && len(rd.b) > 0 {
		l.Cooling, l.coolOrigin = true, rd.varint()
		l.acks = append([]byte(nil), rd.b...)
	}
	if !rd.ok || (l.Cooling && len(l.acks) != (l.Salts+7)/8) {
		return fmt.Errorf("%w: skew layout", row.ErrCorrupt)
	}
	return nil
}

// RouterStats count what a Router did since it was made.
type RouterStats struct {
	Forwards  uint64 // records forwarded to replicas
	Proposals uint64 // layout changes proposed
	Salted    uint64 // keys that turned hot
	Cooled    uint64 // keys that cooled
	Duplicate uint64 // forwarded records dropped as already applied
}

// Router is one keyed partition's join with hot-key handling: the
// partition's own join keys (the keying stage's records) and the replicas
// of other partitions' hot keys (forwarded records), all through one
// Scheduler for fair fan-out.
//
// The hot key's own partition (home) stays its router and keeps its
// complete state: every input of the key still arrives there, in order, and
// is applied there, so the state always holds the unsalted join (counts,
// LEFT padding, previous versions for changelog cancels come from it). What
// salting changes is who emits the key's rows: each (key, child) row
// belongs to the replica (key, salt) with salt = SaltOf(child) < Salts, on
// partition SaltPartition, which holds the parent and those children; home
// forwards the key's parent inputs to every replica (each fans out its
// share) and each child input to its replica, and emits only the LEFT
// join's padded row itself. Every version is home's (forwards carry them),
// and each row is emitted by one partition at a time, so its versions
// increase in emission order across the moves too:
//
//   - Salting (home → replicas): the layout change copies the parent and
//     children into the replicas with their stored versions (no output).
//     Home's earlier output is flushed before the copies commit, so the
//     replicas' first rows come after it.
//   - Cooling (replicas → home): home sends each replica a release; a
//     replica confirms it (an ack record to home) once everything
//     forwarded before it is emitted and flushed. Meanwhile the key's
//     inputs wait at home (its task is blocked on the confirmations); when
//     every replica has confirmed, home deletes the replicas (no output)
//     and emits the key's rows again itself, from the waiting inputs on.
//
// Layout changes are decided at home from the exact child count (kept in
// the state's Aux keyspace): a key reaching Hot children is proposed for
// salting, a salted key down to Cool for cooling, by a layout record the
// router writes to its own partition; the change happens when that record
// is read back, at a position of the log, and a cooling ends once its last
// ack is read, before any later input of the key (and before a later
// truncate), so that a partition rebuilt from the log makes the same
// changes at the same points of each key's history. Salting and the end of a cooling
// are moves in chunks (the key's later inputs wait behind them). Truncates
// forward their effect on salted keys to the replicas.
//
// Replicas drop duplicate forwards (after a crash, home forwards again what
// its uncommitted batch forwarded) by (Origin, Sub), the last applied being
// kept per replica in the state.
//
// The router's records (forwards, layout proposals, acks) go to its
// driver's Out.Send, in the batch in progress: they must be durable before
// the batch's state commits (a Kafka transaction committed before the
// state), and are dropped with an aborted batch. Out.Quiet (a partition
// rebuilt below the group's committed offset, emitting nothing): they are
// not sent — the previous owner sent them — and work is not chunked.
//
// Router is the regular join as an operator of the Kafka driver: Step
// takes every message of the partition's keyed log but epoch markers,
// Advance does the work in progress. Not safe for concurrent use; the
// in-memory view follows the state: after an aborted Txn make a new Router
// and Load it.
type Router struct {
	cfg   RouterConfig
	spec  *keyed.Spec
	join  *keyed.Join // own keys
	rjoin *keyed.Join // replicas: INNER (padded rows are emitted at home)
	sched *Scheduler
	// OnLayout, if set, is told when a key turns hot (hot) or cools
	// (never for a Quiet call).
	OnLayout func(joinKey []byte, hot bool, children int64, salts int)
	Stats    RouterStats

	noWait     bool               // tests: end coolings at once (broken on purpose)
	truncating bool               // draining before a truncate: no cooling starts
	hot        map[string]*layout // salted own keys
	exact      bool               // counts kept since the state was new (else: counted on first use)
	proposed   map[string]OpKind  // layout records sent and not read back yet
	rs         replicaState
	op         Op
	f          keyedlog.Forward
	fo         keyed.FanOut
	pr         keyed.ParentRecord
	cr         keyed.ChildRecord
	key        []byte
	kb, vb     []byte
	hb         []byte
}

// Scheduler key spaces: own join keys and replicas (join key, salt).
const (
	schedOwn     = 0x00
	schedReplica = 0x01
)

// Aux keys of the router (besides the Scheduler's and the replicas').
const (
	auxExact  = 'N' // present: every count was kept since the state was new
	auxCount  = 'n' // joinKey → uvarint child count (own keys)
	auxLayout = 'h' // joinKey → layout (salted own keys)
	auxSeen   = 'w' // joinKey salt → origin(8) sub(4): last forward applied to a replica
)

// Task kinds (first byte of a task).
const (
	taskFanOut  = 'F' // own fan-out: keyed.FanOut
	taskReplica = 'R' // replica fan-out: salt(2) keyed.FanOut
	taskMove    = 'M' // salting (copies) or the end of a cooling (deletes): see move
	taskCool    = 'W' // a cooling waiting for its replicas' confirmations (in the layout)
)

// NewRouter returns a router of partition cfg.Partition for spec.
func NewRouter(spec *keyed.Spec, cfg RouterConfig) *Router {
	inner := *spec
	inner.Left = false
	r := &Router{cfg: cfg, spec: spec, join: keyed.NewJoin(spec), rjoin: keyed.NewJoin(&inner),
		hot: map[string]*layout{}, proposed: map[string]OpKind{}}
	r.join.NoFanOut = func(jk []byte) (bool, error) { return r.hot[string(jk)] != nil, nil }
	r.sched = NewScheduler(r)
	return r
}

// MarkFresh records that t is a new state: child counts kept from now on
// are exact from the start. Call it before Load on a state nothing was
// applied to; on a state written without counts (an earlier cdcjoin) a
// key's count is taken by scanning its children the first time it is
// needed.
func (r *Router) MarkFresh(t keyed.State) error { return t.PutAux([]byte{auxExact}, []byte{1}) }

// MarkInexact records that t's rows were (or are about to be) written
// without the router (a bulk rebuild of a partition's plain records,
// before any of the router's own records): child counts are no longer
// exact, and a key's count is taken by scanning its children the first
// time it is needed.
func (r *Router) MarkInexact(t keyed.State) error {
	r.exact = false
	return t.DeleteAux([]byte{auxExact})
}

// SetChunk changes the step budget from the next input on: n rows per step,
// or n <= 0 for all the work of an input at once (what Out.Quiet does). Work
// in progress continues with the new budget. A driver whose sink must see
// the same changes in the same order when it replays input after a crash
// (sink.Positioned) either sets n <= 0 and drains what an input unblocks
// (an ack) with that input, or steps the work by input: Advance with a
// budget after every message, the same whenever the message is read
// again. Then the changes are a function of the input alone (the
// Scheduler's turns are kept in the state), not of how time was shared
// between inputs and steps.
func (r *Router) SetChunk(n int) { r.cfg.Chunk = n }

// Load reads the salted keys (with their child counts) and the work in
// progress committed in t.
func (r *Router) Load(t keyed.State) error {
	r.hot = map[string]*layout{}
	_, exact, err := t.Aux([]byte{auxExact})
	if err != nil {
		return err
	}
	r.exact = exact
	if err := r.sched.Load(t); err != nil {
		return err
	}
	return t.AuxScan([]byte{auxLayout}, nil, func(k, v []byte) error {
		l := &layout{}
		if err := l.decode(v); err != nil {
			return err
		}
		l.JoinKey = append([]byte(nil), k[1:]...)
		r.hot[string(l.JoinKey)] = l
		c, ok, err := t.Aux(append([]byte{auxCount}, l.JoinKey...))
		if n, m := binary.Uvarint(c); ok && err == nil && m > 0 {
			l.Children = int64(n)
		}
		return err
	})
}

// Join returns the join of the partition's own keys (its Stats count the
// inputs applied).
func (r *Router) Join() *keyed.Join { return r.join }

// Busy reports whether work is in progress (fan-outs, moves, coolings
// waiting for their confirmations, or inputs waiting for them).
func (r *Router) Busy() bool { return r.sched.Busy() > 0 }

// Runnable reports whether work in progress can advance now (Advance),
// that is, besides coolings waiting for confirmations that come through
// the log.
func (r *Router) Runnable() bool { return r.sched.Runnable() > 0 }

// Chunked returns how many fan-outs and moves did not fit their first
// chunk (since NewRouter): work done in steps.
func (r *Router) Chunked() uint64 { return r.sched.Started }

// Backlog returns the keys with work in progress and the inputs waiting.
func (r *Router) Backlog() (keys int, waiting uint64) { return r.sched.Busy(), r.sched.Waiting() }

// HotKeys returns the salted keys, most children first.
func (r *Router) HotKeys() []HotKey {
	out := make([]HotKey, 0, len(r.hot))
	for _, h := range r.hot {
		out = append(out, h.HotKey)
	}
	slices.SortFunc(out, func(a, b HotKey) int {
		if a.Children != b.Children {
			if a.Children > b.Children {
				return -1
			}
			return 1
		}
		return bytes.Compare(a.JoinKey, b.JoinKey)
	})
	return out
}

func (r *Router) stepBudget(out keyedlog.Out) int {
	if out.Quiet || r.cfg.Chunk <= 0 {
		return -1
	}
	return r.cfg.Chunk
}

func (r *Router) ownKey(jk []byte) []byte {
	r.key = append(append(r.key[:0], schedOwn), jk...)
	return r.key
}

func (r *Router) submitOwn(t keyed.State, jk []byte, out keyedlog.Out) error {
	_, err := r.sched.Submit(t, r.ownKey(jk), &r.op, r.stepBudget(out), out)
	return err
}

// Step applies one message of the partition's keyed log (m.Pos its
// offset; not an epoch marker): an input of the partition's own keys with
// m.Version (or a truncate), now or behind its key's work in progress; a
// layout record of an own key; a replica's release confirmation; a forward
// to one of the partition's replicas.
func (r *Router) Step(t keyed.State, m *keyedlog.Msg, out keyedlog.Out) error {
	switch m.Kind {
	case keyedlog.KindInput:
		if m.In.Kind == keyed.Truncate {
			return r.truncate(t, &m.In, m.Pos, m.Version, out)
		}
		r.op = Op{Kind: OpApply, In: m.In, Version: m.Version, Origin: m.Pos}
		return r.submitOwn(t, m.In.JoinKey, out)
	case keyedlog.KindLayout:
		return r.layout(t, m.JoinKey, OpKind(m.Layout), m.Pos, out)
	case keyedlog.KindAck:
		return r.ack(t, m.JoinKey, m.Salt, m.Origin)
	case keyedlog.KindForward:
		return r.forwarded(t, &m.Fwd, out)
	}
	return fmt.Errorf("cdcjoin: skew: router: unexpected %s message", m.Kind)
}

// layout applies a layout record of an own key read at offset.
func (r *Router) layout(t keyed.State, joinKey []byte, op OpKind, offset int64, out keyedlog.Out) error {
	delete(r.proposed, string(joinKey))
	r.op = Op{Kind: op, In: keyed.Input{JoinKey: joinKey}, Origin: offset}
	return r.submitOwn(t, joinKey, out)
}

// ack applies a replica's release confirmation: when every replica of a
// cooling key has confirmed, the key's blocked task goes on at the next
// Advance (the key goes back home, at the ack's position).
func (r *Router) ack(t keyed.State, joinKey []byte, salt uint16, origin int64) error {
	h := r.hot[string(joinKey)]
	if h == nil || !h.Cooling || h.coolOrigin != origin || int(salt) >= h.Salts {
		return nil // a round that was cancelled, or a duplicate
	}
	h.acks[salt/8] |= 1 << (salt % 8)
	if h.acked() {
		r.sched.Unblock(r.ownKey(joinKey))
	}
	return r.saveLayout(t, h)
}

// forwarded applies a forward to one of the partition's replicas, unless
// it was applied already.
func (r *Router) forwarded(t keyed.State, f *keyedlog.Forward, out keyedlog.Out) error {
	r.key = binary.BigEndian.AppendUint16(append(append(r.key[:0], auxSeen), f.JoinKey...), f.Salt)
	last, ok, err := t.Aux(r.key)
	if err != nil {
		return err
	}
	if ok && len(last) == 12 {
		o, s := int64(binary.BigEndian.Uint64(last)), binary.BigEndian.Uint32(last[8:])
		if f.Origin < o || (f.Origin == o && f.Sub <= s) {
			r.Stats.Duplicate++
			return nil
		}
	}
	var seen [12]byte
	binary.BigEndian.PutUint64(seen[:], uint64(f.Origin))
	binary.BigEndian.PutUint32(seen[8:], f.Sub)
	if err := t.PutAux(r.key, seen[:]); err != nil {
		return err
	}
	r.op = Op{Kind: OpKind(f.Mode), Version: f.Version, Origin: f.Origin,
		In: keyed.Input{Side: f.Side, JoinKey: f.JoinKey, ChildKey: f.ChildKey, Row: f.Row}}
	switch {
	case f.Mode == keyedlog.ModeCopy && !f.Delete && f.Side == row.Parent:
		r.op.In.Kind, r.op.In.Version, r.op.In.PadVersion = keyed.ParentLoad, f.Version, f.PadVersion
	case f.Mode == keyedlog.ModeCopy && !f.Delete:
		r.op.In.Kind, r.op.In.Version = keyed.ChildLoad, f.Version
	case f.Side == row.Parent && f.Delete:
		r.op.In.Kind = keyed.ParentDelete
	case f.Side == row.Parent:
		r.op.In.Kind = keyed.ParentUpsert
	case f.Delete:
		r.op.In.Kind = keyed.ChildDelete
	default:
		r.op.In.Kind = keyed.ChildUpsert
	}
	r.key = binary.BigEndian.AppendUint16(append(append(r.key[:0], schedReplica), f.JoinKey...), f.Salt)
	_, err = r.sched.Submit(t, r.key, &r.op, r.stepBudget(out), out)
	return err
}

// Advance advances the work in progress, round robin, by up to budget rows
// (or forwards) — all of it with budget < 0, a Quiet out or a router
// without chunking — and returns what it took. Coolings waiting for their
// confirmations (and the inputs behind them) stay.
func (r *Router) Advance(t keyed.State, budget int, out keyedlog.Out) (int, error) {
	if r.sched.Busy() == 0 {
		return 0, nil
	}
	if r.stepBudget(out) < 0 {
		budget = -1
	}
	return r.sched.Step(t, budget, out)
}

// Run implements Executor.
func (r *Router) Run(t keyed.State, key []byte, op *Op, budget int, out keyedlog.Out) ([]byte, int, error) {
	if len(key) > 0 && key[0] == schedReplica {
		return r.runReplica(t, key[1:], op, budget, out)
	}
	jk := key[1:]
	switch op.Kind {
	case OpApply:
		return r.applyOwn(t, jk, op, budget, out)
	case OpSalt:
		return r.salt(t, jk, op, budget, out)
	case OpCool:
		h := r.hot[string(jk)]
		switch {
		case h == nil || h.Cooling || r.truncating:
			return nil, 0, nil // not salted (a proposal sent twice); or left for a later proposal
		case r.noWait:
			return r.unsalt(t, jk, op.Origin, budget, out)
		}
		if err := r.release(t, h, op.Origin, out); err != nil {
			return nil, 0, err
		}
		return []byte{taskCool}, 0, nil
	}
	return nil, 0, fmt.Errorf("cdcjoin: skew: unexpected op %d for an own key", op.Kind)
}

// Resume implements Executor.
func (r *Router) Resume(t keyed.State, key, task []byte, budget int, out keyedlog.Out) ([]byte, int, error) {
	switch task[0] {
	case taskFanOut:
		return r.resumeFanOut(r.join, t, task, budget, out.Emit)
	case taskReplica:
		if len(task) < 3 {
			return nil, 0, fmt.Errorf("%w: replica task", row.ErrCorrupt)
		}
		return r.resumeFanOut(r.rjoin, r.rs.bind(t, binary.BigEndian.Uint16(task[1:3])), task, budget, out.Emit)
	case taskMove:
		var m move
		if err := m.decode(task); err != nil {
			return nil, 0, err
		}
		return r.continueMove(t, key[1:], &m, budget, out)
	case taskCool:
		jk := key[1:]
		h := r.hot[string(jk)]
		switch {
		case h == nil || !h.Cooling:
			return nil, 0, nil // cancelled (by a truncate): the key stays salted
		case !h.acked():
			return task, 0, nil // blocked until the confirmations come
		}
		return r.unsalt(t, jk, h.coolOrigin, budget, out)
	}
	return nil, 0, fmt.Errorf("%w: unknown skew task %q", row.ErrCorrupt, task[0])
}

func (r *Router) rows(j *keyed.Join) uint64 { return j.Stats.Upserts + j.Stats.Retractions }

// fanOutTask encodes a fan-out as a task: kind, header, keyed.FanOut.
func fanOutTask(kind byte, header []byte, fo *keyed.FanOut) []byte {
	return keyed.AppendFanOut(append([]byte{kind}, header...), fo)
}

func (r *Router) resumeFanOut(j *keyed.Join, t keyed.State, task []byte, budget int, emit keyed.Emit) ([]byte, int, error) {
	hdr := 1
	if task[0] == taskReplica {
		hdr = 3
	}
	if err := keyed.DecodeFanOut(task[hdr:], &r.fo); err != nil {
		return nil, 0, err
	}
	before := r.rows(j)
	done, err := j.Continue(t, &r.fo, budget, emit)
	used := int(r.rows(j) - before)
	if err != nil || done {
		return nil, used, err
	}
	return fanOutTask(task[0], task[1:hdr], &r.fo), used, nil
}

// applyOwn applies an input of an own key: at home (fanning out) when the
// key is not salted; else at home emitting only the padded row, and
// forwarded to the replica(s), which emit the rest.
func (r *Router) applyOwn(t keyed.State, jk []byte, op *Op, budget int, out keyedlog.Out) ([]byte, int, error) {
	h := r.hot[string(jk)]
	before := r.rows(r.join)
	var task []byte
	if h != nil {
		padOnly := func(c *row.Change) error {
			if c.ChildKey != nil {
				return nil // the replica's
			}
			return out.Emit(c)
		}
		if err := r.join.Apply(t, &op.In, op.Version, padOnly); err != nil {
			return nil, 0, err
		}
		if err := r.forwardInput(jk, op, h.Salts, out); err != nil {
			return nil, 0, err
		}
	} else {
		fo, err := r.join.Start(t, &op.In, op.Version, budget, out.Emit)
		if err != nil {
			return nil, 0, err
		}
		if fo != nil {
			task = fanOutTask(taskFanOut, nil, fo)
		}
	}
	used := int(r.rows(r.join) - before)
	n, scanned, err := r.count(t, jk)
	if err != nil {
		return nil, used, err
	}
	// A scan (inexact counts, a key's first count) ran after the input:
	// its delta is in n.
	if d := r.join.ChildDelta; d != 0 && !scanned {
		n += int64(d)
		if err := r.setCount(t, jk, n); err != nil {
			return nil, used, err
		}
	}
	if h == nil {
		if r.cfg.Hot > 0 && n >= r.cfg.Hot {
			return task, used, r.propose(jk, OpSalt, out)
		}
		return task, used, nil
	}
	h.Children = n
	if err := r.saveLayout(t, h); err != nil {
		return nil, used, err
	}
	if !h.Cooling && (n <= r.cfg.Cool || r.cfg.Hot <= 0) {
		return task, used, r.propose(jk, OpCool, out) // salting was turned off: cool
	}
	return task, used, nil
}

// forwardInput sends an input of a salted key to its replica(s): a parent
// input to every salt, a child input to its salt.
func (r *Router) forwardInput(jk []byte, op *Op, salts int, out keyedlog.Out) error {
	in := &op.In
	r.f = keyedlog.Forward{Mode: keyedlog.ModeApply, Side: in.Side, JoinKey: jk, ChildKey: in.ChildKey, Row: in.Row, Version: op.Version,
		Origin: op.Origin, Delete: in.Kind == keyed.ParentDelete || in.Kind == keyed.ChildDelete}
	if in.Kind == keyed.ParentLoad || in.Kind == keyed.ChildLoad {
		// A row handed over with its versions: the replica loads it too.
		r.f.Mode, r.f.Version, r.f.PadVersion = keyedlog.ModeCopy, in.Version, in.PadVersion
	}
	if in.Side == row.Child {
		r.f.Salt = SaltOf(in.ChildKey, salts)
		return r.forward(&r.f, out)
	}
	for s := 0; s < salts; s++ {
		r.f.Salt = uint16(s)
		if err := r.forward(&r.f, out); err != nil {
			return err
		}
	}
	return nil
}

func (r *Router) forward(f *keyedlog.Forward, out keyedlog.Out) error {
	if out.Quiet {
		return nil
	}
	if out.Send == nil {
		return keyedlog.ErrNoSender
	}
	r.kb = keyedlog.AppendForwardKey(r.kb[:0], f)
	r.vb = keyedlog.AppendForwardValue(r.vb[:0], f)
	if f.Delete {
		r.vb = nil
	}
	r.hb = keyedlog.AppendForwardHeader(r.hb[:0], f)
	r.Stats.Forwards++
	return out.Send.Send(SaltPartition(f.JoinKey, f.Salt, r.cfg.Partitions), r.kb, r.vb, r.hb)
}

// propose writes a layout record for jk to the own partition, once until
// it is read back.
func (r *Router) propose(jk []byte, op OpKind, out keyedlog.Out) error {
	if out.Quiet || r.proposed[string(jk)] == op {
		return nil
	}
	if out.Send == nil {
		return keyedlog.ErrNoSender
	}
	r.proposed[string(jk)] = op
	r.Stats.Proposals++
	return out.Send.Send(r.cfg.Partition, keyedlog.AppendLayoutKey(nil, jk), keyedlog.LayoutValue(keyedlog.LayoutOp(op)), nil)
}

// release sends a round of releases (origin) to every replica of h.
func (r *Router) release(t keyed.State, h *layout, origin int64, out keyedlog.Out) error {
	h.Cooling, h.coolOrigin, h.acks = true, origin, make([]byte, (h.Salts+7)/8)
	r.f = keyedlog.Forward{Mode: keyedlog.ModeRelease, Side: row.Parent, JoinKey: h.JoinKey, Origin: origin}
	for s := 0; s < h.Salts; s++ {
		r.f.Salt, r.f.Sub = uint16(s), uint32(s)
		if err := r.forward(&r.f, out); err != nil {
			return err
		}
	}
	return r.saveLayout(t, h)
}

func (r *Router) saveLayout(t keyed.State, h *layout) error {
	return t.PutAux(append([]byte{auxLayout}, h.JoinKey...), h.encode())
}

// count returns jk's child count as kept in t. With inexact counts, a key
// without a kept count is counted by a scan of its children in t (and the
// count kept): scanned, n is then the count with every input applied to t
// so far, the caller's current one included.
func (r *Router) count(t keyed.State, jk []byte) (n int64, scanned bool, err error) {
	v, ok, err := t.Aux(append([]byte{auxCount}, jk...))
	if err != nil {
		return 0, false, err
	}
	if !ok {
		if r.exact {
			return 0, false, nil
		}
		if err := t.Children(jk, func(_, _ []byte) error { n++; return nil }); err != nil {
			return 0, false, err
		}
		return n, true, r.setCount(t, jk, n)
	}
	c, m := binary.Uvarint(v)
	if m <= 0 {
		return 0, false, fmt.Errorf("%w: skew child count", row.ErrCorrupt)
	}
	return int64(c), false, nil
}

func (r *Router) setCount(t keyed.State, jk []byte, n int64) error {
	k := append([]byte{auxCount}, jk...)
	if n <= 0 && r.exact {
		return t.DeleteAux(k)
	}
	return t.PutAux(k, binary.AppendUvarint(nil, uint64(n)))
}

// move copies an own key's rows into its replicas (salting) or deletes
// them there (the end of a cooling), children after After still to go.
type move struct {
	del    bool
	salts  int
	origin int64
	sub    uint32
	after  []byte
}

func (m *move) encode() []byte {
	b := []byte{taskMove, 0}
	if m.del {
		b[1] = 1
	}
	b = binary.AppendUvarint(b, uint64(m.salts))
	b = binary.AppendVarint(b, m.origin)
	b = binary.AppendUvarint(b, uint64(m.sub))
	return nilbytes.Append(b, m.after)
}

func (m *move) decode(b []byte) error {
	if len(b) < 2 {
		return fmt.Errorf("%w: skew move task", row.ErrCorrupt)
	}
	rd := newReader(b[2:])
	m.del = b[1] == 1
	m.salts, m.origin, m.sub = int(rd.uvarint()), rd.varint(), uint32(rd.uvarint())
	m.after = append([]byte(nil), rd.bytes()...)
	if !rd.ok {
		return fmt.Errorf("%w: skew move task", row.ErrCorrupt)
	}
	if len(m.after) == 0 {
		m.after = nil
	}
	return nil
}

// salt applies a salting read back from the log: the key's replicas get
// copies of its parent and children (in chunks). A key salted already (a
// proposal sent twice) is left alone.
func (r *Router) salt(t keyed.State, jk []byte, op *Op, budget int, out keyedlog.Out) ([]byte, int, error) {
	if r.hot[string(jk)] != nil {
		return nil, 0, nil
	}
	n, _, err := r.count(t, jk) // no input applied since the count: a scan is the count
	if err != nil {
		return nil, 0, err
	}
	h := &layout{HotKey: HotKey{JoinKey: append([]byte(nil), jk...), Children: n, Salts: r.cfg.Salts}}
	r.hot[string(jk)] = h
	if err := r.saveLayout(t, h); err != nil {
		return nil, 0, err
	}
	r.Stats.Salted++
	if r.OnLayout != nil && !out.Quiet {
		r.OnLayout(jk, true, n, h.Salts)
	}
	if n <= r.cfg.Cool || r.cfg.Hot <= 0 {
		// The proposal is stale (the key lost children while its layout
		// record was on its way, behind the partition's backlog): it is
		// applied all the same (the change must be where the record is,
		// for a rebuild to repeat it) and undone.
		if err := r.propose(jk, OpCool, out); err != nil {
			return nil, 0, err
		}
	}
	return r.startMove(t, jk, &move{salts: h.Salts, origin: op.Origin}, budget, out)
}

// unsalt ends a cooling whose releases every replica confirmed: the key's
// rows are home's to emit again, and its replicas are deleted (in chunks).
// The deletes carry the cooling's origin (the OpCool's offset), numbered
// after its releases: the key's inputs waiting behind the cooling come
// later in the log, and a replica must see its forwards in increasing
// (origin, sub) order.
func (r *Router) unsalt(t keyed.State, jk []byte, origin int64, budget int, out keyedlog.Out) ([]byte, int, error) {
	h := r.hot[string(jk)]
	if h == nil {
		return nil, 0, nil
	}
	delete(r.hot, string(jk))
	if err := t.DeleteAux(append([]byte{auxLayout}, jk...)); err != nil {
		return nil, 0, err
	}
	r.Stats.Cooled++
	if r.OnLayout != nil && !out.Quiet {
		r.OnLayout(jk, false, h.Children, h.Salts)
	}
	return r.startMove(t, jk, &move{del: true, salts: h.Salts, origin: origin, sub: uint32(h.Salts)}, budget, out)
}

// startMove copies (or deletes) the parent in every replica, then the
// children.
func (r *Router) startMove(t keyed.State, jk []byte, m *move, budget int, out keyedlog.Out) ([]byte, int, error) {
	p, ok, err := t.Parent(jk)
	if err != nil {
		return nil, 0, err
	}
	if ok && !m.del {
		if err := keyed.DecodeParent(p, &r.pr); err != nil {
			return nil, 0, err
		}
	}
	if ok || m.del {
		r.f = keyedlog.Forward{Mode: keyedlog.ModeCopy, Side: row.Parent, JoinKey: jk, Delete: m.del, Origin: m.origin,
			Row: r.pr.Row, Version: r.pr.Version, PadVersion: r.pr.PadVersion}
		for s := 0; s < m.salts; s++ {
			r.f.Salt, r.f.Sub = uint16(s), m.sub
			m.sub++
			if err := r.forward(&r.f, out); err != nil {
				return nil, 0, err
			}
		}
	}
	return r.continueMove(t, jk, m, budget, out)
}

var errMoveBudget = errors.New("cdcjoin: skew: move budget spent")

// continueMove forwards the copies (or deletes) of up to budget children.
func (r *Router) continueMove(t keyed.State, jk []byte, m *move, budget int, out keyedlog.Out) ([]byte, int, error) {
	used := 0
	more := false
	err := t.ChildrenAfter(jk, m.after, func(ck, v []byte) error {
		if budget >= 0 && used == budget {
			more = true
			return errMoveBudget
		}
		r.f = keyedlog.Forward{Mode: keyedlog.ModeCopy, Side: row.Child, JoinKey: jk, ChildKey: ck, Delete: m.del,
			Salt: SaltOf(ck, m.salts), Origin: m.origin, Sub: m.sub}
		if !m.del {
			if err := keyed.DecodeChild(v, &r.cr); err != nil {
				return err
			}
			r.f.Row, r.f.Version = r.cr.Row, r.cr.Version
		}
		m.sub++
		used++
		if budget >= 0 {
			m.after = append(m.after[:0], ck...)
		}
		return r.forward(&r.f, out)
	})
	if err == errMoveBudget {
		err = nil
	}
	if err != nil || !more {
		return nil, used, err
	}
	return m.encode(), used, nil
}

// runReplica applies a forwarded op to replica (join key, salt) (rk is
// joinKey salt).
func (r *Router) runReplica(t keyed.State, rk []byte, op *Op, budget int, out keyedlog.Out) ([]byte, int, error) {
	salt := binary.BigEndian.Uint16(rk[len(rk)-2:])
	st := r.rs.bind(t, salt)
	in := &op.In
	switch op.Kind {
	case OpApply:
		before := r.rows(r.rjoin)
		fo, err := r.rjoin.Start(st, in, op.Version, budget, out.Emit)
		used := int(r.rows(r.rjoin) - before)
		if err != nil || fo == nil {
			return nil, used, err
		}
		return fanOutTask(taskReplica, rk[len(rk)-2:], fo), used, nil
	case OpCopy:
		switch in.Kind {
		case keyed.ParentDelete:
			return nil, 0, st.DeleteParent(in.JoinKey)
		case keyed.ChildDelete:
			return nil, 0, st.DeleteChild(in.JoinKey, in.ChildKey)
		}
		return nil, 0, r.rjoin.Apply(st, in, op.Version, discard)
	case OpRelease:
		// Everything forwarded before the release is done (ops of a
		// replica run in order); the confirmation commits after this
		// batch's output is flushed.
		if out.Quiet {
			return nil, 0, nil
		}
		if out.Send == nil {
			return nil, 0, keyedlog.ErrNoSender
		}
		return nil, 0, out.Send.Send(keyedlog.Partition(in.JoinKey, r.cfg.Partitions), keyedlog.AppendAckKey(nil, in.JoinKey, salt), keyedlog.AckValue(op.Origin), nil)
	}
	return nil, 0, fmt.Errorf("cdcjoin: skew: unexpected op %d for a replica", op.Kind)
}

// truncate applies a truncate after finishing all work in progress. The
// salted keys' rows are their replicas' to retract: a parent truncate
// forwards a parent delete to every replica, a children truncate the
// delete of every child; salted keys left without children are proposed
// for cooling.
func (r *Router) truncate(t keyed.State, in *keyed.Input, offset int64, version uint64, out keyedlog.Out) error {
	// Coolings still waiting for confirmations are cancelled (their keys
	// stay salted: the inputs waiting behind them are forwarded, and
	// coolings they propose wait for later), so that all work drains
	// before the truncate; confirmed ones end.
	for _, h := range r.hot {
		if h.Cooling && !h.acked() {
			h.Cooling, h.acks = false, nil
			if err := r.saveLayout(t, h); err != nil {
				return err
			}
			r.sched.Unblock(r.ownKey(h.JoinKey))
		}
	}
	r.truncating = true
	_, err := r.Advance(t, -1, out)
	r.truncating = false
	if err != nil {
		return err
	}
	if r.sched.Busy() > 0 {
		return fmt.Errorf("cdcjoin: skew: work left before a truncate")
	}
	keys := make([]string, 0, len(r.hot))
	for k := range r.hot {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the same forwards in the same order when replayed
	var sub uint32
	for _, k := range keys {
		h := r.hot[k]
		jk := h.JoinKey
		if in.Side == row.Child {
			err := t.Children(jk, func(ck, _ []byte) error {
				r.f = keyedlog.Forward{Mode: keyedlog.ModeApply, Side: row.Child, JoinKey: jk, ChildKey: ck, Delete: true, Version: version,
					Origin: offset, Salt: SaltOf(ck, h.Salts), Sub: sub}
				sub++
				return r.forward(&r.f, out)
			})
			if err != nil {
				return err
			}
		} else {
			r.f = keyedlog.Forward{Mode: keyedlog.ModeApply, Side: row.Parent, JoinKey: jk, Delete: true, Version: version, Origin: offset}
			for s := 0; s < h.Salts; s++ {
				r.f.Salt, r.f.Sub = uint16(s), sub
				sub++
				if err := r.forward(&r.f, out); err != nil {
					return err
				}
			}
		}
	}
	if err := r.join.Apply(t, in, version, out.Emit); err != nil {
		return err
	}
	if in.Side != row.Child {
		return nil
	}
	err = t.AuxScan([]byte{auxCount}, nil, func(k, _ []byte) error { return t.DeleteAux(k) })
	if err != nil {
		return err
	}
	if !r.exact { // no children left: every count is known (0) from here on
		if err := r.MarkFresh(t); err != nil {
			return err
		}
		r.exact = true
	}
	for _, k := range keys {
		h := r.hot[k]
		h.Children = 0
		if !h.Cooling {
			if err := r.propose(h.JoinKey, OpCool, out); err != nil {
				return err
			}
		}
	}
	return nil
}

func discard(*row.Change) error { return nil }

package skew

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
)

// Executor runs the ops a Scheduler hands it. Run executes op on key (which
// has no task in progress) with a budget of rows (changes emitted, or
// children visited; budget < 0: no limit); when work is left it returns a
// task, an encoding only the Executor reads, that Resume continues later.
// used is the budget spent. The task bytes are the Scheduler's after the
// call (it stores them). Effects go to out (the driver's, passed on).
type Executor interface {
	Run(t keyed.State, key []byte, op *Op, budget int, out keyedlog.Out) (task []byte, used int, err error)
	// Resume continues a task of key; next is the rest (nil: finished).
	// A task that waits for something outside (a confirmation from
	// another partition) returns itself unchanged with used 0: the key is
	// blocked, and not resumed again until Unblock.
	Resume(t keyed.State, key, task []byte, budget int, out keyedlog.Out) (next []byte, used int, err error)
}

// Scheduler runs per-key ops fairly: a key's work that does not fit a
// budget (a fan-out of millions of rows) becomes a task advanced in bounded
// steps between other keys' inputs, and later ops of that key wait behind
// it, so per-key order is kept while other keys stay fast.
//
// Persistence: tasks and waiting ops live in the state's Aux keyspace
// ('t' key → task, 'q' key seq → op) and commit with it, so a crash resumes
// the committed steps and a resumed fan-out emits the same rows with the
// same versions. Keys are the caller's and must be prefix-free among
// themselves (no key is a prefix of another).
//
// Order: busy keys take turns in key order, from a cursor (the key whose
// turn is next) kept in the state with the tasks ('r' → key), so that a
// Scheduler loaded from a committed state steps exactly as the one that
// committed it would have from there: the same input gives the same steps
// with or without a restart in between (a re-created batch of a
// sink.Positioned must emit the same changes in the same order).
//
// The in-memory view (which keys are busy) follows the state the Scheduler
// is used on: after a Txn is aborted, make a new Scheduler and Load it.
// Not safe for concurrent use.
type Scheduler struct {
	// Started counts tasks started (work that did not fit its budget);
	// Queued counts ops that waited behind a task.
	Started, Queued uint64

	exec Executor
	busy map[string]*queue
	ring []string // busy keys, sorted (round-robin order)
	next int      // ring position of the next turn
	// cursor is the key whose turn is next as written to the state
	// (hasCursor: one is).
	cursor    string
	hasCursor bool
	// ignoreCursor (tests): Load starts at the first busy key.
	ignoreCursor bool
	blocked      map[string]bool // busy keys whose task waits (see Executor)
	op           Op
	enc          []byte
	key          []byte
}

// queue is a busy key's waiting ops: sequence numbers head..tail-1.
type queue struct{ head, tail uint64 }

// NewScheduler returns a scheduler running ops with exec.
func NewScheduler(exec Executor) *Scheduler {
	return &Scheduler{exec: exec, busy: map[string]*queue{}, blocked: map[string]bool{}}
}

const (
	auxTask   = 't'
	auxQueue  = 'q'
	auxCursor = 'r'
)

// Load reads the tasks and waiting ops committed in t (after a restart).
func (s *Scheduler) Load(t keyed.State) error {
	s.busy, s.ring, s.next, s.blocked, s.cursor, s.hasCursor = map[string]*queue{}, nil, 0, map[string]bool{}, "", false
	err := t.AuxScan([]byte{auxTask}, nil, func(k, _ []byte) error {
		key := string(k[1:])
		q := &queue{}
		first := true
		prefix := append([]byte{auxQueue}, key...)
		err := t.AuxScan(prefix, nil, func(qk, _ []byte) error {
			if len(qk) != len(prefix)+8 {
				return fmt.Errorf("%w: skew queue key", row.ErrCorrupt)
			}
			seq := binary.BigEndian.Uint64(qk[len(prefix):])
			if first {
				q.head, first = seq, false
			}
			q.tail = seq + 1
			return nil
		})
		if err != nil {
			return err
		}
		s.busy[key] = q
		s.ring = append(s.ring, key) // AuxScan: in key order
		return nil
	})
	if err != nil {
		return err
	}
	c, ok, err := t.Aux([]byte{auxCursor})
	if err != nil || !ok || s.ignoreCursor {
		return err
	}
	s.cursor, s.hasCursor = string(c), true
	s.next, _ = slices.BinarySearch(s.ring, s.cursor) // the first key at or after it
	if s.next >= len(s.ring) {
		s.next = 0
	}
	return nil
}

// Busy returns the number of keys with a task in progress (blocked ones
// included).
func (s *Scheduler) Busy() int { return len(s.ring) }

// Runnable returns the number of keys whose task can make progress.
func (s *Scheduler) Runnable() int { return len(s.ring) - len(s.blocked) }

// Unblock lets key's task be resumed again (what it waited for came).
func (s *Scheduler) Unblock(key []byte) { delete(s.blocked, string(key)) }

// Waiting returns the number of ops waiting behind tasks.
func (s *Scheduler) Waiting() uint64 {
	var n uint64
	for _, q := range s.busy {
		n += q.tail - q.head
	}
	return n
}

// IsBusy reports whether key has a task in progress.
func (s *Scheduler) IsBusy(key []byte) bool { return s.busy[string(key)] != nil }

// Submit runs op on key now, with budget, or, while key has a task in
// progress, queues it behind. It returns the budget spent.
func (s *Scheduler) Submit(t keyed.State, key []byte, op *Op, budget int, out keyedlog.Out) (int, error) {
	if q := s.busy[string(key)]; q != nil {
		s.enc = AppendOp(s.enc[:0], op)
		if err := t.PutAux(s.queueKey(key, q.tail), s.enc); err != nil {
			return 0, err
		}
		q.tail++
		s.Queued++
		return 0, nil
	}
	task, used, err := s.exec.Run(t, key, op, budget, out)
	if err != nil || task == nil {
		return used, err
	}
	return used, s.startTask(t, key, task)
}

func (s *Scheduler) startTask(t keyed.State, key, task []byte) error {
	if err := t.PutAux(s.taskKey(key), task); err != nil {
		return err
	}
	s.Started++
	k := string(key)
	s.busy[k] = &queue{}
	i, _ := slices.BinarySearch(s.ring, k)
	if len(s.ring) > 0 && i <= s.next {
		s.next++ // the turn stays with the cursor's key
	}
	s.ring = slices.Insert(s.ring, i, k)
	return s.saveCursor(t)
}

// saveCursor writes the key whose turn is next to the state when it
// changed (none: no key is busy).
func (s *Scheduler) saveCursor(t keyed.State) error {
	if s.next >= len(s.ring) {
		s.next = 0
	}
	if len(s.ring) == 0 {
		if !s.hasCursor {
			return nil
		}
		s.hasCursor, s.cursor = false, ""
		return t.DeleteAux([]byte{auxCursor})
	}
	if s.hasCursor && s.cursor == s.ring[s.next] {
		return nil
	}
	s.hasCursor, s.cursor = true, s.ring[s.next]
	return t.PutAux([]byte{auxCursor}, []byte(s.cursor))
}

// Step advances the tasks in progress, round robin, until budget is spent
// (budget < 0: until none is left). A finished task's waiting ops run next
// (and may start a task of their own). It returns the budget spent.
func (s *Scheduler) Step(t keyed.State, budget int, out keyedlog.Out) (int, error) {
	spent := 0
	idle := 0 // keys visited in a row without progress
	for s.Runnable() > 0 && (budget < 0 || spent < budget) && idle < len(s.ring) {
		if s.next >= len(s.ring) {
			s.next = 0
		}
		key := s.ring[s.next]
		if s.blocked[key] {
			s.next++
			idle++
			continue
		}
		left := -1
		if budget >= 0 {
			left = budget - spent
		}
		used, finished, err := s.advance(t, key, left, out)
		spent += used
		if err != nil {
			return spent, err
		}
		if finished {
			s.ring = append(s.ring[:s.next], s.ring[s.next+1:]...)
			delete(s.busy, key)
			idle = 0
			continue // s.next now names the following key
		}
		s.next++
		if used == 0 {
			idle++
		} else {
			idle = 0
		}
	}
	return spent, s.saveCursor(t)
}

// Drain runs every task and waiting op to the end, but for blocked tasks
// (and the ops waiting behind them).
func (s *Scheduler) Drain(t keyed.State, out keyedlog.Out) error {
	_, err := s.Step(t, -1, out)
	return err
}

// advance gives key's task up to budget; when the task finishes it runs
// the key's waiting ops in order until one starts a new task (which then
// stays in the ring) or none is left (finished).
func (s *Scheduler) advance(t keyed.State, key string, budget int, out keyedlog.Out) (used int, finished bool, err error) {
	s.key = append(s.key[:0], key...)
	task, ok, err := t.Aux(s.taskKey(s.key))
	if err != nil {
		return 0, false, err
	}
	if !ok {
		return 0, false, fmt.Errorf("%w: skew: key %x is busy without a task", row.ErrCorrupt, s.key)
	}
	if len(task) > 0 { // empty: a finished task whose waiting ops did not fit the last step
		task = append([]byte(nil), task...)
		next, u, err := s.exec.Resume(t, s.key, task, budget, out)
		used = u
		if err != nil {
			return used, false, err
		}
		if next != nil && used == 0 && bytes.Equal(next, task) {
			s.blocked[key] = true
			return 0, false, nil
		}
		if next != nil {
			return used, false, t.PutAux(s.taskKey(s.key), next)
		}
	}
	q := s.busy[key]
	for q.head < q.tail {
		if budget >= 0 && used >= budget {
			// Out of budget with ops waiting: park an empty task (the next
			// step pops the queue).
			return used, false, t.PutAux(s.taskKey(s.key), []byte{})
		}
		qk := s.queueKey(s.key, q.head)
		b, ok, err := t.Aux(qk)
		if err != nil {
			return used, false, err
		}
		if !ok {
			return used, false, fmt.Errorf("%w: skew: waiting op %d of key %x is missing", row.ErrCorrupt, q.head, s.key)
		}
		b = append([]byte(nil), b...)
		if err := t.DeleteAux(qk); err != nil {
			return used, false, err
		}
		q.head++
		if err := DecodeOp(b, &s.op); err != nil {
			return used, false, err
		}
		left := -1
		if budget >= 0 {
			left = budget - used
		}
		task, u, err := s.exec.Run(t, s.key, &s.op, left, out)
		used += u
		if err != nil {
			return used, false, err
		}
		if task != nil {
			return used, false, t.PutAux(s.taskKey(s.key), task)
		}
	}
	return used, true, t.DeleteAux(s.taskKey(s.key))
}

func (s *Scheduler) taskKey(key []byte) []byte {
	return append([]byte{auxTask}, key...)
}

func (s *Scheduler) queueKey(key []byte, seq uint64) []byte {
	k := append([]byte{auxQueue}, key...)
	return binary.BigEndian.AppendUint64(k, seq)
}

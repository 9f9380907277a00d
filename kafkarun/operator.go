package kafkarun

import (
	"log/slog"
	"time"

	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/skew"
	"github.com/cdcjoin/cdcjoin/stage"
)

// The join stage's operator (the wiring of the operator contract, package
// driver): every worker runs its partition's log through an Operator made
// by Options.Operator, by default the regular join's skew.Router (newRouter),
// which does fan-outs in chunks between other keys' records (upsert mode:
// paced by time, about half of the worker's time while both have work;
// changelog mode: skew.chunk_rows rows per record read, see worker) and
// salts hot keys across keyed partitions. What an operator sends (Out.Send: the router's
// forwards to replicas, layout proposals, release confirmations) goes
// through the worker's forwarder in one Kafka transaction per batch,
// committed after the sink flush and before the state commit. How steps
// fit the worker's batches: see worker.
//
// Kafka offset commits (the emit threshold of a future owner of the
// partition) are made only at positions where the worker's operator was
// not Busy: a future owner rebuilding below that offset applies everything
// at once without emitting and, reaching it, is exactly where the previous
// owner was, with nothing owed to the sink.

// idleQuantum is how long a worker steps its work in progress per batch
// when no input is waiting.
const idleQuantum = 20 * time.Millisecond

// Operator is a keyed partition's operator as the join stage runs it: the
// contract (driver.Operator) and what the stage may ask of it beyond the
// contract, each optional (nil: not offered).
type Operator struct {
	driver.Operator
	// ByInput, if > 0, lets a worker with a sink.Positioned (a replayed
	// batch must write the same changes in the same order) step the work
	// in progress by input: after every message of the partition it
	// advances the work by ByInput units (after a step marker, by the
	// marker's rows), never by time, so the same records cut the same
	// chunks. The operator's steps must then be a function of its
	// committed state and the messages (skew.Scheduler keeps its turns in
	// the state). 0: the worker calls Unchunk with such a sink.
	ByInput int
	// Unchunk, if set, makes the operator do all of an input's work within
	// its Step (a sink.Positioned, without ByInput). Without it the worker
	// drains the operator's runnable work after every message instead.
	Unchunk func()
	// BulkRebuild, if set, says the operator's state can be rebuilt in bulk
	// from the keyed log's row records (bulkload.KeyedRebuild: the regular
	// join's state), up to the first record the bulk path does not know
	// (keyedlog.IsRouter), and is called on the empty state before such a
	// rebuild begins. Without it a new partition is rebuilt record by
	// record through Step.
	BulkRebuild func(t keyed.State) error
	// StateStep, if set, says the operator keeps its state as a
	// stage.State (a plan's stage, stage.KeyedState over the partition's
	// transaction) and can be rebuilt in bulk by stepping the log's
	// records up to the group's committed offset on another stage.State
	// (a memstate.State, written out in key order: rebuild.go), nothing
	// sent or emitted; it steps one such record (m's Pos and Version set).
	// The operator must keep nothing in memory between records (the
	// worker goes on row by row with the same operator), and no work in
	// progress: the rebuild ends at the group's committed offset, a
	// position without any, so StateStep does each record's work at once
	// (a plan stage's fan-outs: stage.Operator.StepOn).
	StateStep func(st stage.State, m *keyedlog.Msg) error
	// Committed, if set, is called on the worker's goroutine after each
	// committed batch (metrics from the operator's counters).
	Committed func()
}

// OperatorFor is what Options.Operator is given for one keyed partition.
type OperatorFor struct {
	// Partition and Partitions: the keyed partition and the keyed topic's
	// partition count.
	Partition, Partitions int32
	// State is the partition's state, in a transaction committed when the
	// operator is made (its Load has been called on it by then: the
	// constructor does not call it).
	State keyed.State
	// Fresh: the state is new (nothing was applied to it yet).
	Fresh bool
	// Log is the join stage's logger.
	Log *slog.Logger
}

// newOperator makes the worker's operator and loads what its state
// holds. fresh: the state is new.
func (w *worker) newOperator(t keyed.State, fresh bool) error {
	j := w.j
	w.fwd = newForwarder(j, w.p)
	mk := j.newOp
	switch {
	case j.def.n > 0:
		mk = w.planOperator
	case mk == nil:
		mk = w.newRouter
		if j.cfg.IsTimeJoin() {
			mk = w.newTimeOp // timejoin.go
		}
	}
	op, err := mk(OperatorFor{Partition: w.p, Partitions: j.top.keyedParts, State: t, Fresh: fresh, Log: j.log})
	if err != nil {
		return err
	}
	if err := op.Load(t); err != nil {
		return err
	}
	w.op = op
	if op.Committed != nil {
		op.Committed()
	}
	return nil
}

// newRouter makes the regular join's operator: a skew.Router with the
// job's skew settings, its layout changes logged and counted, its hot keys
// and counters published for the metrics after each commit.
func (w *worker) newRouter(of OperatorFor) (Operator, error) {
	j := w.j
	sk := &j.cfg.Skew
	cfg := skew.RouterConfig{Partition: of.Partition, Partitions: of.Partitions, Hot: int64(sk.Hot()), Cool: int64(sk.Cool()),
		Salts: sk.SaltsFor(int(of.Partitions)), Chunk: sk.ChunkRows}
	r := skew.NewRouter(j.spec, cfg)
	r.OnLayout = func(jk []byte, hot bool, children int64, salts int) {
		k := keyText(j.spec, jk)
		if hot {
			j.log.Info("hot key: salted", "partition", w.p, "key", k, "children", children, "salts", salts)
			j.sm.LayoutChanges.WithLabelValues("salted").Inc()
		} else {
			j.log.Info("hot key: cooled", "partition", w.p, "key", k, "children", children)
			j.sm.LayoutChanges.WithLabelValues("cooled").Inc()
		}
	}
	if of.Fresh {
		if err := r.MarkFresh(of.State); err != nil {
			return Operator{}, err
		}
	}
	var last skew.RouterStats // as of the last commit (metrics deltas)
	var lastChunked uint64
	committed := func() {
		st := r.Stats
		j.sm.Forwarded.Add(float64(st.Forwards + st.Proposals - last.Forwards - last.Proposals))
		j.sm.Duplicates.Add(float64(st.Duplicate - last.Duplicate))
		last = st
		if c := r.Chunked(); c > lastChunked {
			pacing := "time"
			if w.byInput {
				pacing = "input"
			}
			j.sm.Chunked.WithLabelValues(pacing).Add(float64(c - lastChunked))
			lastChunked = c
		}
		keys, waiting := r.Backlog()
		w.hot.Store(&hotSnapshot{keys: r.HotKeys(), busy: keys, waiting: waiting})
	}
	return Operator{Operator: r, ByInput: max(sk.ChunkRows, 0), Unchunk: func() { r.SetChunk(-1) }, BulkRebuild: r.MarkInexact, Committed: committed}, nil
}

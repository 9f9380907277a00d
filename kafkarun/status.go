package kafkarun

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Status is a snapshot of what an instance is doing: per stage its
// partitions, its progress, and what each join worker waits on. It is
// served as JSON on kafka.metrics_addr at /statusz (Options.Ready), and
// the tests print it when a run does not converge. Safe to take on any
// goroutine.
type Status struct {
	Keying KeyingStatus      `json:"keying"`
	Join   []PartitionStatus `json:"join"`
}

// KeyingStatus is the keying stage's part of a Status.
type KeyingStatus struct {
	// Partitions are the assigned source partitions ("users/0"), with
	// "(restoring)" when their index is not restored yet.
	Partitions []string `json:"partitions"`
	// LastProgress is how long ago the stage last committed a transaction
	// (or found nothing to do).
	LastProgress string `json:"last_progress"`
	// InTransaction is how long the transaction in progress has run ("":
	// none).
	InTransaction string `json:"in_transaction,omitempty"`
	// Failure is the Kafka failure the stage is restarting after.
	Failure string `json:"failure,omitempty"`
}

// PartitionStatus is one owned keyed partition's join worker.
type PartitionStatus struct {
	// Stage is the plan stage (1-based; 0 for the regular join).
	Stage     int   `json:"stage,omitempty"`
	Partition int32 `json:"partition"`
	// Waiting is what the worker waits on or does: starting (opening its
	// sink), input, rebuild (in bulk), applying, sink (writing or
	// flushing), forward (committing its forwarding transaction), commit
	// (the state), stopping.
	Waiting string `json:"waiting"`
	// BusyFor is how long the batch in progress has run.
	BusyFor string `json:"busy_for,omitempty"`
	// Position is the durable next offset (-1: none yet); End the
	// partition's end as last fetched (-1: not fetched yet); Committed the
	// join group's committed offset as this instance knows it.
	Position  int64 `json:"position"`
	End       int64 `json:"end"`
	Committed int64 `json:"committed"`
	// EmitFrom: records below it are applied without emitting (the sink
	// has their changes); ForwardFrom: the router sends nothing for
	// records below it.
	EmitFrom    int64 `json:"emit_from"`
	ForwardFrom int64 `json:"forward_from"`
	CaughtUp    bool  `json:"caught_up"`
	// Queued is the number of fetched batches waiting in the worker's
	// queue.
	Queued int `json:"queued"`
	// FanOuts and WaitingInputs are the router's keys with work in
	// progress and the inputs waiting behind them; Cooling the salted keys
	// waiting for their replicas' confirmations.
	FanOuts       int      `json:"fan_outs"`
	WaitingInputs uint64   `json:"waiting_inputs"`
	HotKeys       int      `json:"hot_keys"`
	Cooling       []string `json:"cooling,omitempty"`
}

// String renders s for a test's failure message, one line per partition.
func (s Status) String() string {
	var b strings.Builder
	k := s.Keying
	fmt.Fprintf(&b, "keying: partitions %v, last progress %s ago", k.Partitions, k.LastProgress)
	if k.InTransaction != "" {
		fmt.Fprintf(&b, ", in a transaction for %s", k.InTransaction)
	}
	if k.Failure != "" {
		fmt.Fprintf(&b, ", restarting after: %s", k.Failure)
	}
	for _, p := range s.Join {
		fmt.Fprintf(&b, "\njoin partition %d: waiting on %s", p.Partition, p.Waiting)
		if p.BusyFor != "" {
			fmt.Fprintf(&b, " (batch running for %s)", p.BusyFor)
		}
		fmt.Fprintf(&b, "; position %d of end %d, committed %d, emit from %d, forward from %d, caught up %v, %d batches queued",
			p.Position, p.End, p.Committed, p.EmitFrom, p.ForwardFrom, p.CaughtUp, p.Queued)
		if p.FanOuts > 0 || p.WaitingInputs > 0 || p.HotKeys > 0 {
			fmt.Fprintf(&b, "; %d fan-outs, %d inputs waiting, %d hot keys", p.FanOuts, p.WaitingInputs, p.HotKeys)
		}
		if len(p.Cooling) > 0 {
			fmt.Fprintf(&b, ", cooling (waiting for their replicas' confirmations): %s", strings.Join(p.Cooling, ", "))
		}
	}
	return b.String()
}

// phase is what a worker is doing or waiting on (PartitionStatus.Waiting).
type phase int32

const (
	phaseStarting phase = iota
	phaseInput
	phaseRebuild
	phaseApply
	phaseSink
	phaseForward
	phaseCommit
	phaseStopping
)

var phaseNames = [...]string{"starting", "input", "rebuild", "applying", "sink", "forward", "commit", "stopping"}

func (p phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "?"
}

// workerStatus is what a worker publishes for Status (atomics: the worker
// writes, any goroutine reads).
type workerStatus struct {
	phase       atomic.Int32
	emitFrom    atomic.Int64
	forwardFrom atomic.Int64
	end         atomic.Int64 // the partition's high watermark, as last fetched (-1: none)
}

func (s *workerStatus) set(p phase) { s.phase.Store(int32(p)) }

// status takes the stages' snapshot (either may be nil).
func status(k *keying, js []*joinStage, now time.Time) Status {
	var s Status
	if k != nil {
		s.Keying = k.status(now)
	}
	for _, j := range js {
		s.Join = append(s.Join, j.status(now)...)
	}
	return s
}

func (k *keying) status(now time.Time) KeyingStatus {
	var ks KeyingStatus
	k.mu.Lock()
	for sp := range k.rd.assigned {
		name := k.topicOf(sp.side) + "/" + fmt.Sprint(sp.part)
		if k.idx[sp] == nil {
			name += " (restoring)"
		}
		ks.Partitions = append(ks.Partitions, name)
	}
	k.mu.Unlock()
	slices.Sort(ks.Partitions)
	h := &k.health
	h.mu.Lock()
	ks.LastProgress = now.Sub(h.progress).Round(time.Millisecond).String()
	if !h.busySince.IsZero() {
		ks.InTransaction = now.Sub(h.busySince).Round(time.Millisecond).String()
	}
	if h.failure != nil {
		ks.Failure = h.failure.Error()
	}
	h.mu.Unlock()
	return ks
}

func (j *joinStage) status(now time.Time) []PartitionStatus {
	j.mu.Lock()
	out := make([]PartitionStatus, 0, len(j.workers))
	ws := make([]*worker, 0, len(j.workers))
	for p, w := range j.workers {
		ws = append(ws, w)
		out = append(out, PartitionStatus{Stage: j.def.n, Partition: p, Committed: j.committed[p]})
	}
	j.mu.Unlock()
	for i, w := range ws {
		ps := &out[i]
		ps.Waiting = phase(w.status.phase.Load()).String()
		if d := w.busyFor(now); d > 0 {
			ps.BusyFor = d.Round(time.Millisecond).String()
		}
		ps.Position, ps.End = w.pos.Load(), w.status.end.Load()
		ps.EmitFrom, ps.ForwardFrom = w.status.emitFrom.Load(), w.status.forwardFrom.Load()
		ps.CaughtUp, ps.Queued = w.caught.Load(), len(w.in)
		if hs := w.hot.Load(); hs != nil {
			ps.FanOuts, ps.WaitingInputs, ps.HotKeys = hs.busy, hs.waiting, len(hs.keys)
			for _, h := range hs.keys {
				if h.Cooling {
					ps.Cooling = append(ps.Cooling, keyText(j.spec, h.JoinKey))
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b PartitionStatus) int { return int(a.Partition - b.Partition) })
	return out
}

// Package driver is the spine both drivers share — engine (`replay`, the
// bench: one process, one state) and kafkarun (`run`: one state per owned
// keyed partition) — so that each rule of driving a stage exists once:
// the operator contract, the batch commit order, the sink side of a
// partition (Output), the metadata committed with its state (MetaKey), the
// bad-record step (Bad, HandleBad), pacing of work between inputs (Pacer),
// and reading a replay's state for a handover (ReplayState).
//
// # The operator contract
//
// A stage of a join plan is an Operator: a pure state machine, no
// goroutines, clocks or I/O (package skew's Fair and Router are the
// regular join's two implementations). What a stage gets from its driver:
//
//   - Inputs with positions. Every message of the partition's log comes as
//     a keyedlog.Msg, in log order, with its position (Msg.Pos: the keyed
//     offset in `run`, the count of keyed inputs in `replay`) and, for an
//     input, its version (Msg.Version). In `run` the driver decodes the
//     keyed topic's records (keyedlog.Decode); in `replay` it keys the
//     source records itself (keyed.Keyer) and hands the inputs over in
//     process. A stage of a multi-stage plan reads its own keyed log the
//     same way: the stage before it writes that log (in `run`, a keyed
//     topic; in `replay`, in process), so a stage never knows where its
//     input came from.
//   - A state transaction: a keyed.State that commits atomically with the
//     partition's positions and metadata, or not at all. Everything an
//     operator must remember (fan-outs in progress, waiting inputs, child
//     counts, a stage's watermarks) it keeps there — its own bookkeeping in
//     the Aux keyspace — never only in memory: after an aborted batch the
//     driver makes it Load again from the committed state.
//   - A clock. Versions come from the driver's version.Clock at the
//     message's position (epoch markers raise it and never reach the
//     operator), so that reprocessing the same input reproduces the same
//     versions, also on another instance or after a restart. An operator
//     reads no wall clock: time-based behaviour (a watermark that advances
//     while a source is idle) must be a message of its log, written by the
//     driver at a position, so that a replay or a rebuild sees it at the
//     same place.
//   - Emit and Send (keyedlog.Out). Changes of joined rows go to Out.Emit,
//     which the driver points at the sink's buffer, or at Discard below its
//     emit-from position (Output.Silent); records for other partitions of
//     the same stage (package skew's forwards, layout changes, acks) go to
//     Out.Send, committed before the state. Out.Quiet marks messages an
//     earlier owner applied and sent for already.
//   - Work between inputs. Step may leave work it did not finish (a
//     fan-out of millions done in chunks; tomorrow a stage's timers that a
//     watermark made due) in the state; Busy and Runnable say so, and the
//     driver gives it time with Advance: paced by time against the inputs
//     (Pacer), or, where a replayed batch must emit the same changes in the
//     same order (a sink.Positioned), by budgets counted in inputs (rows
//     per message read: the engine, and run's workers, which write step
//     markers to their keyed partition to buy budget when they have work
//     and no input; the operator's steps must then be a function of its
//     committed state and the messages) or all at once after every message
//     (Drain: an operator that cannot step by input), as where nothing is
//     emitted (a rebuild).
//   - Parallel instances. The driver runs one operator per partition of
//     the stage's keyed log — in `run` one per owned keyed partition, each
//     on its own goroutine with its own state; in one process the same
//     holds, with positions and versions assigned before the split so that
//     they do not depend on scheduling. An operator instance never sees
//     another's state.
//
// What a stage gives back: its changes (Emit), its records for the log
// (Send), and the work it still has (Busy, Runnable); errors are fatal for
// the batch (state and emit errors pass through unchanged).
//
// # The commit order
//
// Commit states it, once: positions and metadata into the state writes,
// the sink's durable delivery (Output.Deliver: Flush, or End for a
// sink.Positioned), the records sent to other partitions (AfterEnd), and
// only then the state commit. See Commit for why that order is the one
// that keeps every effect exactly once.
//
// Nothing here starts goroutines; the drivers own theirs.
package driver

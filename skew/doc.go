// Package skew keeps hot keys — parents with very many children — from
// stalling the rest of the join, on top of package keyed's Join.
//
// Fair fan-out (both drivers). A parent's change fans out into one row per
// child. Scheduler runs per-key work with a budget: a fan-out that does not
// fit becomes a task (keyed.FanOut: the parent before and after, the
// version, the last child emitted) continued in steps between other keys'
// inputs, while later inputs of the same key wait behind it, in order.
// Tasks and waiting inputs live in the state's Aux keyspace and commit with
// it, so a crash resumes them and re-emits the same rows with the same
// versions. Pacer shares a driver's time between inputs and steps. Fair is
// the engine's fair join; Router is the Kafka runtime's.
//
// Salting (the Kafka runtime). Router is one keyed partition's join: it
// counts each join key's children exactly (in Aux), and a key reaching the
// hot threshold is spread over Salts replicas (key, salt) on other keyed
// partitions, which hold the parent and their share of the children and
// emit their rows; the key's own partition stays its router and keeps its
// complete state. Moves (salting, cooling) happen while running, emit
// nothing, and keep every row's versions increasing in the order the rows
// reach the sink; see Router for the protocol and its records (record.go).
//
// SpaceSaving finds the busiest keys of the keying stage's input for
// metrics.
//
// Nothing here starts goroutines or does I/O: drivers pass the state, an
// emit function, a Forwarder for the router's records and their clock.
package skew

// Package stage holds the operators of a multi-table plan (package plan)
// as pure state machines, in the style of package keyed: no goroutines,
// clocks or I/O. The caller passes the state (a State), each input's version
// and an emit function.
//
//   - Keyer: one table's Debezium events → changes of its rows (upsert
//     with the previous row, retract, truncate), from the table's own
//     index (primary key → last complete row), never from `before`; TOAST
//     placeholders are filled from the index.
//   - Join: one stage, a binary equi-join of two sides, each a multimap
//     join key → row identity → row, for INNER, LEFT, RIGHT and FULL
//     joins, many to many. A preserved side's row that cannot match (a
//     NULL in its key, or a match condition that is not TRUE) is padded.
//   - Materializer: the output merged per output row key, for plans whose
//     rows can be emitted at more than one join key (plan.Stage.Tag*).
//   - Pipeline: a whole plan on one State, stages applied depth first in one
//     order (replay).
//   - ReadAhead: the state entries an event will make a Pipeline read,
//     computed from the event (and its table's indexed row), as hints
//     for a driver that reads them ahead on another goroutine.
//
// State layout (every tuple in row.AppendKey's order-preserving,
// prefix-free encoding):
//
//	row group     id      value
//	'i' t         pk      row                  (Keyer of FROM item t; in replay: uvarint(source partition) row)
//	's' n 'r' J side  id  flags, version, row  (stage n's rows)
//	'm' 'i' rowkey    id  row                  (materializer: live incarnations)
//	'm' 'c'       rowkey  version, row         (materializer: the row emitted)
//	value key
//	's' n 'p' J side      version              (stage n's pad epoch of side at J)
//
// J is the encoded join key, or the single byte 0xFE for a row that can
// never match (a NULL in its key): such rows are spread by their identity
// (Partition). id is the row's identity: the encoded keys of its tables
// (NULL for a padded table), followed by the join keys of the stages that
// tag it (plan.Stage).
//
// Versions: every change a call emits carries the version it was given;
// a joined row was last emitted at the larger of its two rows' versions,
// a padded row at the larger of its row's version and its side's pad
// epoch at J (when the other side last became empty there). So PrevVersion
// is exact without writing to every row of a key when the other side
// changes.
package stage

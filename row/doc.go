// Package row is cdcjoin's data model: what flows between the stages.
//
//   - Value and Kind: one decoded column value (the decoder makes them, the
//     state stores them, the sinks write them).
//   - ColumnType: a column's declared type (from a Debezium schema or the
//     configuration), which sinks turn into their own types.
//   - Side: which table of the join a row or column belongs to.
//   - Change and ChangeOp: one upsert or retraction of a joined row, with
//     its version, the join's output.
//   - The tuple and row encodings (AppendKey/DecodeKey, AppendRow/DecodeRow)
//     shared by the state, the keyed topic and the changelogs.
//
// It is a leaf: it imports nothing of cdcjoin, and every other package may
// import it.
package row

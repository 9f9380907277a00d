package engine

// SetNaiveDecode makes e's decoding goroutines (Run with state.parallelism
// > 1) learn key classes each on its own and decode every record
// themselves, as a plain parallel decoder would: the negative control of
// the determinism test.
func SetNaiveDecode(e *Engine) { e.naiveDecode = true }

// SetPlanBulkLimit makes e's plan bulk load end after the record that
// takes its memory estimate past n bytes (instead of state.bulk_load_mb).
func SetPlanBulkLimit(e *Engine, n int) { e.pbulkLimit = n }

// SetPlanBulkDrop makes e's plan bulk load leave out of the state it
// writes every row whose group starts with prefix (the negative control
// of the bulk/row-by-row equivalence); PlanBulkDropped counts them.
func SetPlanBulkDrop(e *Engine, prefix []byte) { e.pbulkDrop = prefix }

// PlanBulkDropped is the number of rows SetPlanBulkDrop left out.
func PlanBulkDropped(e *Engine) uint64 { return e.pbulkDropped }

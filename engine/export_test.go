package engine

// SetNaiveDecode makes e's decoding goroutines (Run with state.parallelism
// > 1) learn key classes each on its own and decode every record
// themselves, as a plain parallel decoder would: the negative control of
// the determinism test.
func SetNaiveDecode(e *Engine) { e.naiveDecode = true }

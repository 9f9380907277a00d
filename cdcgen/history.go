package cdcgen

import "fmt"

// Checkpoint is a point in a History's consumption order where the
// consumed records describe exactly one DB state.
type Checkpoint struct {
	// Records is the length of the consumed prefix: Records[:Records].
	Records int
	// mutations is the length of the ground-truth DB log at that point.
	mutations int
}

// History is a complete generated history, held in memory (for correctness
// tests; use a Generator to stream large ones).
type History struct {
	Options Options // the options used, defaults filled in
	// Records in consumption order. Their Key/Value bytes are shared between
	// a record and its re-sent copies; treat them as read-only.
	Records []Record
	// Checkpoints in increasing order; the last one is at len(Records) when
	// the history is not empty.
	Checkpoints []Checkpoint
	// Final is the DB state after all operations.
	Final Tables
	Stats Stats
	log   []mutation
}

// Generate builds a whole history in memory. Errors come from option
// validation.
func Generate(opts Options) (*History, error) {
	g, err := NewGenerator(opts)
	if err != nil {
		return nil, err
	}
	g.reuse = false
	h := &History{Options: g.o}
	g.log = &h.log
	for {
		rec, ok := g.Next()
		if !ok {
			break
		}
		h.Records = append(h.Records, rec)
		if rec.Checkpoint {
			h.Checkpoints = append(h.Checkpoints, Checkpoint{Records: len(h.Records), mutations: len(h.log)})
		}
	}
	h.Final = g.Tables()
	h.Stats = g.Stats()
	return h, nil
}

// TablesAt returns the DB state at checkpoint i (an index into
// Checkpoints), recomputed by replaying the ground-truth DB log. It errors
// on an out-of-range index.
func (h *History) TablesAt(i int) (Tables, error) {
	if i < 0 || i >= len(h.Checkpoints) {
		return Tables{}, fmt.Errorf("cdcjoin: cdcgen: checkpoint %d out of range [0,%d)", i, len(h.Checkpoints))
	}
	return replay(h.log[:h.Checkpoints[i].mutations], h.Options.IDBase), nil
}

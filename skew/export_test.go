package skew

import "github.com/cdcjoin/cdcjoin/keyed"

// NewFairWith is NewFair with another executor (negative controls).
func NewFairWith(join *keyed.Join, chunk int, exec Executor) *Fair {
	f := &Fair{Join: join, Chunk: chunk}
	f.sched = NewScheduler(exec)
	return f
}

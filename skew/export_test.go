package skew

import "github.com/cdcjoin/cdcjoin/keyed"

// NewFairWith is NewFair with another executor (negative controls).
func NewFairWith(join *keyed.Join, chunk int, exec Executor) *Fair {
	return &Fair{Join: join, Chunk: chunk, sched: NewScheduler(exec)}
}

// SetNoWait makes r end coolings without waiting for the replicas'
// confirmations (the negative control of the release round).
func SetNoWait(r *Router) { r.noWait = true }

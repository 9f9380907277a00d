package skew

import "github.com/cdcjoin/cdcjoin/keyed"

// NewFairWith is NewFair with another executor (negative controls).
func NewFairWith(join *keyed.Join, chunk int, exec Executor) *Fair {
	return &Fair{Join: join, Chunk: chunk, sched: NewScheduler(exec)}
}

// SetNoWait makes r end coolings without waiting for the replicas'
// confirmations (the negative control of the release round).
func SetNoWait(r *Router) { r.noWait = true }

// IgnoreCursor makes a Fair's Scheduler start its turns at the first busy
// key after a Load, as if no cursor were committed (the negative control
// of the committed cursor).
func IgnoreCursor(f *Fair) { f.sched.ignoreCursor = true }

// BusyKeys returns how many keys of f have work in progress.
func BusyKeys(f *Fair) int { return f.sched.Busy() }

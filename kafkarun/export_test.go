package kafkarun

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cdcjoin/cdcjoin/joinstate"
)

// PaceByTime makes o's workers step their work in progress by time even
// with a sink.Positioned, as upsert mode does (the negative control of
// stepping by input: a batch re-created after a crash then cuts other
// chunks). Their pacers' clock gains 0-4 ms at every reading (jitter), so
// that the chunks cut by time differ between a batch and its re-creation
// on a fast, quiet machine too (without it, fan-outs small enough to
// finish within one step's credit were cut alike and the control went
// uncaught for 5 seeds in a row).
func PaceByTime(o *Options) {
	o.paceByTime = true
	if o.hooks == nil {
		o.hooks = &testHooks{}
	}
	o.hooks.pacerNow = jitterClock(uint64(time.Now().UnixNano()))
}

// jitterClock returns a clock (safe for concurrent use) ahead of
// time.Now by a skew that grows by 0-4 ms, drawn from seed, at every
// reading.
func jitterClock(seed uint64) func() time.Time {
	var mu sync.Mutex
	var skew time.Duration
	rng := rand.New(rand.NewPCG(seed, 7))
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		skew += time.Duration(rng.IntN(4000)) * time.Microsecond
		return time.Now().Add(skew)
	}
}

// RebuildHooks are the probes and faults of plan-stage rebuilds a test
// sets on Options (SetRebuildHooks; see testHooks).
type RebuildHooks struct {
	// BulkLimit (bytes), if > 0, replaces state.bulk_load_mb for a plan
	// stage's bulk rebuild.
	BulkLimit int
	// BulkDrop: a plan stage's bulk rebuild leaves out the rows whose
	// group starts with it (the negative control).
	BulkDrop []byte
	// BulkSkip: a plan stage's bulk rebuild skips the stage records it
	// returns true for (the negative control).
	BulkSkip func(stage int, partition int32, offset int64) bool
	// BulkKill is called after a plan stage's bulk rebuild wrote its
	// tables, before the ingest: an error fails the rebuild there.
	BulkKill func(stage int, partition int32) error
	// CaughtUp is called on a worker's goroutine when its partition's
	// state reached the committed position (stage 0: the regular join).
	CaughtUp func(stage int, partition int32, st *joinstate.Store)
	// Deliver is called on a join stage's fetch goroutine before a
	// fetch's records go to the partition's worker (a delay: a slow
	// fetch).
	Deliver func(stage int, partition int32)
	// Caught is called on a worker's goroutine when its partition's
	// catch-up ends, with its durable position and the catch-up's target.
	Caught func(stage int, partition int32, position, target int64)
}

// SetRebuildHooks sets h on o and returns how many rows BulkDrop dropped
// so far.
func SetRebuildHooks(o *Options, h RebuildHooks) (dropped func() uint64) {
	var now func() time.Time
	if o.hooks != nil {
		now = o.hooks.pacerNow // PaceByTime's
	}
	o.hooks = &testHooks{pacerNow: now, bulkLimit: h.BulkLimit, bulkDrop: h.BulkDrop, bulkSkip: h.BulkSkip, bulkKill: h.BulkKill, caughtUp: h.CaughtUp,
		deliver: h.Deliver, caught: h.Caught}
	return o.hooks.bulkDropped.Load
}

// Package sink defines what every output of the join implements: an ordered
// stream of row.Change values in, acknowledgements (Flush) out.
//
// The runtime writes changes, calls Flush, and only then commits the input
// positions that produced them, so a sink never has to survive a replay of
// work it acknowledged, and may lose (and must not acknowledge) work it had
// not yet flushed when it fails.
package sink

import (
	"context"
	"time"

	"github.com/cdcjoin/cdcjoin/row"
)

// Sink receives join changes in order and acknowledges them once durable.
type Sink interface {
	// Write appends changes (copying what it keeps); it may block for
	// back-pressure. Not safe for concurrent use unless the implementation
	// says so.
	Write(ctx context.Context, changes []row.Change) error
	// Flush blocks until everything written so far is durable in the
	// destination (ClickHouse accepted it).
	Flush(ctx context.Context) error
	// Close releases the sink's resources. It does not flush: changes not
	// yet acknowledged by Flush may be lost.
	Close() error
}

// Stats is a snapshot of a sink's counters since it was opened.
type Stats struct {
	Batches      uint64        // batches accepted by the destination
	Rows         uint64        // rows accepted (after folding)
	Bytes        uint64        // approximate payload bytes accepted
	Changes      uint64        // changes received by Write
	Retries      uint64        // retried attempts
	Errors       uint64        // failed attempts (retryable or not)
	InsertTime   time.Duration // total time spent in successful inserts (last attempt)
	MaxBatchRows int           // largest batch sent
}

// StatsReporter is implemented by sinks that count their work.
type StatsReporter interface {
	Stats() Stats
}

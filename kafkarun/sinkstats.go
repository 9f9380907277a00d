package kafkarun

import (
	"sync"
	"sync/atomic"

	"github.com/cdcjoin/cdcjoin/metrics"
	"github.com/cdcjoin/cdcjoin/sink"
)

// sinkTotals sums the counters of the join stage's sinks for
// cdcjoin_sink_*: the live sinks' at scrape time plus what the sinks of
// removed partitions had counted. Safe for concurrent use.
type sinkTotals struct {
	mu   sync.Mutex
	gone metrics.SinkTotals
}

// reporter holds a worker's sink for the scraper (set once the worker
// opened it).
type reporter struct {
	p atomic.Pointer[sinkRef]
}

type sinkRef struct{ r sink.StatsReporter }

func (r *reporter) set(s sink.Sink) {
	if sr, ok := s.(sink.StatsReporter); ok {
		r.p.Store(&sinkRef{sr})
	}
}

func (r *reporter) totals() (metrics.SinkTotals, bool) {
	ref := r.p.Load()
	if ref == nil {
		return metrics.SinkTotals{}, false
	}
	return toTotals(ref.r.Stats()), true
}

func toTotals(st sink.Stats) metrics.SinkTotals {
	return metrics.SinkTotals{Inserts: st.Batches, Rows: st.Rows, Retries: st.Retries, Failures: st.Errors}
}

func add(a *metrics.SinkTotals, b metrics.SinkTotals) {
	a.Inserts += b.Inserts
	a.Rows += b.Rows
	a.Retries += b.Retries
	a.Failures += b.Failures
}

// closed adds a removed partition's sink counters to the totals.
func (t *sinkTotals) closed(r *reporter) {
	if st, ok := r.totals(); ok {
		t.mu.Lock()
		add(&t.gone, st)
		t.mu.Unlock()
		r.p.Store(nil)
	}
}

// sinkTotals returns the counters of all the join stage's sinks, live and
// gone.
func (j *joinStage) sinkTotals() metrics.SinkTotals {
	j.sinks.mu.Lock()
	out := j.sinks.gone
	j.sinks.mu.Unlock()
	ws := j.owned()
	for _, w := range ws {
		if st, ok := w.stats.totals(); ok {
			add(&out, st)
		}
	}
	return out
}

package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdcjoin/cdcjoin/joinstate"
)

// StoreStats is one state store's figures, labelled by its stage and
// partition. Stage is "join" for the two-table join and a plan stage's
// number ("1", "2", …, as in cdcjoin_stage_*) for a multi-stage plan: each
// stage has a store per keyed partition, so (Stage, Partition) must be
// unique in one scrape.
type StoreStats struct {
	Stage     string
	Partition string
	joinstate.Stats
}

// stateCollector reports the join stage's state stores at scrape time.
type stateCollector struct {
	list                                       func() []StoreStats
	bytes, keyspace, writeAmp                  *prometheus.Desc
	blockHits, blockMisses, rowHits, rowMisses *prometheus.Desc
}

// NewStateCollector returns a collector that calls list on every scrape
// (from the scraping goroutine; list must be safe for that) and reports per
// stage and partition:
//
//	cdcjoin_state_bytes{stage,partition}                      estimated bytes on disk
//	cdcjoin_state_keyspace_bytes{stage,partition,keyspace}   parent | child | child_index | parent_index
//	cdcjoin_state_write_amplification{stage,partition}
//	cdcjoin_state_block_cache_hits_total{stage,partition}     pebble block cache
//	cdcjoin_state_block_cache_misses_total{stage,partition}
//	cdcjoin_state_row_cache_hits_total{stage,partition}       point reads answered in memory
//	cdcjoin_state_row_cache_misses_total{stage,partition}     point reads that went to pebble
//
// The counters restart when a partition's store is reopened (after it moved).
func NewStateCollector(list func() []StoreStats) prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append([]string{"stage", "partition"}, labels...), nil)
	}
	return &stateCollector{
		list:        list,
		bytes:       d("cdcjoin_state_bytes", "Estimated on-disk bytes of a partition's join state."),
		keyspace:    d("cdcjoin_state_keyspace_bytes", "Estimated on-disk bytes of a keyspace of a partition's state.", "keyspace"),
		writeAmp:    d("cdcjoin_state_write_amplification", "Pebble write amplification of a partition's state."),
		blockHits:   d("cdcjoin_state_block_cache_hits_total", "Pebble block cache hits of a partition's state."),
		blockMisses: d("cdcjoin_state_block_cache_misses_total", "Pebble block cache misses of a partition's state."),
		rowHits:     d("cdcjoin_state_row_cache_hits_total", "Point reads answered by the row cache (values and known absences)."),
		rowMisses:   d("cdcjoin_state_row_cache_misses_total", "Point reads that went to pebble."),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.bytes, c.keyspace, c.writeAmp, c.blockHits, c.blockMisses, c.rowHits, c.rowMisses} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.list() {
		sp := []string{s.Stage, s.Partition}
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(s.DiskBytes), sp...)
		for _, ks := range []struct {
			name string
			n    uint64
		}{{"parent", s.ParentBytes}, {"child", s.ChildBytes}, {"child_index", s.ChildIndexBytes}, {"parent_index", s.ParentIndexBytes}} {
			ch <- prometheus.MustNewConstMetric(c.keyspace, prometheus.GaugeValue, float64(ks.n), append(sp, ks.name)...)
		}
		ch <- prometheus.MustNewConstMetric(c.writeAmp, prometheus.GaugeValue, s.WriteAmp, sp...)
		ch <- prometheus.MustNewConstMetric(c.blockHits, prometheus.CounterValue, float64(s.BlockCacheHits), sp...)
		ch <- prometheus.MustNewConstMetric(c.blockMisses, prometheus.CounterValue, float64(s.BlockCacheMisses), sp...)
		ch <- prometheus.MustNewConstMetric(c.rowHits, prometheus.CounterValue, float64(s.RowCacheHits), sp...)
		ch <- prometheus.MustNewConstMetric(c.rowMisses, prometheus.CounterValue, float64(s.RowCacheMisses), sp...)
	}
}

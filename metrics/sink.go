package metrics

import "github.com/prometheus/client_golang/prometheus"

// SinkTotals are the counters of a job's sinks, summed over the partitions
// (and over the sinks of partitions that moved away or stopped).
type SinkTotals struct {
	Inserts  uint64 // batches the destination accepted (ClickHouse INSERTs)
	Rows     uint64 // rows in them
	Retries  uint64 // attempts retried after a retryable failure
	Failures uint64 // failed attempts, retryable or not
}

type sinkCollector struct {
	totals                           func() SinkTotals
	inserts, rows, retries, failures *prometheus.Desc
}

// NewSinkCollector returns a collector that calls totals on every scrape
// (from the scraping goroutine) and reports
//
//	cdcjoin_sink_inserts_total          batches the destination accepted
//	cdcjoin_sink_rows_total             rows in them (rows per INSERT: the ratio of the two)
//	cdcjoin_sink_retries_total          attempts retried (a ClickHouse outage shows here first)
//	cdcjoin_sink_failed_attempts_total  failed attempts, retryable or not
func NewSinkCollector(totals func() SinkTotals) prometheus.Collector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &sinkCollector{
		totals:   totals,
		inserts:  d("cdcjoin_sink_inserts_total", "Batches the sink's destination accepted (ClickHouse INSERTs)."),
		rows:     d("cdcjoin_sink_rows_total", "Rows in the batches the sink's destination accepted."),
		retries:  d("cdcjoin_sink_retries_total", "Sink attempts retried after a retryable failure."),
		failures: d("cdcjoin_sink_failed_attempts_total", "Failed sink attempts, retryable or not."),
	}
}

func (c *sinkCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.inserts, c.rows, c.retries, c.failures} {
		ch <- d
	}
}

func (c *sinkCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.totals()
	ch <- prometheus.MustNewConstMetric(c.inserts, prometheus.CounterValue, float64(t.Inserts))
	ch <- prometheus.MustNewConstMetric(c.rows, prometheus.CounterValue, float64(t.Rows))
	ch <- prometheus.MustNewConstMetric(c.retries, prometheus.CounterValue, float64(t.Retries))
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(t.Failures))
}

package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Skew are the hot-key counters (package skew). All are safe for
// concurrent use.
type Skew struct {
	// Forwarded counts records the join stage forwarded to the replicas of
	// salted keys (and layout records, release confirmations).
	Forwarded prometheus.Counter
	// LayoutChanges counts keys salted and cooled, by change.
	LayoutChanges *prometheus.CounterVec
	// Duplicates counts forwarded records a replica dropped as applied
	// already (after a crash of the forwarding partition).
	Duplicates prometheus.Counter
	// Chunked counts work too large for one chunk (fan-outs, salting
	// moves) that was done in steps between other keys' records, by how
	// the steps were paced: "input" (a budget per record read: changelog
	// mode) or "time" (upsert mode).
	Chunked *prometheus.CounterVec
	// StepMarkers counts step markers written: budget for work in progress
	// of a worker that steps by input and has no input.
	StepMarkers prometheus.Counter
}

// NewSkew creates the hot-key counters and registers them with reg (nil:
// not registered).
func NewSkew(reg prometheus.Registerer) (*Skew, error) {
	s := &Skew{
		Forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cdcjoin_skew_forwarded_records_total", Help: "Records the join stage wrote for salted keys (forwards to replicas, layout changes, release confirmations).",
		}),
		LayoutChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdcjoin_skew_layout_changes_total", Help: "Keys salted (turned hot) and cooled, by change.",
		}, []string{"change"}),
		Duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cdcjoin_skew_duplicate_forwards_total", Help: "Forwarded records dropped by a replica as applied already.",
		}),
		Chunked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdcjoin_skew_chunked_total", Help: "Fan-outs and salting moves too large for one chunk, done in steps between other keys' records, by pacing (input: a budget per record read, changelog mode; time: upsert mode).",
		}, []string{"steps"}),
		StepMarkers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cdcjoin_skew_step_markers_total", Help: "Step markers written to the keyed topic: budget for work in progress of a worker stepping by input without input.",
		}),
	}
	if err := register(reg, s.Forwarded, s.LayoutChanges, s.Duplicates, s.Chunked, s.StepMarkers); err != nil {
		return nil, err
	}
	return s, nil
}

// HotKeyStat is a salted key of a keyed partition.
type HotKeyStat struct {
	Key       string
	Partition string
	Children  int64
	Salts     int
	Cooling   bool
}

// BusyKeyStat is a join key among the keying stage's heaviest inputs.
type BusyKeyStat struct {
	Key string
	// Events is the key's estimated keyed inputs over the last minutes
	// (exponentially decayed per minute).
	Events float64
}

// SkewSnapshot is what the hot-key collector reports at a scrape.
type SkewSnapshot struct {
	Hot  []HotKeyStat
	Busy []BusyKeyStat
	// FanOutKeys are keys with a fan-out (or a move) in progress, Waiting
	// the inputs waiting behind them, over the owned partitions.
	FanOutKeys int
	Waiting    uint64
}

// NewSkewCollector returns a collector that calls snap on every scrape (it
// must be safe on the scraping goroutine) and reports, with at most top
// keys per metric (bounded cardinality: the heaviest):
//
//	cdcjoin_skew_hot_keys                               salted keys of the owned partitions
//	cdcjoin_skew_hot_key_children{key,partition}        their exact child counts (top keys)
//	cdcjoin_skew_busy_key_events{key}                   the keying stage's busiest join keys (top keys)
//	cdcjoin_skew_fanout_keys                            keys with a fan-out in progress
//	cdcjoin_skew_waiting_inputs                         inputs waiting behind them
func NewSkewCollector(top int, snap func() SkewSnapshot) prometheus.Collector {
	return &skewCollector{
		top: top, snap: snap,
		hot:      prometheus.NewDesc("cdcjoin_skew_hot_keys", "Salted (hot) join keys of the owned keyed partitions.", nil, nil),
		children: prometheus.NewDesc("cdcjoin_skew_hot_key_children", "Children of a salted join key (the heaviest ones).", []string{"key", "partition"}, nil),
		busy:     prometheus.NewDesc("cdcjoin_skew_busy_key_events", "Estimated keyed inputs of the busiest join keys (decayed per minute).", []string{"key"}, nil),
		fanout:   prometheus.NewDesc("cdcjoin_skew_fanout_keys", "Join keys with a fan-out or a move in progress.", nil, nil),
		waiting:  prometheus.NewDesc("cdcjoin_skew_waiting_inputs", "Inputs waiting behind a fan-out of their join key.", nil, nil),
	}
}

type skewCollector struct {
	top                                  int
	snap                                 func() SkewSnapshot
	hot, children, busy, fanout, waiting *prometheus.Desc
}

func (c *skewCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.hot, c.children, c.busy, c.fanout, c.waiting} {
		ch <- d
	}
}

func (c *skewCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snap()
	ch <- prometheus.MustNewConstMetric(c.hot, prometheus.GaugeValue, float64(len(s.Hot)))
	hot := slices.Clone(s.Hot)
	slices.SortFunc(hot, func(a, b HotKeyStat) int {
		if a.Children != b.Children {
			if a.Children > b.Children {
				return -1
			}
			return 1
		}
		return 0
	})
	for i, h := range hot {
		if i == c.top {
			break
		}
		ch <- prometheus.MustNewConstMetric(c.children, prometheus.GaugeValue, float64(h.Children), h.Key, h.Partition)
	}
	for i, b := range s.Busy {
		if i == c.top {
			break
		}
		ch <- prometheus.MustNewConstMetric(c.busy, prometheus.GaugeValue, b.Events, b.Key)
	}
	ch <- prometheus.MustNewConstMetric(c.fanout, prometheus.GaugeValue, float64(s.FanOutKeys))
	ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(s.Waiting))
}

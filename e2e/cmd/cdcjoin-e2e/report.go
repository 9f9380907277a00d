package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cdcjoin/cdcjoin/e2e"
)

// report collects the figures printed at the end.
type report struct {
	sourceTxs, sourceRows int64
	workload, converge    time.Duration
	killedAt, total       time.Duration
	nudges                int
	ops                   map[string]int
	outputRows            []string
	peaks                 peaks
	// -format avro: the registry outage and what /readyz said meanwhile
	registryOutage  time.Duration
	registryReasons []string
}

type peaks struct {
	keying, join, metric int64
	samples              int
}

func (r *report) print() {
	var ops []string
	total := 0
	for k, v := range r.ops {
		ops = append(ops, fmt.Sprintf("%s=%d", k, v))
		if k != "tombstone" {
			total += v
		}
	}
	sort.Strings(ops)
	fmt.Printf(`
e2e report
  source changes       %d rows changed in %d transactions (incl. base load)
  Debezium records     %d (%s)
  output rows          %s
  workload time        %v
  time to converge     %v (end of workload → caught up and equal; %d nudges)
  peak lag             keying %d records, join %d records (committed offsets; %d samples), cdcjoin_join_consumer_lag_records max %d
  total runtime        %v
`, r.sourceRows, r.sourceTxs, total, strings.Join(ops, " "), strings.Join(r.outputRows, " "),
		r.workload.Round(time.Millisecond), r.converge.Round(time.Millisecond), r.nudges,
		r.peaks.keying, r.peaks.join, r.peaks.samples, r.peaks.metric, r.total.Round(time.Millisecond))
	if r.registryOutage > 0 {
		fmt.Printf("  registry outage      %v while cdcjoin restarted; /readyz meanwhile:\n", r.registryOutage.Round(time.Second))
		for _, reason := range r.registryReasons {
			fmt.Printf("                       %s\n", reason)
		}
	}
}

// sampler polls consumer-group lags and cdcjoin's lag metric; run is owned
// by the driver, which cancels its context and waits for it.
type sampler struct {
	adm  *e2e.Admin
	jobs []*job

	mu sync.Mutex
	p  peaks
}

func newSampler(adm *e2e.Admin, jobs []*job) *sampler {
	return &sampler{adm: adm, jobs: jobs}
}

func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var kl, jl, ml int64
		for _, j := range s.jobs {
			k := &j.cfg.Kafka
			if l, err := s.adm.Lag(ctx, k.KeyingGroup(), j.src...); err == nil {
				kl += l.Records
			}
			if l, err := s.adm.Lag(ctx, k.JoinGroup(), k.KeyedTopic()); err == nil {
				jl += l.Records
			}
			if k.MetricsAddr != "" {
				if v, ok, err := e2e.ScrapeGauge(ctx, k.MetricsAddr, "cdcjoin_join_consumer_lag_records"); err == nil && ok {
					ml += int64(v)
				}
			}
		}
		s.mu.Lock()
		s.p.keying = max(s.p.keying, kl)
		s.p.join = max(s.p.join, jl)
		s.p.metric = max(s.p.metric, ml)
		s.p.samples++
		s.mu.Unlock()
	}
}

func (s *sampler) peaks() peaks {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p
}

package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// sampler turns the pipeline's counters into a timeline (one sample per
// 100 ms) and progress lines. Owner: newSampler starts its goroutine;
// stop stops and waits for it.
type sampler struct {
	in, out  atomic.Uint64
	probes   *probes
	progress func(string)
	every    time.Duration
	label    string

	mu       sync.Mutex
	name     string
	total    int64
	start    time.Time
	timeline []Sample
	lastIn   uint64
	lastOut  uint64
	lastT    time.Time
	base     uint64

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

const sampleEvery = 100 * time.Millisecond

func newSampler(pr *probes, label string, progress func(string), every time.Duration) *sampler {
	s := &sampler{probes: pr, label: label, progress: progress, every: every}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		lastPrint := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				s.sample(now)
				if s.progress != nil && now.Sub(lastPrint) >= s.every {
					lastPrint = now
					s.progress(s.line(now))
				}
			}
		}
	}()
	return s
}

func (s *sampler) stop() {
	s.cancel()
	s.wg.Wait()
}

// begin starts a phase's timeline; total is its expected input records.
func (s *sampler) begin(name string, total int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.name, s.total, s.start, s.timeline = name, total, time.Now(), nil
	s.lastIn, s.lastOut, s.lastT = s.in.Load(), s.out.Load(), s.start
	s.base = s.lastIn
	s.probes.maxLat.Store(0)
}

// end returns the phase's timeline, downsampled to at most 600 samples.
func (s *sampler) end() []Sample {
	s.sample(time.Now())
	s.mu.Lock()
	defer s.mu.Unlock()
	tl := s.timeline
	s.name = ""
	return downsample(tl, 600)
}

func (s *sampler) sample(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.name == "" {
		return
	}
	dt := now.Sub(s.lastT).Seconds()
	if dt <= 0 {
		return
	}
	in, out := s.in.Load(), s.out.Load()
	s.timeline = append(s.timeline, Sample{
		T: now.Sub(s.start).Seconds(), InPerSecond: float64(in-s.lastIn) / dt, OutPerSecond: float64(out-s.lastOut) / dt,
		MaxLatencyMs: float64(s.probes.maxLat.Swap(0)) / 1e6,
	})
	s.lastIn, s.lastOut, s.lastT = in, out, now
}

func (s *sampler) line(now time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.name == "" {
		return fmt.Sprintf("bench %s: between phases, rss %.0f MB", s.label, float64(procStatusKB("VmRSS:"))/1024)
	}
	var rate, out float64
	if n := len(s.timeline); n > 0 {
		k := min(n, int(s.every/sampleEvery))
		for _, x := range s.timeline[n-k:] {
			rate += x.InPerSecond / float64(k)
			out += x.OutPerSecond / float64(k)
		}
	}
	el := now.Sub(s.start).Seconds()
	return fmt.Sprintf("bench %s %s: %.0fs, %d/%d records, %.0f rec/s, %.0f out rows/s, rss %.0f MB",
		s.label, s.name, el, s.in.Load()-s.base, s.total, rate, out, float64(procStatusKB("VmRSS:"))/1024)
}

// downsample merges neighbouring samples (averaging rates, keeping the max
// latency) until at most n remain.
func downsample(tl []Sample, n int) []Sample {
	if len(tl) <= n || n <= 0 {
		return tl
	}
	k := (len(tl) + n - 1) / n
	out := make([]Sample, 0, n)
	for i := 0; i < len(tl); i += k {
		j := min(i+k, len(tl))
		var m Sample
		for _, x := range tl[i:j] {
			m.InPerSecond += x.InPerSecond / float64(j-i)
			m.OutPerSecond += x.OutPerSecond / float64(j-i)
			m.MaxLatencyMs = max(m.MaxLatencyMs, x.MaxLatencyMs)
		}
		m.T = tl[j-1].T
		out = append(out, m)
	}
	return out
}

package bench

import (
	"math"
	"math/bits"
	"time"
)

// Histogram is a log-linear latency histogram (HDR-style): values are
// bucketed by their power of two and, within it, by 2^subBits linear
// sub-buckets, so every recorded value is reproduced within a relative error
// of 2^-subBits (0.8% with 7 sub-bucket bits). Values are nanoseconds; the
// range is 1 ns .. ~292 years. The zero value is ready to use. Not safe for
// concurrent use.
type Histogram struct {
	counts [64 << subBits]uint64
	n      uint64
	min    int64
	max    int64
	sum    float64
}

const subBits = 7

// bucketOf returns the bucket index of v (v >= 0).
func bucketOf(v int64) int {
	if v < 1<<subBits {
		return int(v) // exact for small values
	}
	u := uint64(v)
	exp := bits.Len64(u) - 1 - subBits // >= 0
	sub := int(u>>uint(exp)) & (1<<subBits - 1)
	return (exp+1)<<subBits + sub
}

// bucketHigh returns the largest value that falls into bucket i.
func bucketHigh(i int) int64 {
	if i < 1<<subBits {
		return int64(i)
	}
	exp := i>>subBits - 1
	sub := int64(i & (1<<subBits - 1))
	lo := (1<<subBits | sub) << uint(exp)
	return lo + (int64(1)<<uint(exp) - 1)
}

// Record adds one value (negative values count as 0).
func (h *Histogram) Record(v int64) {
	if v < 0 {
		v = 0
	}
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += float64(v)
}

// RecordDuration adds d.
func (h *Histogram) RecordDuration(d time.Duration) { h.Record(int64(d)) }

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest recorded value (0 when empty).
func (h *Histogram) Max() int64 { return h.max }

// Mean is the arithmetic mean (0 when empty).
func (h *Histogram) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

// Quantile returns the value at quantile q in [0, 1]: the upper edge of the
// bucket holding the ceil(q*n)-th smallest value, clamped to [min, max].
// 0 when empty.
func (h *Histogram) Quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(max(bucketHigh(i), h.min), h.max)
		}
	}
	return h.max
}

// Merge adds o's values to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
}

// Latency summarizes a histogram of nanoseconds in milliseconds.
type Latency struct {
	Count  uint64  `json:"count"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
	MeanMs float64 `json:"mean_ms"`
}

// Summary returns h's percentiles in milliseconds.
func (h *Histogram) Summary() Latency {
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	return Latency{
		Count: h.n, P50Ms: ms(h.Quantile(0.5)), P90Ms: ms(h.Quantile(0.9)), P99Ms: ms(h.Quantile(0.99)),
		P999Ms: ms(h.Quantile(0.999)), MaxMs: ms(h.max), MeanMs: h.Mean() / 1e6,
	}
}

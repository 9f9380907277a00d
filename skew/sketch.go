package skew

import (
	"slices"
	"strings"
)

// SpaceSaving finds the heaviest keys of a stream in bounded memory (the
// Space-Saving algorithm, Metwally et al. 2005): it keeps K counters; a
// key not counted takes over the smallest counter, inheriting its count
// as an overestimate (Err). Every key whose true weight exceeds the
// stream's total / K is among the counted ones. Decay ages all counts, so
// the counts follow the recent rate. Not safe for concurrent use.
type SpaceSaving struct {
	k     int
	index map[string]int // key → position in items
	items []HeavyHitter
}

// HeavyHitter is a counted key: Count is its estimated weight, at most Err
// more than the true one.
type HeavyHitter struct {
	Key   string
	Count float64
	Err   float64
}

// NewSpaceSaving returns a sketch with k counters (at least 1).
func NewSpaceSaving(k int) *SpaceSaving {
	k = max(k, 1)
	return &SpaceSaving{k: k, index: make(map[string]int, k), items: make([]HeavyHitter, 0, k)}
}

// Add adds weight w to key.
func (s *SpaceSaving) Add(key []byte, w float64) {
	if i, ok := s.index[string(key)]; ok {
		s.items[i].Count += w
		return
	}
	if len(s.items) < s.k {
		s.index[string(key)] = len(s.items)
		s.items = append(s.items, HeavyHitter{Key: string(key), Count: w})
		return
	}
	m := 0
	for i := range s.items {
		if s.items[i].Count < s.items[m].Count {
			m = i
		}
	}
	delete(s.index, s.items[m].Key)
	min := s.items[m].Count
	s.items[m] = HeavyHitter{Key: string(key), Count: min + w, Err: min}
	s.index[s.items[m].Key] = m
}

// Decay multiplies every count by f (0 < f < 1).
func (s *SpaceSaving) Decay(f float64) {
	for i := range s.items {
		s.items[i].Count *= f
		s.items[i].Err *= f
	}
}

// Top returns up to n counted keys, heaviest first.
func (s *SpaceSaving) Top(n int) []HeavyHitter {
	out := slices.Clone(s.items)
	slices.SortFunc(out, func(a, b HeavyHitter) int {
		switch {
		case a.Count > b.Count:
			return -1
		case a.Count < b.Count:
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

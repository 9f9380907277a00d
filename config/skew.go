package config

import "fmt"

// Skew configures hot keys (package skew): salted fan-out of parents with
// many children across keyed partitions (`run`), and fan-outs done in
// bounded chunks between other keys' inputs (`run` and `replay`).
type Skew struct {
	// HotChildren is the child count at which a parent turns hot: its
	// children are spread over Salts sub-keys on different keyed
	// partitions, each fanning out its share of the parent's changes.
	// Default 10000; 0 turns salting off.
	HotChildren *int `yaml:"hot_children"`
	// Salts is the number of sub-keys of a hot parent (default 0: the
	// keyed topic's partition count). 1 is not allowed (it is no split).
	Salts int `yaml:"salts"`
	// CoolChildren is the child count at or below which a hot parent
	// cools back to one key (default HotChildren/2; must be below
	// HotChildren, so that a parent does not flip at every change).
	CoolChildren int `yaml:"cool_children"`
	// ChunkRows is how many rows a fan-out emits before other keys' inputs
	// get a turn (default 1024); -1 emits every fan-out at once (no fair
	// fan-out, the behaviour before hot-key handling). In `replay` into a
	// changelog table it is also the fan-out rows each later input record
	// buys (budgets counted in records, so that a re-created batch cuts the
	// same chunks).
	ChunkRows int `yaml:"chunk_rows"`
	// TopKeys bounds the hot and busy keys exposed in /metrics (default 10).
	TopKeys int `yaml:"top_keys"`
}

// Skew defaults.
const (
	DefaultHotChildren = 10000
	DefaultChunkRows   = 1024
	DefaultTopKeys     = 10
	MaxSalts           = 4096
)

// Hot returns the hot-parent threshold (0: salting off).
func (s *Skew) Hot() int {
	if s.HotChildren == nil {
		return DefaultHotChildren
	}
	return *s.HotChildren
}

// Cool returns the child count at or below which a hot parent cools.
func (s *Skew) Cool() int {
	if s.CoolChildren > 0 {
		return s.CoolChildren
	}
	return s.Hot() / 2
}

// SaltsFor returns the number of salts given the keyed topic's partition
// count.
func (s *Skew) SaltsFor(keyedPartitions int) int {
	if s.Salts > 0 {
		return s.Salts
	}
	return max(keyedPartitions, 2)
}

func (s *Skew) defaults() {
	if s.HotChildren == nil {
		n := DefaultHotChildren
		s.HotChildren = &n
	}
	if s.ChunkRows == 0 {
		s.ChunkRows = DefaultChunkRows
	}
	if s.TopKeys == 0 {
		s.TopKeys = DefaultTopKeys
	}
}

func (s *Skew) validate(c *Config, p *Problems) {
	const sec = "skew"
	hot := s.Hot()
	if hot < 0 {
		c.add(p, fmt.Sprintf("skew.hot_children %d: use a child count, or 0 to turn salting off", hot), sec, "hot_children")
	}
	if s.Salts < 0 || s.Salts == 1 || s.Salts > MaxSalts {
		c.add(p, fmt.Sprintf("skew.salts %d: use 0 (the keyed topic's partition count) or 2..%d", s.Salts, MaxSalts), sec, "salts")
	}
	if s.CoolChildren < 0 || (hot > 0 && s.CoolChildren >= hot) {
		c.add(p, fmt.Sprintf("skew.cool_children %d: use 0 (hot_children/2) or a count below hot_children (%d)", s.CoolChildren, hot), sec, "cool_children")
	}
	if s.ChunkRows < -1 {
		c.add(p, fmt.Sprintf("skew.chunk_rows %d: use a positive row count, 0 (default %d) or -1 (no chunking)", s.ChunkRows, DefaultChunkRows), sec, "chunk_rows")
	}
	if s.TopKeys < 0 || s.TopKeys > 1000 {
		c.add(p, fmt.Sprintf("skew.top_keys %d: use 1..1000", s.TopKeys), sec, "top_keys")
	}
}

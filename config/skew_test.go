package config

import (
	"errors"
	"strings"
	"testing"
)

func TestSkewDefaults(t *testing.T) {
	c, err := Parse([]byte(good), "good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := c.Skew
	if s.Hot() != DefaultHotChildren || s.Cool() != DefaultHotChildren/2 || s.ChunkRows != DefaultChunkRows ||
		s.TopKeys != DefaultTopKeys || s.SaltsFor(6) != 6 || s.SaltsFor(1) != 2 {
		t.Errorf("defaults: hot %d cool %d chunk %d top %d salts(6) %d", s.Hot(), s.Cool(), s.ChunkRows, s.TopKeys, s.SaltsFor(6))
	}
}

func TestSkewSettings(t *testing.T) {
	c, err := Parse([]byte(good+"skew: {hot_children: 0, salts: 8, chunk_rows: -1}\n"), "off.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Skew.Hot() != 0 || c.Skew.SaltsFor(3) != 8 || c.Skew.ChunkRows != -1 {
		t.Errorf("hot_children 0 must turn salting off (got %d), salts 8 (got %d), chunk -1 (got %d)", c.Skew.Hot(), c.Skew.SaltsFor(3), c.Skew.ChunkRows)
	}
	c, err = Parse([]byte(good+"skew: {hot_children: 100, cool_children: 10}\n"), "set.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Skew.Hot() != 100 || c.Skew.Cool() != 10 {
		t.Errorf("hot %d cool %d", c.Skew.Hot(), c.Skew.Cool())
	}
}

// Every skew problem is reported at once, on its line.
func TestSkewProblems(t *testing.T) {
	_, err := Parse([]byte(good+"skew:\n  hot_children: -3\n  salts: 1\n  cool_children: -1\n  chunk_rows: -2\n  top_keys: 5000\n"), "bad.yaml")
	var p *Problems
	if !errors.As(err, &p) {
		t.Fatalf("want *Problems, got %v", err)
	}
	want := map[int]string{8: "hot_children -3", 9: "salts 1", 10: "cool_children -1", 11: "chunk_rows -2", 12: "top_keys 5000"}
	got := map[int]string{}
	for _, it := range p.Items {
		got[it.Line] += it.Msg
	}
	for line, frag := range want {
		if !strings.Contains(got[line], frag) {
			t.Errorf("missing problem at line %d containing %q; got:\n%v", line, frag, err)
		}
	}
}

package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestKafkaPartitioner: the partitions are Kafka's default partitioner's,
// (murmur2(key) & 0x7fffffff) % n, on the vectors of Kafka's
// UtilsTest.testMurmur2 (n = 2^31-1 keeps the masked hash as it is).
func TestKafkaPartitioner(t *testing.T) {
	part := kafkaPartitioner()
	for key, hash := range map[string]int32{
		"21":                       -973932308,
		"foobar":                   -790332482,
		"a-little-bit-long-string": -985981536,
		"abc":                      479470107,
	} {
		want := int64(hash) & 0x7fffffff
		if got := part([]byte(key), 1<<31-1); int64(got) != want {
			t.Errorf("partition(%q) = %d, want %d", key, got, want)
		}
		if got, want := part([]byte(key), 9), int32(want%9); got != want {
			t.Errorf("partition(%q, 9) = %d, want %d", key, got, want)
		}
	}
}

// TestChangesFinal: the latest version of each row key wins, whatever the
// order of the lines; a retraction removes the row; a negative control
// shows the comparison notices a stale row.
func TestChangesFinal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	lines := `{"op":"upsert","version":2,"prev_version":1,"parent_key":[1],"child_key":[10],"values":{"user_id":1,"domain_id":10,"n":"new"}}
{"op":"upsert","version":1,"prev_version":0,"parent_key":[1],"child_key":[10],"values":{"user_id":1,"domain_id":10,"n":"old"}}
{"op":"upsert","version":1,"prev_version":0,"parent_key":[1],"child_key":[11],"values":{"user_id":1,"domain_id":11,"n":"gone"}}
{"op":"retract","version":3,"prev_version":1,"parent_key":[1],"child_key":[11],"values":{"user_id":1,"domain_id":11,"n":"gone"}}
{"op":"upsert","version":5,"prev_version":0,"parent_key":[2],"child_key":[12],"values":{"domain_id":12,"user_id":2,"n":"x"}}
`
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := changesFinal(path)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	want := []string{`{"domain_id":10,"n":"new","user_id":1}`, `{"domain_id":12,"n":"x","user_id":2}`}
	if !slices.Equal(got, want) {
		t.Fatalf("final rows %q, want %q", got, want)
	}
	if m, e := diffRows(want, got); len(m)+len(e) != 0 {
		t.Fatalf("diff of equal rows: missing %q extra %q", m, e)
	}
	// Negative control: an outdated row of domain 10 and a row that should
	// have left are told apart.
	stale := []string{`{"domain_id":10,"n":"old","user_id":1}`, `{"domain_id":12,"n":"x","user_id":2}`, `{"domain_id":11,"n":"gone","user_id":1}`}
	m, e := diffRows(want, stale)
	if len(m) != 1 || len(e) != 2 || staleRows(want, e, "domain_id") != 1 {
		t.Fatalf("stale output: missing %q extra %q (stale %d), want 1 missing, 2 extra of which 1 stale", m, e, staleRows(want, e, "domain_id"))
	}
}

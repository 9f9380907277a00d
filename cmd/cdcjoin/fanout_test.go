package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/cdcgen"
)

// TestSigtermDuringFanOut: SIGTERM while `run` fans a rename of a parent
// with 50,000 children out (in chunks between other work): it exits 0
// within its drain timeout (it finishes the fan-out, or leaves it for the
// next start), and a restart converges to the join. Guards what issue 24
// found working (exit 0 in 0.1 s) against the new shutdown paths.
func TestSigtermDuringFanOut(t *testing.T) {
	const children = 50000
	c := sourceCluster(t, 1)
	user := func(op, name string) cdcgen.Record {
		return cdcgen.Record{Topic: cdcgen.DefaultParentTopic, Key: []byte(`{"id":1}`),
			Value: []byte(`{"before":null,"after":{"id":1,"firstname":"` + name + `","lastname":"l"},"op":"` + op + `"}`)}
	}
	recs := []cdcgen.Record{user("r", "a")}
	for i := 1; i <= children; i++ {
		recs = append(recs, cdcgen.Record{Topic: cdcgen.DefaultChildTopic, Key: []byte(fmt.Sprintf(`{"id":%d}`, i)),
			Value: []byte(fmt.Sprintf(`{"before":null,"after":{"id":%d,"user_id":1,"domain_name":"d%d"},"op":"r"}`, i, i))})
	}
	produceRecords(t, c.ListenAddrs(), recs)
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	cfg := writeFile(t, dir, "job.yaml", fmt.Sprintf(`name: fanout
parent: {topic: %s, key: id}
child:  {topic: %s, key: id, parent_key: user_id}
select: parent.id AS user_id, parent.firstname, parent.lastname, child.id AS domain_id, child.domain_name
state: {dir: %s}
kafka:
  brokers: [%s]
  session_timeout: 3s
  drain_timeout: 5s
  metrics_addr: 127.0.0.1:0
skew: {hot_children: 0, chunk_rows: 256}
`, cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic, filepath.Join(dir, "state"), strings.Join(c.ListenAddrs(), ", ")))
	log := childLog(t, dir)
	start := func() *runProc { return startRun(t, log, "--config", cfg, "--output", out, "--log-level", "info") }
	p := start()
	rows := func() int { return len(jsonlRows(t, out)) }
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Minute)
		for !cond() {
			select {
			case err := <-p.exited:
				t.Fatalf("run exited while waiting for %s: %v", what, err)
			case <-time.After(time.Second): // each look reads the whole output
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5 minutes:\n%s", what, childProgress(p.metrics))
			}
		}
	}
	waitFor("the snapshot joined", func() bool { return rows() == children })
	produceRecords(t, c.ListenAddrs(), []cdcgen.Record{user("u", "renamed")})
	renamed := func() int {
		n := 0
		for _, r := range jsonlRows(t, out) {
			if r.Values[1] == "renamed" {
				n++
			}
		}
		return n
	}
	waitFor("the fan-out under way", func() bool { return renamed() > 0 })
	began := time.Now()
	if err := p.stop(60 * time.Second); err != nil {
		t.Fatalf("run after SIGTERM during the fan-out: %v", err)
	}
	t.Logf("exit 0 %v after SIGTERM, %d of %d rows renamed by then", time.Since(began).Round(time.Millisecond), renamed(), children)
	p = start()
	waitFor("the fan-out finished after the restart", func() bool { return renamed() == children && rows() == children })
	if err := p.stop(stopWait); err != nil {
		t.Fatalf("second run after SIGTERM: %v", err)
	}
}

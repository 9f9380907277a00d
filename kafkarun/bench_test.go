package kafkarun_test

import (
	"testing"
	"time"
)

// BenchmarkPipeline measures keying + join throughput through kfake: a
// cdcgen history (3 partitions per topic, mixed schemas) is produced first,
// then timed from Run's start until the sink shows the oracle's table.
// Reports source events per second (all three stages share this machine's
// cores with kfake itself).
func BenchmarkPipeline(b *testing.B) {
	o := oracleOptions(42)
	o.Ops, o.Users, o.Domains = 40000, 5000, 10000
	h := generate(b, o)
	want := oracle(h, false)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c := newCluster(b, 3)
		produce(b, c.ListenAddrs(), h.Records)
		cfg := jobConfig(b, jobOpts{brokers: brokersOf(c), stateDir: b.TempDir(), batch: 2000})
		m := newModel()
		b.StartTimer()
		t0 := time.Now()
		in := start(b, cfg, m.sink())
		diff, err := m.waitEqual(want, 5*time.Minute, in)
		elapsed := time.Since(t0)
		b.StopTimer()
		if serr := in.stop(b); serr != nil || err != nil || diff != "" {
			b.Fatalf("run %v, wait %v, diff:\n%s", serr, err, diff)
		}
		b.ReportMetric(float64(len(h.Records))/elapsed.Seconds(), "events/s")
		b.ReportMetric(float64(m.changes)/elapsed.Seconds(), "changes/s")
		c.Close()
	}
}

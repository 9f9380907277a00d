package kafkarun_test

import (
	"testing"

	"github.com/cdcjoin/cdcjoin/cdcgen"
)

func smallHistory(t testing.TB, seed int64, ops int) *cdcgen.History {
	t.Helper()
	o := oracleOptions(seed)
	o.Ops, o.Users, o.Domains = ops, 50, 100
	return generate(t, o)
}

func generate(t testing.TB, o cdcgen.Options) *cdcgen.History {
	t.Helper()
	h, err := cdcgen.Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// oracleOptions are cdcgen's defaults (3 partitions, mixed schemas,
// redelivery, snapshot rerun, PK changes, FK moves, TOAST placeholders, …)
// minus truncates: on multi-partition topics their order against the other
// partitions' records is undefined (see the package doc).
func oracleOptions(seed int64) cdcgen.Options {
	o := cdcgen.DefaultOptions(seed)
	o.Mix.TruncateUsers, o.Mix.TruncateDomains = 0, 0
	return o
}

// TestOracle: (a) a randomized history through Run equals the oracle join.
func TestOracle(t *testing.T) {
	for _, tc := range []struct {
		seed int64
		join string
	}{{1, "inner"}, {2, "left"}} {
		t.Run(tc.join, func(t *testing.T) {
			h := smallHistory(t, tc.seed, 3000)
			c := newCluster(t, int32(h.Options.Partitions))
			produce(t, c.ListenAddrs(), h.Records)
			cfg := jobConfig(t, jobOpts{join: tc.join, brokers: brokersOf(c), stateDir: t.TempDir()})
			m := newModel()
			in := start(t, cfg, m.sink())
			want := oracle(h, tc.join == "left")
			diff, err := m.waitEqual(want, stallLimit, in)
			if err != nil {
				t.Fatalf("seed %d: %v", tc.seed, err)
			}
			if err := in.stop(t); err != nil {
				t.Fatalf("seed %d: Run: %v", tc.seed, err)
			}
			if diff != "" {
				t.Fatalf("seed %d: final table differs from the oracle:\n%s", tc.seed, diff)
			}
			got, err := m.live()
			if err != nil {
				t.Fatalf("seed %d: %v", tc.seed, err)
			}
			if d := cdcgen.Diff(want, got, 10); d != "" {
				t.Fatalf("seed %d: after shutdown:\n%s", tc.seed, d)
			}
			t.Logf("seed %d: %d records, %d rows, %d changes, stale %d repeats %d", tc.seed, len(h.Records), len(want), m.changes, m.rmt.Stale, m.rmt.Repeats)
		})
	}
}

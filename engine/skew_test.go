package engine_test

import (
	"fmt"
	"math/rand"
	"sync/atomic"
	"testing"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
)

// hotHistory makes a few parents own most children (Zipf over user ids)
// and fans out in chunks of a few rows, so that fan-outs are interrupted
// by other keys' records, wait across batch commits and crashes, and
// later inputs of the fanning-out parent wait behind them.
func hotHistory(o *cdcgen.Options, cfg *config.Config, rng *rand.Rand) {
	o.ParentSkew = 1.1 + rng.Float64()
	cfg.Skew.ChunkRows = 1 + rng.Intn(16)
}

// TestOracleFairFanOut is TestOracle with hot parents and fan-outs done
// in chunks of 1..16 rows between other records. Every seed must chunk a
// fan-out, and the seeds together must make inputs wait behind one (a
// history may happen to send none of a hot parent's changes while its
// fan-out runs: seed 1029 chunks 6 fan-outs and makes no input wait).
func TestOracleFairFanOut(t *testing.T) {
	var waited, ran atomic.Uint64
	t.Cleanup(func() {
		// (A single seed rerun alone may have none.)
		if !t.Failed() && ran.Load() >= 4 && waited.Load() == 0 {
			t.Errorf("no input waited behind a fan-out in any seed: the test does not exercise fair fan-out")
		}
	})
	for _, join := range []string{"inner", "left"} {
		for _, seed := range seeds(t) {
			t.Run(fmt.Sprintf("%s/seed=%d", join, seed), func(t *testing.T) {
				t.Parallel()
				st := runOracleWith(t, join, seed, false, hotHistory)
				if st.FanOutsChunked == 0 {
					t.Fatalf("seed %d: no fan-out in chunks: the test does not exercise fair fan-out", seed)
				}
				waited.Add(st.InputsWaited)
				ran.Add(1)
				t.Logf("seed %d: %d fan-outs in chunks, %d inputs waited behind one", seed, st.FanOutsChunked, st.InputsWaited)
			})
		}
	}
}

// TestOracleFairFanOutCrash adds kill -9 crashes at random points,
// including in the middle of fan-outs and while inputs wait for them
// (state.sync on: a kill -9 keeps what was committed), and checks the
// changelog model too.
func TestOracleFairFanOutCrash(t *testing.T) {
	ss := seeds(t)
	if len(ss) > 10 {
		ss = ss[:10]
	}
	for _, join := range []string{"inner", "left"} {
		for _, seed := range ss {
			t.Run(fmt.Sprintf("%s/seed=%d", join, seed), func(t *testing.T) {
				t.Parallel()
				runOracleWith(t, join, seed, true, func(o *cdcgen.Options, cfg *config.Config, rng *rand.Rand) {
					hotHistory(o, cfg, rng)
					cfg.State.Sync = true
				})
			})
		}
	}
}

package engine_test

import (
	"fmt"
	"math/rand"
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
// in chunks of 1..16 rows between other records.
func TestOracleFairFanOut(t *testing.T) {
	for _, join := range []string{"inner", "left"} {
		for _, seed := range seeds(t) {
			t.Run(fmt.Sprintf("%s/seed=%d", join, seed), func(t *testing.T) {
				t.Parallel()
				st := runOracleWith(t, join, seed, false, hotHistory)
				if st.FanOutsChunked == 0 || st.InputsWaited == 0 {
					t.Fatalf("seed %d: %d fan-outs in chunks, %d inputs waited: the test does not exercise fair fan-out", seed, st.FanOutsChunked, st.InputsWaited)
				}
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

package driver

import (
	"fmt"
	"os"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/version"
)

// ReplayState is the state a `replay` left, read for a handover to `run`
// (kafkarun.Handover): its rows and indexes (Store), its input positions
// (Store.Positions), its version clock and the next input's position, and
// what its decoders learned about key types. Opening it changes nothing.
type ReplayState struct {
	Store    *joinstate.Store
	Spec     *keyed.Spec
	Clock    version.Clock
	Inputs   int64  // the next keyed input's position: Clock.At(Inputs) is above every version emitted
	KeyTypes []byte // job.Decoder.KeyTypes (nil: nothing learned)
}

// OpenReplayState opens the replay state in dir for cfg's join; a state
// of another join shape is refused. Close it when done.
func OpenReplayState(cfg *config.Config, dir string) (*ReplayState, error) {
	spec, err := job.Spec(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("cdcjoin: replay state: %w", err)
	}
	st, err := joinstate.Open(job.StateOptions(cfg, dir))
	if err != nil {
		return nil, err
	}
	rs := &ReplayState{Store: st, Spec: spec}
	if err := rs.load(dir); err != nil {
		st.Close()
		return nil, err
	}
	return rs, nil
}

func (rs *ReplayState) load(dir string) error {
	if err := CheckFingerprint(rs.Store, rs.Spec, dir); err != nil {
		return err
	}
	c, next, _, err := ReadEngineClock(rs.Store)
	if err != nil {
		return fmt.Errorf("cdcjoin: state in %s: %w", dir, err)
	}
	rs.Clock, rs.Inputs = c, next
	rs.KeyTypes, _, err = MetaKeyTypes.Get(rs.Store)
	return err
}

// ReadEngineClock returns the version clock of an engine's state and the
// position of its next input (MetaClock, MetaInputs); a state of cdcjoin
// ≤ wave 1 has the legacy clock version.Legacy(0) at its version counter
// (MetaLegacyCount). ok is false for a state with neither (new).
func ReadEngineClock(r MetaReader) (c version.Clock, next int64, ok bool, err error) {
	if c, ok, err = MetaClock.Get(r); err != nil || ok {
		if ok {
			var has bool
			if next, has, err = MetaInputs.Get(r); err == nil && !has {
				err = fmt.Errorf("%w: input count", joinstate.ErrCorrupt)
			}
		}
		return c, next, ok, err
	}
	if next, ok, err = MetaLegacyCount.Get(r); err != nil || !ok {
		return c, 0, false, err
	}
	return version.Legacy(0), next, true, nil
}

// Close closes the state.
func (rs *ReplayState) Close() error { return rs.Store.Close() }

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
// For a multi-stage plan Spec is nil: Store holds the plan's Pipeline
// state (package stage's layout, index entries with their source
// partitions).
type ReplayState struct {
	Store    *joinstate.Store
	Spec     *keyed.Spec
	Clock    version.Clock
	Inputs   int64  // the next keyed input's position: Clock.At(Inputs) is above every version emitted
	KeyTypes []byte // job.Decoder.KeyTypes (nil: nothing learned)
}

// OpenReplayState opens the replay state in dir for cfg's join; a state
// of another join shape is refused, and so is a plan's state whose index
// entries do not record their source partitions (made by an earlier
// cdcjoin). Close it when done.
func OpenReplayState(cfg *config.Config, dir string) (*ReplayState, error) {
	var spec *keyed.Spec
	if cfg.Plan() == nil {
		var err error
		if spec, err = job.Spec(cfg); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("cdcjoin: replay state: %w", err)
	}
	st, err := joinstate.Open(job.StateOptions(cfg, dir))
	if err != nil {
		return nil, err
	}
	rs := &ReplayState{Store: st, Spec: spec}
	if err := rs.load(cfg, dir); err != nil {
		st.Close()
		return nil, err
	}
	return rs, nil
}

func (rs *ReplayState) load(cfg *config.Config, dir string) error {
	if rs.Spec != nil {
		if err := CheckFingerprint(rs.Store, rs.Spec, dir); err != nil {
			return err
		}
	} else {
		parts, err := PlanPartitions(rs.Store, cfg, dir)
		if err != nil {
			return err
		}
		if !parts {
			return fmt.Errorf("cdcjoin: the replay state in %s was made by a cdcjoin whose plan indexes do not record the source partition of each row, which a handover needs: replay the input again with this version", dir)
		}
	}
	c, next, ok, err := ReadEngineClock(rs.Store)
	if err == nil && !ok && rs.Spec == nil {
		err = fmt.Errorf("%w: no version clock (has the replay committed anything?)", joinstate.ErrCorrupt)
	}
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

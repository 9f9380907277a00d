package driver

import (
	"context"

	"github.com/cdcjoin/cdcjoin/bulkload"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/version"
)

// FinishRebuild ends the bulk rebuild rb of keyed partition partition of
// topic: its sorted rows go into st as tables (written in dir) and are
// ingested with the position after rb's last record and rb's clock, in one
// atomic step (IngestRebuild). A crash before it leaves st as it was.
func FinishRebuild(ctx context.Context, st *joinstate.Store, rb *bulkload.KeyedRebuild, dir, topic string, partition int32) error {
	return IngestRebuild(ctx, st, dir, func(load *joinstate.Load) error {
		_, err := rb.L.Finish(load, nil)
		return err
	}, topic, partition, rb.Last+1, rb.Clock)
}

// IngestRebuild ends a bulk rebuild of keyed partition partition of topic:
// fill writes the rebuilt state to a joinstate.Load (tables in dir, in key
// order), which is ingested with position next and clock in one atomic
// step (Commit, without output: a rebuild emits nothing). On error, or a
// crash before the commit, st is left as it was.
func IngestRebuild(ctx context.Context, st *joinstate.Store, dir string, fill func(*joinstate.Load) error, topic string, partition int32, next int64, clock version.Clock) error {
	load, err := st.BeginLoad(dir)
	if err != nil {
		return err
	}
	if err := fill(load); err != nil {
		load.Abort()
		return err
	}
	err = Commit(ctx, load, Batch{Write: func(c Committer) error {
		if err := c.SetPosition(topic, partition, next); err != nil {
			return err
		}
		return MetaClock.Put(c, clock)
	}})
	if err != nil {
		load.Abort()
	}
	return err
}

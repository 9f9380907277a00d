package driver

import (
	"context"

	"github.com/cdcjoin/cdcjoin/bulkload"
	"github.com/cdcjoin/cdcjoin/joinstate"
)

// FinishRebuild ends the bulk rebuild rb of keyed partition partition of
// topic: its sorted rows go into st as tables (written in dir) and are
// ingested with the position after rb's last record and rb's clock, in one
// atomic step (Commit, without output: a rebuild emits nothing). A crash
// before it leaves st as it was.
func FinishRebuild(ctx context.Context, st *joinstate.Store, rb *bulkload.KeyedRebuild, dir, topic string, partition int32) error {
	load, err := st.BeginLoad(dir)
	if err != nil {
		return err
	}
	if _, err := rb.L.Finish(load, nil); err != nil {
		load.Abort()
		return err
	}
	err = Commit(ctx, load, Batch{Write: func(c Committer) error {
		if err := c.SetPosition(topic, partition, rb.Last+1); err != nil {
			return err
		}
		return MetaClock.Put(c, rb.Clock)
	}})
	if err != nil {
		load.Abort()
	}
	return err
}

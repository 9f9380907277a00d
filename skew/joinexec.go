package skew

import (
	"fmt"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
)

// JoinExecutor runs OpApply ops through a keyed.Join, as fan-outs done in
// chunks: the Executor of a join without salting (the engine behind
// `replay` and the bench). Its tasks are keyed.FanOut encodings. Not safe
// for concurrent use.
type JoinExecutor struct {
	Join *keyed.Join
	fo   keyed.FanOut
	enc  []byte
}

// Run implements Executor.
func (x *JoinExecutor) Run(t keyed.State, _ []byte, op *Op, budget int, out keyedlog.Out) ([]byte, int, error) {
	if op.Kind != OpApply {
		return nil, 0, fmt.Errorf("cdcjoin: skew: join executor: unexpected op kind %d", op.Kind)
	}
	before := x.rows()
	fo, err := x.Join.Start(t, &op.In, op.Version, budget, out.Emit)
	used := int(x.rows() - before)
	if err != nil || fo == nil {
		return nil, used, err
	}
	return keyed.AppendFanOut(nil, fo), used, nil
}

// Resume implements Executor.
func (x *JoinExecutor) Resume(t keyed.State, _ []byte, task []byte, budget int, out keyedlog.Out) ([]byte, int, error) {
	if err := keyed.DecodeFanOut(task, &x.fo); err != nil {
		return nil, 0, err
	}
	before := x.rows()
	done, err := x.Join.Continue(t, &x.fo, budget, out.Emit)
	used := int(x.rows() - before)
	if err != nil || done {
		return nil, used, err
	}
	return keyed.AppendFanOut(nil, &x.fo), used, nil
}

func (x *JoinExecutor) rows() uint64 { return x.Join.Stats.Upserts + x.Join.Stats.Retractions }

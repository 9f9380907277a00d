package kafkarun_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/skew"
)

// countingOp counts the messages its driver steps it with.
type countingOp struct {
	*skew.Fair
	steps *atomic.Int64
}

func (c countingOp) Step(t keyed.State, m *keyedlog.Msg, out keyedlog.Out) error {
	c.steps.Add(1)
	return c.Fair.Step(t, m, out)
}

// TestOperatorOption: the join stage runs the operator Options.Operator
// makes (the contract's wiring, package driver): here the engine's
// skew.Fair (the regular join without salting) wrapped to count its
// steps, which must give the oracle's join.
func TestOperatorOption(t *testing.T) {
	h := smallHistory(t, 3, 2000)
	c := newCluster(t, int32(h.Options.Partitions))
	produce(t, c.ListenAddrs(), h.Records)
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir()})
	spec, err := job.Spec(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var steps atomic.Int64
	var parts atomic.Int32
	m := newModel()
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(in.done)
		in.err = kafkarun.Run(ctx, cfg, kafkarun.Options{Sink: m.sink(), Operator: func(of kafkarun.OperatorFor) (kafkarun.Operator, error) {
			parts.Add(1)
			return kafkarun.Operator{Operator: countingOp{skew.NewFair(keyed.NewJoin(spec), cfg.Skew.ChunkRows), &steps}}, nil
		}})
	}()
	want := oracle(h, false)
	diff, err := m.waitEqual(want, stallLimit, in)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if diff != "" {
		t.Fatalf("final table differs from the oracle:\n%s", diff)
	}
	if parts.Load() == 0 || steps.Load() == 0 {
		t.Fatalf("Options.Operator made %d operators stepped %d times; want both > 0", parts.Load(), steps.Load())
	}
	t.Logf("%d records, %d rows; %d operators, %d steps", len(h.Records), len(want), parts.Load(), steps.Load())
}

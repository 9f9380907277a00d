package bench

import (
	"context"

	"github.com/cdcjoin/cdcjoin/sink"
)

func newKafkaDriver(ctx context.Context, o Options, p plan, stateDir string, inner sink.Sink, smp *sampler, pr *probes) (driver, error) {
	return nil, errNoKafka
}

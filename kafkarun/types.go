package kafkarun

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/registry"
	"github.com/cdcjoin/cdcjoin/row"
)

// SampleTypes reads the source topics from their beginning until it has
// decoded one record with a Kafka Connect schema on each side (or until
// limit records, or ctx is done), and returns the select list's Debezium
// column types in select order; entries stay zero for sides without a
// schema'd record. Sinks that create tables use it: the join stage itself
// only sees projected rows, not schemas. It blocks for at most the
// context's deadline and reads nothing else; errors are connection errors.
func SampleTypes(ctx context.Context, cfg *config.Config, limit int) ([]row.ColumnType, error) {
	base, err := clientOpts(&cfg.Kafka, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(base,
		kgo.ConsumeTopics(cfg.Parent.Topic, cfg.Child.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)...)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: sample types: %w", err)
	}
	defer cl.Close()
	spec, err := job.Spec(cfg)
	if err != nil {
		return nil, err
	}
	schemas, err := job.OpenSchemas(cfg, registry.Options{})
	if err != nil {
		return nil, err
	}
	defer schemas.Close()
	defer context.AfterFunc(ctx, schemas.Close)()
	dec := job.NewDecoder(cfg, spec, schemas)
	var hdrs []debezium.Header
	var types job.Types
	var ev debezium.Event
	for n := 0; n < limit && !types.Complete() && ctx.Err() == nil; {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollRecords(pctx, 500)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			n++
			hdrs = hdrs[:0]
			for _, h := range r.Headers {
				hdrs = append(hdrs, debezium.Header{Key: h.Key, Value: h.Value})
			}
			if side, ok, err := dec.DecodeHeaders(r.Topic, r.Partition, r.Offset, r.Key, r.Value, hdrs, &ev); err == nil && ok {
				types.Observe(side, &ev)
			}
		})
		if fs.Empty() && ctx.Err() == nil && pctx.Err() == nil {
			break
		}
	}
	return types.Output(spec), nil
}

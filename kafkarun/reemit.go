package kafkarun

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
)

// LockStateDir takes the lock a running instance holds on cfg.State.Dir,
// for commands that must not run beside `run` on the same state (reemit).
// The returned function releases it.
func LockStateDir(dir string) (func(), error) { return lockStateDir(dir) }

// JoinOffsets returns the keyed topic's partition count and the join
// group's committed offset per keyed partition (partitions without one
// are absent): where a restarted `run` emits from.
func JoinOffsets(ctx context.Context, cfg *config.Config) (int32, map[int32]int64, error) {
	base, err := clientOpts(&cfg.Kafka, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return 0, nil, err
	}
	cl, err := kgo.NewClient(base...)
	if err != nil {
		return 0, nil, fmt.Errorf("cdcjoin: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := cfg.Kafka.KeyedTopic()
	ds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, nil, fmt.Errorf("cdcjoin: describe topic %s: %w", topic, err)
	}
	d, ok := ds[topic]
	if !ok || d.Err != nil {
		return 0, nil, fmt.Errorf("cdcjoin: the keyed topic %s does not exist (has `cdcjoin run` run for this job?)", topic)
	}
	offs, err := adm.FetchOffsets(ctx, cfg.Kafka.JoinGroup())
	if err != nil {
		return 0, nil, fmt.Errorf("cdcjoin: the join group's offsets: %w", err)
	}
	out := map[int32]int64{}
	for p := range d.Partitions {
		if o, ok := offs.Lookup(topic, p); ok && o.Err == nil && o.At >= 0 {
			out[p] = o.At
		}
	}
	return int32(len(d.Partitions)), out, nil
}

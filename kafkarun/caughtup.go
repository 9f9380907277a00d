package kafkarun

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
)

// CaughtUp reports whether the job of cfg has processed everything in its
// topics so far: its keying group's committed offsets are at the source
// topics' ends and its join group's at the keyed topic's end (both move
// past transaction markers). Otherwise behind says where it is not. A
// driver of a job change (`cdcjoin switch`) waits for it before pointing
// the live view at the new job's table.
func CaughtUp(ctx context.Context, cfg *config.Config) (ok bool, behind string, err error) {
	base, err := clientOpts(&cfg.Kafka, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return false, "", err
	}
	cl, err := kgo.NewClient(base...)
	if err != nil {
		return false, "", fmt.Errorf("cdcjoin: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	k := &cfg.Kafka
	for _, g := range []struct {
		group  string
		topics []string
	}{{k.KeyingGroup(), []string{cfg.Parent.Topic, cfg.Child.Topic}}, {k.JoinGroup(), []string{k.KeyedTopic()}}} {
		ends, err := adm.ListEndOffsets(ctx, g.topics...)
		if err != nil {
			return false, "", fmt.Errorf("cdcjoin: end offsets of %v: %w", g.topics, err)
		}
		if err := ends.Error(); err != nil {
			return false, "", fmt.Errorf("cdcjoin: end offsets of %v: %w", g.topics, err)
		}
		committed, err := adm.FetchOffsets(ctx, g.group)
		if err != nil {
			return false, "", fmt.Errorf("cdcjoin: offsets of group %s: %w", g.group, err)
		}
		var lags []string
		var total int64
		ends.Each(func(e kadm.ListedOffset) {
			at := int64(0)
			if o, ok := committed.Lookup(e.Topic, e.Partition); ok && o.Err == nil {
				at = o.At
			}
			if lag := e.Offset - at; lag > 0 {
				total += lag
				lags = append(lags, fmt.Sprintf("%s/%d %d", e.Topic, e.Partition, lag))
			}
		})
		if total > 0 {
			sort.Strings(lags)
			if len(lags) > 4 {
				lags = append(lags[:4], "…")
			}
			return false, fmt.Sprintf("group %s is %d records behind (%v)", g.group, total, lags), nil
		}
	}
	return true, "", nil
}

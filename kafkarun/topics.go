package kafkarun

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/cdcjoin/cdcjoin/config"
)

// Recreated source topics.
//
// A source topic deleted and created again under the same name (an
// operator resetting Debezium, say) is another log: its offsets start
// over, and the job's state — the keying indexes, the join state, the rows
// in ClickHouse — holds rows of the old one that no event of the new one
// will ever retract. Kafka names the log by its topic id. The keying stage
// records each source topic's id in its index changelogs (the reserved key
// topicIDKey, and the local index's metadata), so that a start finds a
// recreated topic when it restores an index; and Run watches the ids while
// it runs. Either way the job stops with what to do (reset it) rather than
// keep stale rows silently.

// topicIDKey is the reserved index-changelog key under which the keying
// stage records the source topic's id (index keys never begin with 0xff).
const topicIDKey = "\xfftopic-id"

// metaTopicID is the local index's copy of the source topic's id.
const metaTopicID = "topic-id"

// topicIDWatch is how often Run checks the source topics' ids.
const topicIDWatch = 5 * time.Second

// RecreatedError is a source topic whose id is not the one the job's state
// was built from.
type RecreatedError struct {
	Topic, Was, Now string
	cfg             *config.Config
}

func (e *RecreatedError) Error() string {
	k := &e.cfg.Kafka
	return fmt.Sprintf("cdcjoin: source topic %s was deleted and created again (topic id %s, now %s): the job's state (indexes, join state, rows in ClickHouse) is of the old topic and would keep rows no event of the new one retracts; "+
		"reset the job: stop every instance, delete the topics %s, %s and %s, the consumer groups %s and %s, every instance's state.dir, and the ClickHouse table's rows (TRUNCATE TABLE), then start again",
		e.Topic, e.Was, e.Now, k.KeyedTopic(), k.ChildIndexTopic(), k.ParentIndexTopic(), k.KeyingGroup(), k.JoinGroup())
}

// watchTopicIDs checks the source topics' ids every topicIDWatch until ctx
// is done and returns a RecreatedError when one changed (nil at the end).
// A topic that is missing, or a request that fails, is left to the stages
// (their fetches fail, the probe reports the brokers).
func watchTopicIDs(ctx context.Context, cfg *config.Config, adm *kadm.Client, ids map[string]string) error {
	t := time.NewTicker(topicIDWatch)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		lctx, cancel := context.WithTimeout(ctx, adminTimeout)
		topics := make([]string, 0, len(ids))
		for t := range ids {
			topics = append(topics, t)
		}
		ds, err := adm.ListTopics(lctx, topics...)
		cancel()
		if err != nil {
			continue
		}
		for topic, was := range ids {
			if d, ok := ds[topic]; ok && d.Err == nil && d.ID.String() != was {
				return &RecreatedError{Topic: topic, Was: was, Now: d.ID.String(), cfg: cfg}
			}
		}
	}
}

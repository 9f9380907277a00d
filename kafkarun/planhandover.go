package kafkarun

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/stage"
)

// handoverPlace is where a handover writes: the clients' options, the
// admin client, the job's topics (setup's), the source topics' partition
// counts and the keying group's offsets to commit last.
type handoverPlace struct {
	base      []kgo.Opt
	adm       *kadm.Client
	top       topology
	parts     map[string]int32
	positions kadm.Offsets
}

// sourcePartitions returns the partition count of each topic.
func sourcePartitions(ctx context.Context, adm *kadm.Client, topics []string) (map[string]int32, error) {
	src, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: handover: list source topics: %w", err)
	}
	parts := map[string]int32{}
	for _, t := range topics {
		parts[t] = int32(len(src[t].Partitions))
	}
	return parts, nil
}

// handoverPlan is Handover of a multi-stage plan (see Handover; the topics
// and groups are plan.go's) once the replay's positions are known: st has
// what Handover filled in.
func handoverPlan(ctx context.Context, cfg *config.Config, pr *planRun, rs *driver.ReplayState, w *loadWriter,
	at handoverPlace, st HandoverStats, log *slog.Logger, start time.Time) (HandoverStats, error) {
	st.StageRows = make([]int64, pr.stages)
	kc := &cfg.Kafka
	top, parts := at.top, at.parts
	progress := newProgress(log, "handover")
	var total int64
	t := rs.Store.Begin()
	defer t.Abort()
	kv, err := stage.KeyedState(t)
	if err != nil {
		return st, err
	}
	p := pr.p
	// Every stage's rows, as load records of its keyed topic.
	err = stage.HandoverRecords(p, kv, top.keyedParts, func(n int, partition int32, key, value []byte) error {
		w.produce(&kgo.Record{Topic: stageTopic(kc, n), Partition: partition,
			Key: append([]byte(nil), key...), Value: append([]byte(nil), value...)})
		st.StageRows[n-1]++
		total++
		progress(total)
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("cdcjoin: handover: %w", err)
	}
	// The tables' indexes, each entry on its source partition's changelog.
	err = stage.IndexEntries(p, kv, func(item int, partition int32, key, rowBytes []byte) error {
		topic := cfg.Tables[p.Tables[item].Name].Topic
		side := pr.sideOf[topic]
		if partition >= parts[topic] {
			return fmt.Errorf("an index entry of %s names source partition %d, but %s has %d partitions", p.Tables[item].Alias, partition, topic, parts[topic])
		}
		w.produce(&kgo.Record{Topic: indexTopic(kc, int(side)), Partition: partition,
			Key: append([]byte(nil), key...), Value: append([]byte{}, rowBytes...)})
		st.TableIndex++
		total++
		progress(total)
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("cdcjoin: handover: %w", err)
	}
	// What the replay's decoders learned about key column types goes with
	// every index partition, as the keying stage keeps it.
	if kt := rs.KeyTypes; kt != nil {
		for i, topic := range pr.topics {
			for q := int32(0); q < parts[topic]; q++ {
				w.produce(&kgo.Record{Topic: indexTopic(kc, i+1), Partition: q, Key: []byte(keyTypesKey), Value: kt})
			}
		}
	}
	if err := w.flush(ctx); err != nil {
		return st, err
	}
	if st.Epoch, err = finishHandover(ctx, cfg, pr, rs, at.base, at.adm, top, at.positions); err != nil {
		return st, err
	}
	st.Elapsed = time.Since(start)
	log.Info("handover done", "stage_rows", st.StageRows, "table_index", st.TableIndex,
		"source_partitions", st.SourcePartitions, "epoch", st.Epoch, "elapsed", st.Elapsed)
	return st, nil
}

package kafkarun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/metrics"
)

// clientOpts are the options every client of the job shares: brokers,
// client id, TLS, SASL, logging. Clients that produce add producerOpts.
func clientOpts(k *config.Kafka, log *slog.Logger) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(k.Brokers...),
		kgo.ClientID(k.ClientID),
		kgo.DialTimeout(10 * time.Second),
		// franz-go's default of 5 min: under load a failed metadata
		// refresh left produces and assignments waiting for it that long.
		kgo.MetadataMaxAge(30 * time.Second),
		kgo.WithLogger(kgoLogger{log}),
	}
	if k.TLS.Enabled {
		tc, err := k.TLS.ClientConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	switch s := k.SASL; s.Mechanism {
	case config.SASLPlain:
		opts = append(opts, kgo.SASL(plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()))
	case config.SASLScramSHA256:
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()))
	case config.SASLScramSHA512:
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()))
	}
	return opts, nil
}

// producerOpts returns base with the producer options of k
// (kafka.compression) appended, in a new slice. Each client gets an option
// of its own: franz-go rewrites a ProducerBatchCompression's codec list in
// place when it builds a client, so one option shared by clients created
// concurrently is a data race.
func producerOpts(k *config.Kafka, base []kgo.Opt, more ...kgo.Opt) []kgo.Opt {
	opts := append(append(make([]kgo.Opt, 0, len(base)+len(more)+1), base...), more...)
	return append(opts, kgo.ProducerBatchCompression(compression(k.Compression)))
}

// compression is the producer codec of kafka.compression (validated).
func compression(name string) kgo.CompressionCodec {
	switch name {
	case "gzip":
		return kgo.GzipCompression()
	case "snappy":
		return kgo.SnappyCompression()
	case "lz4":
		return kgo.Lz4Compression()
	case "zstd":
		return kgo.ZstdCompression()
	}
	return kgo.NoCompression()
}

// kgoLogger forwards franz-go's warnings and errors to slog.
type kgoLogger struct{ l *slog.Logger }

func (g kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (g kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelWarn
	if level == kgo.LogLevelError {
		lv = slog.LevelError
	}
	g.l.Log(context.Background(), lv, "kafka: "+msg, keyvals...)
}

// heartbeat is the consumer groups' heartbeat interval: franz-go's 3 s, or
// a third of a shorter session timeout (franz-go refuses a heartbeat
// interval longer than the session timeout, which the configuration allows
// down to 1 s).
func heartbeat(session time.Duration) time.Duration {
	return min(3*time.Second, session/3)
}

// topology is what setup found or created.
type topology struct {
	parentParts, childParts int32
	keyedParts              int32
	keyedID                 string   // the keyed topic's id
	stageIDs                []string // a plan's stages' keyed topics' ids
	// sourceIDs are the source topics' ids at the start: a topic deleted
	// and recreated under the same name has another (topics.go).
	sourceIDs map[string]string
	// limits is max.message.bytes of the topics the keying stage writes
	// to (the internal topics and the dead-letter topic).
	limits map[string]int
}

// setup checks that the brokers answer and the source topics exist, and
// creates the internal topics (and the dead-letter topic) when absent.
func setup(ctx context.Context, cfg *config.Config, pr *planRun, adm *kadm.Client, cl *kgo.Client, log *slog.Logger) (topology, error) {
	var top topology
	k := &cfg.Kafka
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	err := cl.Ping(pctx)
	cancel()
	if err != nil {
		return top, fmt.Errorf("cdcjoin: cannot reach Kafka brokers %v: %w", k.Brokers, err)
	}
	if pr != nil {
		return setupPlan(ctx, cfg, pr, adm, log)
	}
	src, err := adm.ListTopics(ctx, cfg.Parent.Topic, cfg.Child.Topic)
	if err != nil {
		return top, fmt.Errorf("cdcjoin: list source topics: %w", err)
	}
	for _, t := range []string{cfg.Parent.Topic, cfg.Child.Topic} {
		d, ok := src[t]
		if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			return top, fmt.Errorf("cdcjoin: source topic %q does not exist (is the Debezium connector running, and is the topic name right?)", t)
		}
		if d.Err != nil {
			return top, fmt.Errorf("cdcjoin: source topic %q: %w", t, d.Err)
		}
	}
	top.parentParts = int32(len(src[cfg.Parent.Topic].Partitions))
	top.childParts = int32(len(src[cfg.Child.Topic].Partitions))
	top.sourceIDs = map[string]string{cfg.Parent.Topic: src[cfg.Parent.Topic].ID.String(), cfg.Child.Topic: src[cfg.Child.Topic].ID.String()}

	keyedParts := int32(k.KeyedPartitions)
	if keyedParts == 0 {
		keyedParts = max(top.parentParts, top.childParts)
	}
	lag := strconv.FormatInt(k.MinCompactionLag.Milliseconds(), 10)
	compact := "compact"
	keyedCfg := map[string]*string{"cleanup.policy": &compact, "min.compaction.lag.ms": &lag}
	if cfg.IsTimeJoin() {
		// Not a changelog: a moved partition is rebuilt from the whole
		// log (timejoin.go).
		del, forever := "delete", "-1"
		keyedCfg = map[string]*string{"cleanup.policy": &del, "retention.ms": &forever, "retention.bytes": &forever}
	}
	if top.keyedParts, err = ensureTopic(ctx, adm, k.KeyedTopic(), keyedParts, int16(k.ReplicationFactor), keyedCfg, log); err != nil {
		return top, err
	}
	ds, err := adm.ListTopics(ctx, k.KeyedTopic())
	if err != nil {
		return top, fmt.Errorf("cdcjoin: describe topic %s: %w", k.KeyedTopic(), err)
	}
	top.keyedID = ds[k.KeyedTopic()].ID.String()
	temporal := cfg.IsTimeJoin() && cfg.TimeJoin.Kind == config.KindTemporal
	if cfg.IsTimeJoin() {
		// Operator-state snapshots, one partition per keyed partition,
		// trimmed explicitly (tsnap.go).
		del, forever := "delete", "-1"
		n, err := ensureTopic(ctx, adm, k.SnapshotTopic(), top.keyedParts, int16(k.ReplicationFactor),
			map[string]*string{"cleanup.policy": &del, "retention.ms": &forever, "retention.bytes": &forever}, log)
		if err != nil {
			return top, err
		}
		if n < top.keyedParts {
			return top, fmt.Errorf("cdcjoin: topic %s has %d partitions but %s has %d: the snapshots need one per keyed partition (add partitions to it)",
				k.SnapshotTopic(), n, k.KeyedTopic(), top.keyedParts)
		}
	}
	if cfg.IsTimeJoin() && !temporal {
		return top, writtenLimits(ctx, cfg, adm, log, &top, []string{k.KeyedTopic(), k.SnapshotTopic()}) // no indexes
	}
	n, err := ensureTopic(ctx, adm, k.ChildIndexTopic(), top.childParts, int16(k.ReplicationFactor),
		map[string]*string{"cleanup.policy": &compact}, log)
	if err != nil {
		return top, err
	}
	if n < top.childParts {
		return top, fmt.Errorf("cdcjoin: topic %s has %d partitions but %s has %d: the child index needs one per child partition (add partitions to it)",
			k.ChildIndexTopic(), n, cfg.Child.Topic, top.childParts)
	}
	if temporal {
		// Only the right (CDC) side has an index (temporal.go).
		return top, writtenLimits(ctx, cfg, adm, log, &top, []string{k.KeyedTopic(), k.ChildIndexTopic(), k.SnapshotTopic()})
	}
	n, err = ensureTopic(ctx, adm, k.ParentIndexTopic(), top.parentParts, int16(k.ReplicationFactor),
		map[string]*string{"cleanup.policy": &compact}, log)
	if err != nil {
		return top, err
	}
	if n < top.parentParts {
		return top, fmt.Errorf("cdcjoin: topic %s has %d partitions but %s has %d: the parent index needs one per parent partition (add partitions to it)",
			k.ParentIndexTopic(), n, cfg.Parent.Topic, top.parentParts)
	}
	written := []string{k.KeyedTopic(), k.ChildIndexTopic(), k.ParentIndexTopic()}
	return top, writtenLimits(ctx, cfg, adm, log, &top, written)
}

// ensureTopic creates topic unless it exists and returns its partition
// count.
func ensureTopic(ctx context.Context, adm *kadm.Client, topic string, parts int32, rf int16, configs map[string]*string, log *slog.Logger) (int32, error) {
	ds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("cdcjoin: describe topic %s: %w", topic, err)
	}
	if d, ok := ds[topic]; ok && d.Err == nil {
		return int32(len(d.Partitions)), nil
	}
	resp, err := adm.CreateTopic(ctx, parts, rf, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return 0, fmt.Errorf("cdcjoin: create topic %s: %w", topic, err)
	}
	if err == nil {
		log.Info("created topic", "topic", topic, "partitions", parts)
	}
	// Wait for the topic (created here or by another instance) to show up
	// in metadata.
	for i := 0; ; i++ {
		ds, err = adm.ListTopics(ctx, topic)
		if err != nil {
			return 0, fmt.Errorf("cdcjoin: describe topic %s: %w", topic, err)
		}
		if d := ds[topic]; d.Err == nil && len(d.Partitions) > 0 && d.Partitions.NumReplicas() > 0 {
			return int32(len(d.Partitions)), nil
		} else if i == 50 {
			return 0, fmt.Errorf("cdcjoin: topic %s: %w", topic, d.Err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// readPartition calls fn for every committed record of topic/partition from
// its start up to its end as of the call (the last stable offset, re-read
// while the partition settles), and at least until that last stable offset
// has passed mark (-1: no mark). Used to restore state from a changelog.
//
// The mark is the changelog's end as of the transaction that committed the
// source offset being restored to (keyingMarks): a committed transaction
// whose markers are not written yet. Kafka writes the commit marker of the
// group's offsets (which makes them stable: KIP-447) and those of the
// transaction's other partitions independently (Kafka 4's group
// coordinator completes its own), so the offsets can be committed and
// fetched while the changelog's last stable offset still stands before the
// transaction's records: read to that last stable offset alone, a restore
// would miss them, and the index would be behind the offsets it is used
// from. A mark past the log's end (the topic recreated shorter) is
// ignored.
func readPartition(ctx context.Context, base []kgo.Opt, adm *kadm.Client, topic string, p int32, from, mark int64, fn func(*kgo.Record) error) error {
	end, err := partitionEnd(ctx, adm, topic, p)
	if err != nil {
		return err
	}
	if mark > end {
		hwm, err := partitionHighWatermark(ctx, adm, topic, p)
		if err != nil {
			return err
		}
		if mark > hwm {
			mark = -1 // not in this log
		}
	}
	sctx, cancel := context.WithTimeout(ctx, adminTimeout)
	starts, err := adm.ListStartOffsets(sctx, topic)
	cancel()
	if err != nil {
		return kafkaFault(fmt.Errorf("cdcjoin: restore %s/%d: %w", topic, p, err))
	}
	start, _ := starts.Lookup(topic, p)
	first := max(start.Offset, from)
	if end <= first && (end >= mark || first >= mark) {
		return nil
	}
	opts := append(append([]kgo.Opt(nil), base...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(first)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(200*time.Millisecond),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return kafkaFault(fmt.Errorf("cdcjoin: restore %s/%d: %w", topic, p, err))
	}
	defer cl.Close()
	next := first
	moved := time.Now()
	// Past the end, and past the mark unless the end is (the mark's
	// records and commit marker read, or the last stable offset past it).
	for next < end || end < mark && next < mark {
		if time.Since(moved) > restoreStall {
			return kafkaFault(fmt.Errorf("cdcjoin: restore %s/%d: no record for %v at offset %d of %d", topic, p, restoreStall, next, end))
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && ferr == nil {
				ferr = err
			}
		})
		if ferr != nil {
			return kafkaFault(fmt.Errorf("cdcjoin: restore %s/%d: %w", topic, p, ferr))
		}
		got := false
		var rerr error
		fs.EachRecord(func(r *kgo.Record) {
			got, moved = true, time.Now()
			if rerr != nil {
				return
			}
			next = r.Offset + 1
			if !r.Attrs.IsControl() {
				rerr = fn(r)
			}
		})
		if rerr != nil {
			return rerr
		}
		if !got {
			// Records of aborted transactions are filtered out, so the
			// last offsets below a stale end may never show up: re-read
			// the end once the partition went quiet.
			if end, err = partitionEnd(ctx, adm, topic, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// Bounds of a restore's Kafka calls: an admin request, and a partition
// read that gets no record although it has not reached the end. A stall
// is a restartable failure (a new client, fresh metadata), not a wait of
// minutes (franz-go refreshes stale metadata every MetadataMaxAge).
const (
	adminTimeout = 30 * time.Second
	restoreStall = time.Minute
)

// partitionEnd returns the last stable offset of topic/partition: the end
// of what a read_committed consumer can read (before the first record of an
// undecided transaction).
func partitionEnd(ctx context.Context, adm *kadm.Client, topic string, p int32) (int64, error) {
	return listPartitionOffset(ctx, adm.ListCommittedOffsets, topic, p)
}

// partitionHighWatermark returns the end of topic/partition: the offset
// after its last record, committed or not.
func partitionHighWatermark(ctx context.Context, adm *kadm.Client, topic string, p int32) (int64, error) {
	return listPartitionOffset(ctx, adm.ListEndOffsets, topic, p)
}

// listPartitionOffset returns what list (a kadm listing of topics'
// offsets) says of topic/partition, within adminTimeout.
func listPartitionOffset(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error), topic string, p int32) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	ends, err := list(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, kafkaFault(fmt.Errorf("cdcjoin: restore %s/%d: list offsets: %w", topic, p, err))
	}
	o, ok := ends.Lookup(topic, p)
	if !ok {
		return 0, fmt.Errorf("cdcjoin: restore %s/%d: partition not found", topic, p)
	}
	return o.Offset, nil
}

// fetchErr returns the first fetch error in fs other than a context's.
func fetchErr(fs kgo.Fetches) error {
	var first error
	fs.EachError(func(t string, p int32, err error) {
		if first == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			first = fmt.Errorf("fetch %s/%d: %w", t, p, err)
		}
	})
	return first
}

// persistentErrors is how long fetch errors may go on before a stage gives
// up: franz-go keeps retrying after reporting one (a leader move, a broker
// restart), so a single error is logged and counted, not fatal.
const persistentErrors = 2 * time.Minute

// check inspects a poll's fetch errors for stage: it counts and logs one,
// and returns a fatal error once errors have persisted for longer than
// persistentErrors; hadErr reports whether this poll had an error.
func (w *errWindow) check(fs kgo.Fetches, stage string, m *metrics.Metrics, log *slog.Logger) (hadErr bool, fatal error) {
	err := fetchErr(fs)
	if err == nil {
		w.observe(nil)
		return false, nil
	}
	m.Errors.WithLabelValues(stage, "kafka").Inc()
	if permanentKafka(err) && !errors.Is(err, kerr.UnknownTopicID) {
		// Retrying cannot fix it (a recreated topic is reported by the
		// topic id watch, with what to do).
		return true, fmt.Errorf("cdcjoin: %s: %w", stage, err)
	}
	log.Warn("fetch error (retrying)", "err", err)
	if err := w.observe(err); err != nil {
		return true, fmt.Errorf("cdcjoin: %s: errors for %v: %w", stage, persistentErrors, err)
	}
	return true, nil
}

// errWindow tracks how long errors have persisted without a clean poll.
type errWindow struct{ since time.Time }

// observe records the outcome of a poll; it returns err once errors have
// persisted for longer than persistentErrors.
func (w *errWindow) observe(err error) error {
	if err == nil {
		w.since = time.Time{}
		return nil
	}
	now := time.Now()
	if w.since.IsZero() {
		w.since = now
	}
	if now.Sub(w.since) > persistentErrors {
		return err
	}
	return nil
}

// writeEpochMarkers writes a version epoch marker proposing proposed to
// every keyed partition (see package version). Every start of an instance
// writes them with the current time: it raises the epoch of
// every partition, so the versions of everything keyed from now on exceed
// those of anything emitted before — by an earlier keyed topic of the same
// name, a `replay` backfill of the same table, or a partition layout that
// has changed. The markers are written, acknowledged by all in-sync
// replicas, before this instance keys anything.
func writeEpochMarkers(ctx context.Context, cfg *config.Config, pr *planRun, base []kgo.Opt, top topology, proposed uint64) error {
	cl, err := kgo.NewClient(producerOpts(&cfg.Kafka, base, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return fmt.Errorf("cdcjoin: kafka client: %w", err)
	}
	defer cl.Close()
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return fmt.Errorf("cdcjoin: epoch marker nonce: %w", err)
	}
	writer := cfg.Kafka.InstanceID + "/" + hex.EncodeToString(nonce[:])
	key := keyedlog.AppendEpochKey(nil, proposed, writer)
	for _, topic := range keyedTopics(cfg, pr) {
		recs := make([]*kgo.Record, top.keyedParts)
		for p := range recs {
			recs[p] = &kgo.Record{Topic: topic, Partition: int32(p), Key: key, Value: keyedlog.EpochValue()}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("cdcjoin: write version epoch markers to %s: %w", topic, err)
		}
	}
	return nil
}

// writtenLimits creates the dead-letter topic when the job has one and
// reads max.message.bytes of the topics the job writes into top.limits.
func writtenLimits(ctx context.Context, cfg *config.Config, adm *kadm.Client, log *slog.Logger, top *topology, written []string) error {
	if cfg.Errors.Policy == config.PolicyDLQ {
		if _, err := ensureTopic(ctx, adm, cfg.Errors.DLQTopic, 1, int16(cfg.Kafka.ReplicationFactor), nil, log); err != nil {
			return err
		}
		written = append(written, cfg.Errors.DLQTopic)
	}
	top.limits = messageLimits(ctx, adm, log, written...)
	return nil
}

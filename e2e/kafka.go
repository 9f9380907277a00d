package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	json "github.com/goccy/go-json"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Watcher follows the Debezium source topics and cdcjoin's keyed topics
// from their start (read_committed) on its own goroutine, which Close stops
// and waits for. It records what the e2e needs to know: snapshot end, the
// transaction ids seen per source topic, counts by op, and the offset of
// the last committed record of every keyed partition.
type Watcher struct {
	cl     *kgo.Client
	source map[string]bool
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	snapshots int                       // records with source.snapshot = "last" (one per connector)
	txids     map[string]map[int64]bool // source topic → txIds seen
	ops       map[string]int            // op → count ("tombstone" for null values)
	keyed     map[string]map[int32]int64
	lastRec   time.Time // when the last keyed record arrived
	err       error
	avro      *avroReader // nil: the source topics are JSON
}

// NewWatcher starts following sourceTopics (Debezium JSON, schemas on or
// off) and keyedTopics (offsets only). Topics that do not exist yet are
// picked up when they appear.
func NewWatcher(brokers []string, sourceTopics, keyedTopics []string) (*Watcher, error) {
	return NewWatcherRegistry(brokers, sourceTopics, keyedTopics, "")
}

// NewWatcherRegistry is NewWatcher for source topics in Avro (the
// Confluent wire format) whose schemas are in the registry at registryURL
// (its Confluent-compatible API); "" for JSON.
func NewWatcherRegistry(brokers []string, sourceTopics, keyedTopics []string, registryURL string) (*Watcher, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(append(append([]string(nil), sourceTopics...), keyedTopics...)...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.MetadataMinAge(250*time.Millisecond),
		kgo.MetadataMaxAge(time.Second),
	)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: e2e: kafka client: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watcher{cl: cl, source: map[string]bool{}, cancel: cancel, done: make(chan struct{}),
		txids: map[string]map[int64]bool{}, ops: map[string]int{}, keyed: map[string]map[int32]int64{}}
	if registryURL != "" {
		w.avro = newAvroReader(registryURL)
	}
	for _, t := range sourceTopics {
		w.source[t] = true
		w.txids[t] = map[int64]bool{}
	}
	for _, t := range keyedTopics {
		w.keyed[t] = map[int32]int64{}
	}
	go w.run(ctx)
	return w, nil
}

// Close stops the watcher and waits for its goroutine.
func (w *Watcher) Close() {
	w.cancel()
	<-w.done
	w.cl.Close()
}

// debeziumValue is what the watcher reads of a Debezium value, with or
// without the schema envelope.
type debeziumValue struct {
	Payload *debeziumPayload `json:"payload"`
	debeziumPayload
}

type debeziumPayload struct {
	Op     string `json:"op"`
	Source struct {
		Snapshot any    `json:"snapshot"` // "true"/"last"/… (string), bool in old versions
		TxID     *int64 `json:"txId"`
	} `json:"source"`
}

func (w *Watcher) run(ctx context.Context) {
	defer close(w.done)
	for {
		fs := w.cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			if errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, context.Canceled) {
				return
			}
			w.mu.Lock()
			if w.err == nil {
				w.err = fmt.Errorf("cdcjoin: e2e: watch %s/%d: %w", t, p, err)
			}
			w.mu.Unlock()
		})
		w.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			if !w.source[r.Topic] {
				w.keyed[r.Topic][r.Partition] = r.Offset
				w.lastRec = time.Now()
				return
			}
			if r.Value == nil {
				w.ops["tombstone"]++
				return
			}
			var v debeziumValue
			if w.avro != nil {
				var err error
				if v.debeziumPayload, err = w.avro.payload(ctx, r.Value); err != nil {
					w.ops["undecodable"]++
					return
				}
			} else if err := json.Unmarshal(r.Value, &v); err != nil {
				w.ops["undecodable"]++
				return
			}
			p := &v.debeziumPayload
			if v.Payload != nil {
				p = v.Payload
			}
			w.ops[p.Op]++
			if s, ok := p.Source.Snapshot.(string); ok && s == "last" {
				w.snapshots++
			}
			if p.Source.TxID != nil {
				w.txids[r.Topic][*p.Source.TxID] = true
			}
		})
		w.mu.Unlock()
	}
}

// Err returns the first fetch error, if any.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// SnapshotsDone reports whether the last snapshot record of n connectors
// was seen.
func (w *Watcher) SnapshotsDone(n int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.snapshots >= n
}

// SawTx reports whether each of topics (source topics) has a record of
// transaction txid.
func (w *Watcher) SawTx(txid int64, topics ...string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range topics {
		if !w.txids[t][txid] {
			return false
		}
	}
	return true
}

// Ops returns the Debezium record counts by op (c, u, d, r, t, tombstone).
func (w *Watcher) Ops() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.ops))
	for k, v := range w.ops {
		out[k] = v
	}
	return out
}

// KeyedTail returns, per partition of the keyed topic, the offset after its
// last committed record seen so far, and how long ago any keyed record
// arrived.
func (w *Watcher) KeyedTail(topic string) (map[int32]int64, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[int32]int64{}
	for p, o := range w.keyed[topic] {
		out[p] = o + 1
	}
	return out, time.Since(w.lastRec)
}

// Admin wraps the Kafka admin calls of the e2e.
type Admin struct {
	cl  *kgo.Client
	adm *kadm.Client
}

// NewAdmin connects an admin client.
func NewAdmin(brokers []string) (*Admin, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: e2e: kafka client: %w", err)
	}
	return &Admin{cl: cl, adm: kadm.NewClient(cl)}, nil
}

// Close closes the client.
func (a *Admin) Close() { a.cl.Close() }

// DeleteTopics deletes the topics that exist among topics, and waits
// until the broker no longer lists them.
func (a *Admin) DeleteTopics(ctx context.Context, topics ...string) error {
	md, err := a.adm.ListTopics(ctx, topics...)
	if err != nil {
		return fmt.Errorf("cdcjoin: e2e: list topics: %w", err)
	}
	have := existing(md)
	if len(have) == 0 {
		return nil
	}
	rs, err := a.adm.DeleteTopics(ctx, have...)
	if err != nil {
		return fmt.Errorf("cdcjoin: e2e: delete topics: %w", err)
	}
	if err := rs.Error(); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("cdcjoin: e2e: delete topics: %w", err)
	}
	for {
		md, err := a.adm.ListTopics(ctx, have...)
		if err == nil && len(existing(md)) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cdcjoin: e2e: topics %v not deleted: %w", have, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// existing returns the names of the topics in md that exist (a topic
// asked for by name is listed with an error when it does not).
func existing(md kadm.TopicDetails) []string {
	var out []string
	for _, t := range md.Sorted() {
		if t.Err == nil {
			out = append(out, t.Topic)
		}
	}
	return out
}

// DeleteGroups deletes consumer groups (missing ones are fine).
func (a *Admin) DeleteGroups(ctx context.Context, groups ...string) error {
	rs, err := a.adm.DeleteGroups(ctx, groups...)
	if err != nil {
		return fmt.Errorf("cdcjoin: e2e: delete groups: %w", err)
	}
	for g, r := range rs {
		if r.Err != nil && !errors.Is(r.Err, kerr.GroupIDNotFound) {
			return fmt.Errorf("cdcjoin: e2e: delete group %s: %w", g, r.Err)
		}
	}
	return nil
}

// GroupLag is the lag of one consumer group on some topics.
type GroupLag struct {
	// Records is Σ max(end − committed, 0) over the topics' partitions, end
	// being the last stable offset (which, on a transactional topic,
	// includes trailing commit markers: read it as an upper bound there).
	Records int64
	// Committed is the group's committed offset per topic and partition
	// (absent: nothing committed).
	Committed map[string]map[int32]int64
}

// Lag returns group's lag on topics.
func (a *Admin) Lag(ctx context.Context, group string, topics ...string) (GroupLag, error) {
	ends, err := a.adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return GroupLag{}, fmt.Errorf("cdcjoin: e2e: end offsets: %w", err)
	}
	offs, err := a.adm.FetchOffsets(ctx, group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return GroupLag{}, fmt.Errorf("cdcjoin: e2e: committed offsets of %s: %w", group, err)
	}
	gl := GroupLag{Committed: map[string]map[int32]int64{}}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		c := int64(-1)
		if r, ok := offs.Lookup(o.Topic, o.Partition); ok && r.Err == nil {
			c = r.At
			if gl.Committed[o.Topic] == nil {
				gl.Committed[o.Topic] = map[int32]int64{}
			}
			gl.Committed[o.Topic][o.Partition] = c
		}
		start := c
		if start < 0 {
			start = 0
		}
		if o.Offset > start {
			gl.Records += o.Offset - start
		}
	})
	return gl, nil
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/deadletter"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
	"github.com/cdcjoin/cdcjoin/timejoin"
)

// TimeEngine runs a time join (package timejoin: interval, window and
// temporal joins of event streams) in one process on one pebble state:
// decode → Join.Apply → sink, committing the operator's state (rows,
// timers, watermarks, the output sequence) and the input positions in one
// pebble batch every state.batch_events records. It is `cdcjoin replay`
// for time joins.
//
// The watermark moves with every record and idleness is event time
// (package timejoin), so what a TimeEngine emits is a function of the
// input's order alone: a crash loses at most the uncommitted batch, and
// reprocessing it from the committed positions emits the same rows with
// the same sequence numbers (row.Insert's Version), which the insert-only
// sinks use to insert each row once. Late records are bad records
// (deadletter kind "late"). The engine never advances the watermark at
// the end of the input on its own: EndOfInput does (replay
// --end-of-input).
type TimeEngine struct {
	cfg     *config.Config
	ts      *job.TimeSpec
	opts    Options
	store   *joinstate.Store
	txn     *joinstate.Txn
	join    *timejoin.Join
	buf     *sink.Buffer
	policy  deadletter.Policy
	dec     *job.TimeDecoder
	scratch TimeDecoded
	resume  map[topicPart]int64
	next    map[topicPart]int64
	pending int
	stream  string
	stats   TimeStats
	// committedW is the watermark at the last commit (read by other
	// goroutines: progress lines).
	committedW atomic.Int64
	// afterCommit, if set, runs after each commit (SetAfterCommit).
	afterCommit func()
	// The column types the applied inserts showed (observeTypes), until
	// every output column's is known (typesKnown); tev is scratch.
	types      job.Types
	typesSeen  int
	typesKnown bool
	tev        debezium.Event
}

// TimeStats is a snapshot of what a TimeEngine has done.
type TimeStats struct {
	Records    uint64 // records read (including skipped)
	Skipped    uint64 // at or before committed positions (resume)
	Tombstones uint64
	Events     uint64 // records applied to the join (late ones included)
	Bad        uint64 // bad records dead-lettered (late ones included)
	Late       uint64 // late records
	Duplicates uint64 // redelivered rows ignored
	Emitted    uint64 // rows emitted
	Commits    uint64
	// LateByTopic counts late records per input topic.
	LateByTopic map[string]uint64
	Join        timejoin.Stats
}

// OpenTime opens the state in cfg.State.Dir for cfg's time join.
func OpenTime(cfg *config.Config, opts Options) (*TimeEngine, error) {
	if !cfg.IsTimeJoin() {
		return nil, errors.New("cdcjoin: the configuration has no time_join section")
	}
	policy, err := openChecks(cfg, &opts)
	if err != nil {
		return nil, err
	}
	ts, err := job.TimeJoin(cfg)
	if err != nil {
		return nil, err
	}
	so := job.StateOptions(cfg, cfg.State.Dir)
	so.FS = opts.FS
	store, err := joinstate.Open(so)
	if err != nil {
		return nil, err
	}
	e := &TimeEngine{
		cfg: cfg, ts: ts, opts: opts, store: store, policy: policy,
		join: timejoin.New(ts.Spec, timejoin.Options{}), dec: job.NewTimeDecoder(cfg, ts),
		buf:    sink.NewBuffer(opts.Sink, 0),
		resume: map[topicPart]int64{}, next: map[topicPart]int64{},
		stats: TimeStats{LateByTopic: map[string]uint64{}},
	}
	if err := e.load(); err != nil {
		store.Close()
		return nil, err
	}
	e.txn = store.Begin()
	if err := e.join.Load(e.txn.Space()); err != nil {
		e.txn.Abort()
		store.Close()
		return nil, err
	}
	e.committedW.Store(e.join.Watermark())
	return e, nil
}

func (e *TimeEngine) load() error {
	fp, ok, err := driver.MetaFingerprint.Get(e.store)
	if err != nil {
		return err
	}
	if ok && string(fp) != string(e.ts.Fingerprint()) {
		return fmt.Errorf("cdcjoin: state in %s was built for another join (%s); remove it to rebuild", e.cfg.State.Dir, fp)
	}
	if e.stream, _, err = driver.MetaStream.Get(e.store); err != nil {
		return err
	}
	if e.stream == "" {
		// A new state starts a new output stream: its sequence numbers
		// start over, so the sinks must not take them for a replay of an
		// older state's rows.
		var err error
		if e.stream, err = newStream(e.store); err != nil {
			return err
		}
	}
	return e.store.Positions(func(topic string, part int32, next int64) error {
		e.resume[topicPart{topic, part}] = next
		return nil
	})
}

// Stream returns the name of the state's output stream (stable for the
// life of the state): the insert-only sinks deduplicate by (stream, seq).
func (e *TimeEngine) Stream() string { return e.stream }

// CommittedWatermark returns the join's watermark at the last commit.
// Safe for concurrent use.
func (e *TimeEngine) CommittedWatermark() int64 { return e.committedW.Load() }

// Spec returns the compiled time join.
func (e *TimeEngine) Spec() *job.TimeSpec { return e.ts }

// Join returns the operator (watermarks, stats; read-only use).
func (e *TimeEngine) Join() *timejoin.Join { return e.join }

// Store exposes the state (read-only use: metrics, tools, tests).
func (e *TimeEngine) Store() *joinstate.Store { return e.store }

// Stats returns a snapshot of the counters.
func (e *TimeEngine) Stats() TimeStats {
	s := e.stats
	s.LateByTopic = make(map[string]uint64, len(e.stats.LateByTopic))
	for k, v := range e.stats.LateByTopic {
		s.LateByTopic[k] = v
	}
	s.Join = e.join.Stats
	return s
}

// TimeDecoded is a record decoded ahead of Apply (possibly on another
// goroutine than the one applying it). It owns copies of the record's key
// and value (a late record is dead-lettered as it came), so it can be
// reused once applied.
type TimeDecoded struct {
	Record Record
	rec    timejoin.Record
	ok     bool             // false: a tombstone
	Err    error            // a bad-record error naming the record's position
	types  []row.ColumnType // its schema's column types (shared, read-only; nil without a schema)
	key    []byte
	value  []byte
}

// NewTimeDecoder returns a decoder for e's topics, for use on another
// goroutine (see DecodeTime).
func (e *TimeEngine) NewTimeDecoder() *job.TimeDecoder { return job.NewTimeDecoder(e.cfg, e.ts) }

// DecodeTime decodes r into out with d. It never fails: a bad record is
// reported in out.Err and handled by Apply according to the error policy.
func DecodeTime(d *job.TimeDecoder, r *Record, out *TimeDecoded) {
	out.key = append(out.key[:0], r.Key...)
	out.value = append(out.value[:0], r.Value...)
	if r.Value == nil {
		out.value = nil
	}
	out.Record = Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: out.key, Value: out.value}
	out.ok, out.Err = d.Decode(r.Topic, r.Partition, r.Offset, r.Key, r.Value, &out.rec)
	out.types = nil
	if out.ok && out.Err == nil {
		out.types = d.Event().Types
	}
}

// Apply applies one decoded record (in each partition's offset order),
// committing a batch every state.batch_events records. Bad records (not
// decodable, not append-only, late, …) stop processing with an error
// naming topic/partition/offset under policy stop, or go to
// Options.DeadLetters under dlq. Other errors (state, sink) are returned
// wrapped; after one, the engine must be closed without Commit.
func (e *TimeEngine) Apply(ctx context.Context, d *TimeDecoded) error {
	r := &d.Record
	e.stats.Records++
	tp := topicPart{r.Topic, r.Partition}
	if next, ok := e.resume[tp]; ok && r.Offset < next {
		e.stats.Skipped++
		return nil
	}
	var letter *deadletter.Letter
	switch {
	case d.Err != nil:
		kind := "decode"
		var br *job.BadRecord
		if errors.As(d.Err, &br) {
			kind = br.Kind
		}
		letter = &deadletter.Letter{Kind: kind, Err: d.Err}
	case !d.ok:
		e.stats.Tombstones++
	default:
		e.stats.Events++
		if !e.typesKnown && d.rec.Op == timejoin.Insert {
			e.observeTypes(d)
		}
		res, err := e.join.Apply(e.txn.Space(), &d.rec, e.buf.Emitter(ctx))
		if err != nil {
			return fmt.Errorf("cdcjoin: record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		switch res.Verdict {
		case timejoin.Late:
			e.stats.Late++
			e.stats.LateByTopic[string([]byte(r.Topic))]++
			letter = &deadletter.Letter{Kind: deadletter.ReasonLate,
				Late: &deadletter.Late{Time: d.rec.Time, Watermark: res.Watermark},
				Err: fmt.Errorf("cdcjoin: late record at %s/%d@%d: its time %s is below the watermark %s - allowed_lateness %v",
					r.Topic, r.Partition, r.Offset, deadletter.FormatTime(d.rec.Time), deadletter.FormatTime(res.Watermark), e.cfg.TimeJoin.AllowedLateness)}
		case timejoin.Duplicate:
			e.stats.Duplicates++
		}
	}
	if letter != nil {
		letter.Topic, letter.Partition, letter.Offset = r.Topic, r.Partition, r.Offset
		letter.Key, letter.Value, letter.Stage = r.Key, r.Value, "replay"
		if err := e.policy.Handle(ctx, letter); err != nil {
			return err
		}
		e.stats.Bad++
	}
	if _, ok := e.next[tp]; !ok {
		tp.topic = string([]byte(r.Topic)) // the key outlives the record
	}
	e.next[tp] = r.Offset + 1
	e.pending++
	if e.pending >= e.cfg.State.BatchEvents {
		return e.Commit(ctx)
	}
	return nil
}

// Process decodes and applies one record.
func (e *TimeEngine) Process(ctx context.Context, r *Record) error {
	DecodeTime(e.dec, r, &e.scratch)
	return e.Apply(ctx, &e.scratch)
}

// EndOfInput moves the watermark to +∞ (replay --end-of-input): every
// outer row, temporal row and window still waiting is emitted, and the
// state keeps only each temporal right row's latest version. Records
// after it are late. Call Commit afterwards.
func (e *TimeEngine) EndOfInput(ctx context.Context) error {
	e.pending++ // something to commit
	return e.join.EndOfInput(e.txn.Space(), e.buf.Emitter(ctx))
}

// Commit flushes every emitted row to the sink and then commits the
// state, the watermarks and the input positions atomically.
func (e *TimeEngine) Commit(ctx context.Context) error {
	if e.pending == 0 && e.txn.Empty() {
		return nil
	}
	if _, err := e.buf.Flush(ctx); err != nil {
		return fmt.Errorf("cdcjoin: flush changes: %w", err)
	}
	for tp, next := range e.next {
		if err := e.txn.SetPosition(tp.topic, tp.part, next); err != nil {
			return err
		}
	}
	if err := e.join.Save(e.txn.Space()); err != nil {
		return err
	}
	if err := driver.MetaFingerprint.Put(e.txn, e.ts.Fingerprint()); err != nil {
		return err
	}
	if err := driver.MetaStream.Put(e.txn, e.stream); err != nil {
		return err
	}
	if err := e.txn.Commit(); err != nil {
		return err
	}
	e.stats.Commits++
	e.stats.Emitted = e.join.Seq()
	e.committedW.Store(e.join.Watermark())
	e.pending = 0
	e.txn = e.store.Begin()
	if e.afterCommit != nil {
		e.afterCommit()
	}
	return nil
}

// SetAfterCommit makes fn run after each commit, on the goroutine
// applying records (the bench samples the state there).
func (e *TimeEngine) SetAfterCommit(fn func()) { e.afterCommit = fn }

// StateScan calls fn for every entry of the join's state as the open
// transaction sees it (right after a commit: the committed state).
func (e *TimeEngine) StateScan(fn func(key, value []byte)) error {
	return e.txn.Space().Scan(nil, nil, func(k, v []byte) error {
		fn(k, v)
		return nil
	})
}

// Close discards uncommitted work (call Commit first to keep it) and
// closes the state.
func (e *TimeEngine) Close() error {
	if e.txn != nil {
		e.txn.Abort()
		e.txn = nil
	}
	e.buf.Discard()
	return e.store.Close()
}

// Run applies every record src yields, decoding on one goroutine and
// joining and committing on the calling one (the bounded hand-off of
// Engine.Run). It does not commit the final partial batch: call Commit
// (after EndOfInput, for a bounded backfill).
func (e *TimeEngine) Run(ctx context.Context, src func(yield func(*Record) error) error) error {
	return pipeline(ctx, src, stages[TimeDecoded, struct{}]{
		worker: func() worker[TimeDecoded, struct{}] {
			dec := e.NewTimeDecoder()
			return worker[TimeDecoded, struct{}]{decode: func(r *Record, d *TimeDecoded) { DecodeTime(dec, r, d) }}
		},
		apply: e.Apply,
	})
}

// OutputTypes returns the select list's column types: declared in the
// configuration, else those of the inserts applied so far (their schema's,
// else their non-NULL values', as job.Types), zero entries where unknown;
// window start and end are timestamps. Call it on Apply's goroutine (a
// sink does, at a commit).
func (e *TimeEngine) OutputTypes() []row.ColumnType {
	out := e.cfg.DeclaredOutputTypes()
	if !row.AllKnown(out) {
		for i, ct := range e.types.TimeOutput(e.ts) {
			if !out[i].Known() {
				out[i] = ct
			}
		}
	}
	return out
}

// observeTypes records the column types of the insert d (OutputTypes),
// checking now and then whether every output column's is known: then the
// engine stops observing.
func (e *TimeEngine) observeTypes(d *TimeDecoded) {
	side := row.Parent
	if d.rec.Side == timejoin.SideRight {
		side = row.Child
	}
	e.tev = debezium.Event{Types: d.types, After: debezium.Row{Present: true, Values: d.rec.Row}}
	e.types.Observe(side, &e.tev)
	if e.typesSeen++; e.typesSeen%64 == 1 {
		e.typesKnown = row.AllKnown(e.OutputTypes())
	}
}

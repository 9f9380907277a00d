// Package engine runs the whole join in one process on one pebble state:
// decode → key → join, committing state, the version clock and input
// positions in one pebble batch per batch of records. It is the
// offline/backfill path behind `cdcjoin replay` and the bench, and the
// reference against which the Kafka driver (kafkarun) is checked. Both
// drive their operator through package driver: the operator contract (its
// operator is skew.Fair, keyed inputs handed over in process), the commit
// order (driver.Commit), the sink side (driver.Output), the state's
// metadata and the bad-record step.
//
// Versions: the i-th keyed input ever applied to the state has position i;
// its version is the state's clock at i (version.Start at the wall-clock
// second the state was created, so a later `run` into the same table gives
// higher versions). A crash loses at most the uncommitted batch;
// reprocessing it from the committed positions reproduces the same changes
// with the same versions.
//
// Fair fan-out (skew.chunk_rows): a parent's fan-out emits at most
// chunk_rows rows at once; the rest is done in chunks between later
// records, taking about as much time as the records do (driver.Pacer), and
// the key's later inputs wait for it (in the state, with the versions they
// were given), so a rename of a parent with millions of children does not
// stall every other key. Checkpoint commits such work in
// progress; Commit finishes it first (in steps of drainRows rows, each a
// batch of its own). With a sink.Positioned (exact.go: changelog mode) a
// batch re-created after a crash must emit the same changes in the same
// order, which steps shared by time would not: there the budgets are
// counted in input records instead, each record applied (not skipped, not
// a tombstone, not a bad record) buying chunk_rows rows of the fan-outs in
// progress, so the same input cuts the same chunks. A bulk
// snapshot load (bulk.go) emits its rows by a merge, without fan-outs; fair
// fan-out starts with the first streaming record. Salting (spreading a hot
// parent over several partitions) is the Kafka runtime's: the engine has
// one state and one goroutine, so there is nothing to spread over.
//
// Parallelism: Run decodes on state.parallelism goroutines ahead of the
// applying one (pipeline.go); keying, joining and committing stay on the
// caller's goroutine, in input order, so the output, versions and state do
// not depend on the parallelism.
package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/bulkload"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/deadletter"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/internal/cerr"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/memstate"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
	"github.com/cdcjoin/cdcjoin/skew"
	"github.com/cdcjoin/cdcjoin/stage"
	"github.com/cdcjoin/cdcjoin/version"
)

// Record is one Kafka record of a Debezium topic. Value nil is a tombstone.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	// Headers are the Kafka record's headers (Apicurio's serializers may
	// carry schema ids there); nil for most records.
	Headers []debezium.Header
}

// Options configure an Engine.
type Options struct {
	// Resume continues from the state's committed positions: records at or
	// before a partition's committed offset are skipped. Without Resume the
	// state directory must be empty.
	Resume bool
	// Sink receives every change, in chunks; it is flushed before each
	// state commit (a Flush error aborts the commit). Nil discards
	// changes. The engine does not close it.
	Sink sink.Sink
	// DeadLetters receives bad records under errors.policy dlq (required
	// then; after it returns nil the record counts as handled).
	DeadLetters deadletter.Writer
	// FS overrides the state's filesystem (tests).
	FS vfs.FS
	// Now is the wall clock, read once when a new state picks its version
	// epoch (default time.Now).
	Now func() time.Time
	// WarmAlways makes Warmers read ahead whatever the state's size (tests;
	// by default only while it pays: joinstate.Store.WarmingPays).
	WarmAlways bool
	// Schemas resolves the schema ids of Avro and Protobuf records
	// (job.OpenSchemas); nil for a JSON job.
	Schemas debezium.SchemaSource
}

// Stats is a snapshot of what an Engine has done.
type Stats struct {
	Records    uint64 // records read (including skipped)
	Skipped    uint64 // records at or before committed positions (resume)
	Tombstones uint64
	Events     uint64 // decoded change events
	Bad        uint64 // records dead-lettered
	Commits    uint64
	Join       keyed.Stats
	Bulk       bulkload.Result // the snapshot's bulk load, once it ended
	// FanOutsChunked counts fan-outs larger than skew.chunk_rows (done in
	// chunks between later records); InputsWaited the inputs that waited
	// behind one. Both since Open.
	FanOutsChunked, InputsWaited uint64
	// BatchesDelivered counts batches a Positioned sink held already when
	// this run began (a crash came between their delivery and their
	// commit): applied again without emitting (exact.go).
	BatchesDelivered uint64
}

// Engine is the single-process join. Not safe for concurrent use.
type Engine struct {
	cfg     *config.Config
	spec    *keyed.Spec
	opts    Options
	store   *joinstate.Store
	keyer   *keyed.Keyer
	join    *keyed.Join
	fair    *skew.Fair // the operator
	pacer   driver.Pacer
	dec     *job.Decoder // for Process
	scratch Decoded
	msg     keyedlog.Msg // the input being stepped
	txn     *joinstate.Txn
	out     *driver.Output
	emit    batchOut // the Out of the batch in progress
	policy  deadletter.Policy
	clock   version.Clock
	inputs  int64 // keyed inputs applied: the next input's position
	pending int
	stats   Stats
	resume  map[topicPart]int64
	next    map[topicPart]int64 // positions reached so far, written at each Commit
	types   job.Types
	// keyTypes is what the decoders learned about key column types
	// (job.Decoder.KeyTypes), committed with the state when it changed, and
	// given to every decoder made later.
	keyTypes      []byte
	keyTypesDirty bool
	// sharedKeyTypes is keyTypes for the decoding goroutines (Run with
	// state.parallelism > 1: aheadDecoder), published by the applying one.
	sharedKeyTypes atomic.Pointer[[]byte]
	// naiveDecode makes decoding goroutines keep what they learn and never
	// leave a record to the applying one (tests: the negative control).
	naiveDecode bool

	// syncEach makes every commit durable, behind it (sync.go); syncDone
	// is the fsync in flight, if any.
	syncEach bool
	syncDone chan error

	// warm says whether reading ahead (Warmer) pays: the state does not
	// fit in the row cache. Set by the engine's goroutine at each commit.
	warm atomic.Bool

	// Bulk load of a new state's snapshot (bulk.go); bulk is nil when not
	// loading.
	bulk  *bulkload.Loader
	pbulk *memstate.State // a plan's (planbulk.go)
	// pbulkLimit overrides state.bulk_load_mb (bytes, tests); pbulkDrop
	// leaves rows out of the load (tests: the negative control).
	pbulkLimit   int
	pbulkDrop    []byte
	pbulkDropped uint64
	bulkDir      string
	bulkKey      []byte
	endAfter     bool // the record just loaded ends the snapshot

	// A plan's join (plan.go): pipe is nil for a parent/child job.
	pipe   *stage.Pipeline
	planV1 bool // the plan's index entries do not record source partitions (an older state)
	kv     *planKV
	ptypes job.PlanTypes

	// Exactly-once output to a sink.Positioned (exact.go).
	batches int64  // batches committed (driver.MetaBatches)
	stream  string // the state's stream name (driver.MetaStream)
}

// batchOut is the operator's Out for the batch in progress, made once per
// batch (and context).
type batchOut struct {
	ctx   context.Context
	batch int64
	out   keyedlog.Out
	ok    bool
}

var (
	_ keyed.State = (*joinstate.Txn)(nil)
	_ keyed.Index = (*joinstate.Txn)(nil)
)

type topicPart struct {
	topic string
	part  int32
}

// Open opens the state in cfg.State.Dir and prepares the engine.
func Open(cfg *config.Config, opts Options) (*Engine, error) {
	policy, err := openChecks(cfg, &opts)
	if err != nil {
		return nil, err
	}
	var spec *keyed.Spec
	if cfg.Plan() == nil {
		if spec, err = job.Spec(cfg); err != nil {
			return nil, err
		}
	}
	so := job.StateOptions(cfg, cfg.State.Dir)
	if cfg.State.CacheMB == 0 {
		so.CacheBytes = AutoCacheBytes() // one store: the cache is the process's (state.cache_mb)
	}
	so.FS = opts.FS
	so.Sync = false // state.sync: the engine syncs behind its commits (sync.go)
	store, err := joinstate.Open(so)
	if err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	e := &Engine{
		cfg: cfg, spec: spec, opts: opts, store: store, policy: policy, syncEach: cfg.State.Sync,
		pacer: driver.Pacer{Now: time.Now},
		dec:   job.NewDecoder(cfg, spec, opts.Schemas), out: driver.NewOutput(opts.Sink, 0),
		resume: map[topicPart]int64{}, next: map[topicPart]int64{},
	}
	if spec != nil {
		e.keyer, e.join = keyed.NewKeyer(spec), keyed.NewJoin(spec)
		// Parent records keep their source partition, and child index
		// entries theirs: kafkarun.Handover can then give this state to
		// `run`.
		e.keyer.PartitionInputs = true
	} else {
		e.pipe = stage.NewPipeline(cfg.Plan())
	}
	if err := e.load(); err != nil {
		store.Close()
		return nil, err
	}
	if err := e.loadExact(); err != nil {
		store.Close()
		return nil, err
	}
	if err := e.dec.RestoreKeyTypes(e.keyTypes); err != nil {
		store.Close()
		return nil, cerr.Wrap(err, "state in %s", cfg.State.Dir)
	}
	e.publishKeyTypes()
	if cfg.State.BulkLoadMB > 0 && len(e.resume) == 0 && e.inputs == 0 {
		start := e.startBulk
		if e.pipe != nil {
			start = e.startPlanBulk
		}
		if err := start(); err != nil {
			store.Close()
			return nil, err
		}
	}
	e.warm.Store(opts.WarmAlways || store.WarmingPays())
	e.txn = store.Begin()
	e.kv = &planKV{e: e}
	e.fair = skew.NewFair(e.join, cfg.Skew.ChunkRows)
	if err := e.fair.Load(e.txn); err != nil {
		e.txn.Abort()
		store.Close()
		return nil, err
	}
	return e, nil
}

// openChecks returns the bad-record policy of cfg with opts, and refuses
// a state directory that is not empty without Resume.
func openChecks(cfg *config.Config, opts *Options) (deadletter.Policy, error) {
	var policy deadletter.Policy
	if cfg.Errors.Policy == config.PolicyDLQ {
		if opts.DeadLetters == nil {
			return policy, errors.New("cdcjoin: errors.policy is dlq but no dead-letter destination is set")
		}
		policy.Writer = opts.DeadLetters
	}
	if !opts.Resume && opts.FS == nil {
		if entries, err := os.ReadDir(cfg.State.Dir); err == nil && len(entries) > 0 {
			return policy, fmt.Errorf("cdcjoin: state directory %s is not empty: pass --resume to continue from it, or remove it to start over", cfg.State.Dir)
		}
	}
	return policy, nil
}

// fingerprint identifies the state's shape: a state built for another
// projection, join kind or query must not be resumed.
func (e *Engine) fingerprint() []byte {
	if e.pipe != nil {
		return e.planFingerprint()
	}
	return driver.Fingerprint(e.spec)
}

func (e *Engine) load() error {
	if e.pipe != nil {
		// A new state's index entries record their source partitions
		// (kafkarun.Handover can then give it to `run`); an older state's
		// do not, and stay so.
		parts, err := driver.PlanPartitions(e.store, e.cfg, e.cfg.State.Dir)
		if err != nil {
			return err
		}
		e.planV1 = !parts
		if parts {
			e.pipe.RecordPartitions()
		}
	}
	if err := driver.CheckFingerprintBytes(e.store, e.fingerprint(), e.cfg.State.Dir); err != nil {
		return err
	}
	// The version clock and input count; a new state starts a clock at
	// the current wall-clock millisecond (a state of an earlier cdcjoin
	// keeps its legacy versions).
	c, n, ok, err := driver.ReadEngineClock(e.store)
	if err != nil {
		return cerr.Wrap(err, "state in %s", e.cfg.State.Dir)
	}
	if !ok {
		c = version.Start(version.Propose(e.opts.Now()), 0)
	}
	e.clock, e.inputs = c, n
	if e.keyTypes, _, err = driver.MetaKeyTypes.Get(e.store); err != nil {
		return err
	}
	return e.store.Positions(func(topic string, part int32, next int64) error {
		e.resume[topicPart{topic, part}] = next
		return nil
	})
}

// SetChunkRows changes skew.chunk_rows from the next record on (-1: every
// fan-out at once); fan-outs in progress continue in chunks. The bench
// compares both on one state. With a Positioned sink, a resumed run must
// use the chunk_rows of the run it continues (as it must the same
// batch_events).
func (e *Engine) SetChunkRows(n int) { e.fair.Chunk = n }

// OutputTypes returns the select list's column types, in select order, as
// declared by the most recent records with a schema (zero entries where no
// such record was seen yet). Sinks that create tables use it.
func (e *Engine) OutputTypes() []row.ColumnType {
	if e.pipe != nil {
		return e.ptypes.Output(e.pipe.Plan())
	}
	return e.types.Output(e.spec)
}

// Clock returns the version clock (the next input's version is
// Clock().At(Inputs())).
func (e *Engine) Clock() version.Clock { return e.clock }

// KeyTypes returns what the decoders learned about key column types
// (job.Decoder.KeyTypes; nil when nothing was learned).
func (e *Engine) KeyTypes() []byte { return e.keyTypes }

// Inputs returns the number of keyed inputs applied so far.
func (e *Engine) Inputs() int64 { return e.inputs }

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	s := e.stats
	if e.join != nil {
		s.Join = e.join.Stats
	} else {
		s.Join = e.planStats()
	}
	s.FanOutsChunked, s.InputsWaited = e.fair.Chunked(), e.fair.Waited()
	return s
}

// Store exposes the state (read-only use: metrics, tools, tests).
func (e *Engine) Store() *joinstate.Store { return e.store }

// Spec returns the compiled join.
func (e *Engine) Spec() *keyed.Spec { return e.spec }

// Decoded is a record decoded ahead of Apply (possibly on another goroutine
// than the one applying it). Its event's slices belong to it, so a Decoded
// can be reused for another record once applied.
type Decoded struct {
	Record   Record // Key/Value are kept only when Err is set (for dead-lettering)
	side     row.Side
	ok       bool  // false: a tombstone
	Err      error // a bad-record error naming the record's position
	ev       debezium.Event
	keyTypes []byte // the decoder's KeyTypes when this record taught it one
	// raw: not decoded yet (Record holds its bytes); Apply decodes it with
	// the engine's own decoder, in input order (see aheadDecoder).
	raw bool
	// A plan's record: the FROM items its topic feeds, an event each.
	items []int
	evs   []debezium.Event
}

// NewDecoder returns a decoder for e's topics, for use on another
// goroutine (see Decode), knowing the key column types learned so far.
func (e *Engine) NewDecoder() *job.Decoder {
	d := job.NewDecoder(e.cfg, e.spec, e.opts.Schemas)
	d.RestoreKeyTypes(e.keyTypes) // the engine's own encoding: cannot fail
	return d
}

// Decode decodes r into out with d. It never fails: a bad record is
// reported in out.Err and handled by Apply according to the error policy.
func Decode(d *job.Decoder, r *Record, out *Decoded) {
	out.Record = Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	learned := d.KeyTypesLearned()
	if pd := d.Plan(); pd != nil {
		decodePlan(pd, r, out)
	} else {
		out.side, out.ok, out.Err = d.DecodeHeaders(r.Topic, r.Partition, r.Offset, r.Key, r.Value, r.Headers, &out.ev)
	}
	out.keyTypes = nil
	if d.KeyTypesLearned() != learned {
		out.keyTypes = d.KeyTypes()
	}
	if out.Err != nil {
		out.Record.Key = append([]byte(nil), r.Key...)
		out.Record.Value = append([]byte(nil), r.Value...)
		for _, h := range r.Headers {
			out.Record.Headers = append(out.Record.Headers, debezium.Header{Key: h.Key, Value: append([]byte(nil), h.Value...)})
		}
	}
}

// Process decodes and applies one record; see Apply.
func (e *Engine) Process(ctx context.Context, r *Record) error {
	Decode(e.dec, r, &e.scratch)
	return e.Apply(ctx, &e.scratch)
}

// Apply applies one decoded record. Records must come in each partition's
// offset order. It commits a batch every state.batch_events records. Bad
// records (undecodable, unkeyable, unknown topic) stop processing with an
// error naming topic/partition/offset under policy stop; under policy dlq
// they go to Options.DeadLetters. Other errors (state, sink) are returned
// wrapped; after one, the Engine must be closed without Commit.
func (e *Engine) Apply(ctx context.Context, d *Decoded) error {
	if err := e.Start(ctx); err != nil {
		return err
	}
	if d.raw {
		rec := d.Record // Decode overwrites d.Record
		d.raw = false
		Decode(e.dec, &rec, d)
	}
	r := &d.Record
	e.stats.Records++
	if next, ok := e.resume[topicPart{r.Topic, r.Partition}]; ok && r.Offset < next {
		e.stats.Skipped++
		return nil
	}
	if err := e.apply(ctx, d); err != nil {
		var bad *driver.Bad
		if !errors.As(err, &bad) {
			return err
		}
		src := driver.Source{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
		for _, h := range r.Headers {
			src.Headers = append(src.Headers, deadletter.Header{Key: h.Key, Value: h.Value})
		}
		if err := driver.HandleBad(ctx, e.policy, "engine", &src, bad); err != nil {
			return err
		}
		e.stats.Bad++
	}
	tp := topicPart{r.Topic, r.Partition}
	if _, ok := e.next[tp]; !ok {
		tp.topic = string([]byte(r.Topic)) // the key outlives the record
	}
	e.next[tp] = r.Offset + 1
	e.pending++
	if e.endAfter {
		return e.endBulk(ctx)
	}
	if !e.Loading() && e.pending >= e.cfg.State.BatchEvents {
		return e.Checkpoint(ctx)
	}
	return nil
}

func (e *Engine) apply(ctx context.Context, d *Decoded) error {
	if d.keyTypes != nil {
		e.keyTypes, e.keyTypesDirty = d.keyTypes, true
		e.publishKeyTypes()
	}
	if d.Err != nil {
		if bad, ok := driver.BadDecode(d.Err); ok {
			return bad
		}
		return d.Err // the schema registry failed, not the record
	}
	if !d.ok {
		e.stats.Tombstones++
		return nil
	}
	e.stats.Events++
	if e.pipe != nil {
		return e.applyPlan(ctx, d)
	}
	e.types.Observe(d.side, &d.ev)
	if e.bulk != nil {
		if consumed, err := e.bulkApply(ctx, d); consumed || err != nil {
			return err
		}
	}
	r := &d.Record
	out := e.output(ctx)
	start := time.Now()
	err := e.keyer.Key(e.txn, d.side, r.Partition, &d.ev, func(in *keyed.Input) error {
		e.msg.Kind, e.msg.In = keyedlog.KindInput, *in
		e.msg.Pos, e.msg.Version = e.inputs, e.clock.At(e.inputs)
		e.inputs++
		return e.fair.Step(e.txn, &e.msg, out)
	})
	if err != nil {
		if bad, ok := driver.BadKey(err, &driver.Source{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}); ok {
			return bad
		}
		return err
	}
	if !e.fair.Busy() {
		return nil
	}
	if e.out.Positioned() {
		// Budgets in input records (see the package doc): the same
		// chunks whenever the batch is re-created.
		_, err := e.fair.Advance(e.txn, e.fair.Chunk, out)
		return err
	}
	e.pacer.Earn(time.Since(start))
	return e.pacer.Work(e.fair, e.txn, e.fair.Chunk, 0, out)
}

// publishKeyTypes makes keyTypes what decoding goroutines start their
// batches from (aheadDecoder).
func (e *Engine) publishKeyTypes() {
	if len(e.keyTypes) > 0 {
		kt := e.keyTypes
		e.sharedKeyTypes.Store(&kt)
	}
}

// output returns the operator's Out for the batch in progress: into the
// sink, behind Begin for a Positioned sink, or nowhere for a batch the
// sink holds already.
func (e *Engine) output(ctx context.Context) keyedlog.Out {
	b := &e.emit
	if b.ok && b.ctx == ctx && b.batch == e.batches {
		return b.out
	}
	emit := driver.Discard
	if !e.out.Silent(e.batches) {
		emit = e.out.EmitterFrom(ctx, e.batches)
	}
	*b = batchOut{ctx: ctx, batch: e.batches, out: keyedlog.Out{Emit: emit}, ok: true}
	return b.out
}

// Commit finishes the fan-outs in progress, flushes every emitted change to
// the sink and then commits state, version clock and positions atomically:
// afterwards the sink holds the join of everything applied. It ends a bulk
// load (which emits the snapshot by a merge, never by fan-outs: while
// loading there is no fan-out in progress).
func (e *Engine) Commit(ctx context.Context) error {
	if err := e.Start(ctx); err != nil {
		return err
	}
	if e.Loading() {
		return e.endBulk(ctx)
	}
	// A backlog of fan-outs is finished in steps, each flushed and
	// committed, so that the sink sees it stream and a crash keeps what
	// was done.
	for e.fair.Busy() {
		if _, err := e.fair.Advance(e.txn, drainRows, e.output(ctx)); err != nil {
			return err
		}
		if err := e.Checkpoint(ctx); err != nil {
			return err
		}
	}
	return e.Checkpoint(ctx)
}

// drainRows is how many fan-out rows Commit emits per checkpoint while it
// finishes the fan-outs in progress.
const drainRows = 64 << 10

// Checkpoint is Commit without finishing the fan-outs in progress: they
// are committed where they are (with the inputs waiting for them) and
// continue after later records, or after a restart. Like Commit, it ends
// a bulk load.
func (e *Engine) Checkpoint(ctx context.Context) error {
	if e.Loading() {
		return e.endBulk(ctx)
	}
	if e.pending == 0 && e.txn.Empty() {
		return nil
	}
	err := driver.Commit(ctx, syncedTxn{e.txn, e}, driver.Batch{Write: e.writeBatch, Out: e.out, To: e.batches + 1})
	if err != nil {
		return cerr.Wrap(err, "batch %d", e.batches)
	}
	e.committed()
	e.txn = e.store.Begin()
	return nil
}

// writeBatch writes the batch's input positions and metadata (Commit's
// step 1): clock, input count, shape, batch count, learned key types.
func (e *Engine) writeBatch(c driver.Committer) error {
	for tp, next := range e.next {
		if err := c.SetPosition(tp.topic, tp.part, next); err != nil {
			return err
		}
	}
	err := errors.Join(driver.MetaClock.Put(c, e.clock), driver.MetaInputs.Put(c, e.inputs),
		driver.MetaFingerprint.Put(c, e.fingerprint()), driver.MetaBatches.Put(c, e.batches+1))
	if err == nil && e.keyTypesDirty {
		err = driver.MetaKeyTypes.Put(c, e.keyTypes)
	}
	return err
}

// committed moves the engine past a committed batch.
func (e *Engine) committed() {
	e.batches++
	e.stats.Commits++
	e.pending, e.keyTypesDirty = 0, false
	e.emit.ok = false
	e.warm.Store(e.opts.WarmAlways || e.store.WarmingPays())
}

// syncedTxn commits a batch's transaction behind the fsync of the one
// before (state.sync, sync.go).
type syncedTxn struct {
	*joinstate.Txn
	e *Engine
}

func (t syncedTxn) Commit() error {
	if err := t.e.waitSync(); err != nil {
		return cerr.Wrap(err, "state: sync")
	}
	if err := t.Txn.Commit(); err != nil {
		return err
	}
	t.e.startSync()
	return nil
}

// Close discards uncommitted work (call Commit first to keep it) and closes
// the state.
func (e *Engine) Close() error {
	serr := e.waitSync()
	if e.bulk != nil {
		e.bulk.Close()
		e.bulk = nil
	}
	e.pbulk = nil
	if e.txn != nil {
		e.txn.Abort()
		e.txn = nil
	}
	e.out.Discard()
	if err := e.store.Close(); err != nil {
		return err
	}
	return cerr.Wrap(serr, "state: sync")
}

// Final streams the materialized join from the committed state, sorted by row
// key (join key, then child key; a LEFT join's padded row has no child key).
// vals is reused between calls. It is the join of the input after Commit
// (after Checkpoint, inputs waiting for a fan-out are not in it yet).
func (e *Engine) Final(fn func(parentKey, childKey, vals []row.Value) error) error {
	t := e.store.Begin()
	defer t.Abort()
	if e.pipe != nil {
		return e.finalPlan(t, fn)
	}
	return keyed.Materialize(t, e.spec, fn)
}

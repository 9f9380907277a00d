// Package engine runs the whole join in one process on one pebble state:
// decode → key → join, committing state, versions and input positions in one
// pebble batch per batch of records. It is the offline/backfill path behind
// `cdcjoin replay`, and the reference against which the distributed runtime
// is checked.
//
// Versions are a counter persisted in the state: the i-th keyed input ever
// applied gets version i. A crash loses at most the uncommitted batch;
// reprocessing it from the committed positions reproduces the same changes
// with the same versions.
package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
)

// Record is one Kafka record of a Debezium topic. Value nil is a tombstone.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
}

// BadRecord is a record the engine could not process, with the reason.
type BadRecord struct {
	Record *Record
	Err    error
}

// Options configure an Engine.
type Options struct {
	// Resume continues from the state's committed positions: records at or
	// before a partition's committed offset are skipped. Without Resume the
	// state directory must be empty.
	Resume bool
	// Emit receives every change (see row.Change's ownership rules). Nil
	// discards changes.
	Emit keyed.Emit
	// Flush, if set, is called before each state commit; it must make every
	// change emitted so far durable. A Flush error aborts the commit.
	Flush func(ctx context.Context) error
	// OnBad, if set, receives bad records under the dlq policy (after it
	// returns nil the record counts as handled). Required for policy dlq.
	OnBad func(ctx context.Context, b BadRecord) error
	// FS overrides the state's filesystem (tests).
	FS vfs.FS
}

// Stats is a snapshot of what an Engine has done.
type Stats struct {
	Records    uint64 // records read (including skipped)
	Skipped    uint64 // records at or before committed positions (resume)
	Tombstones uint64
	Events     uint64 // decoded change events
	Bad        uint64 // records routed to OnBad
	Commits    uint64
	Join       keyed.Stats
}

// Engine is the single-process join. Not safe for concurrent use.
type Engine struct {
	cfg      *config.Config
	spec     *keyed.Spec
	opts     Options
	store    *joinstate.Store
	keyer    *keyed.Keyer
	join     *keyed.Join
	decoders *Decoders // for Process
	scratch  Decoded
	txn      *joinstate.Txn
	version  uint64
	pending  int
	stats    Stats
	emit     keyed.Emit
	resume   map[topicPart]int64
	next     map[topicPart]int64 // positions reached so far, written at each Commit
	types    [3][]row.ColumnType // last schema'd column types per side
}

type topicPart struct {
	topic string
	part  int32
}

const metaVersion = "version"
const metaFingerprint = "fingerprint"

// Open opens the state in cfg.State.Dir and prepares the engine.
func Open(cfg *config.Config, opts Options) (*Engine, error) {
	if cfg.Errors.Policy == config.PolicyDLQ && opts.OnBad == nil {
		return nil, errors.New("cdcjoin: errors.policy is dlq but no dead-letter destination is set")
	}
	if !opts.Resume && opts.FS == nil {
		if entries, err := os.ReadDir(cfg.State.Dir); err == nil && len(entries) > 0 {
			return nil, fmt.Errorf("cdcjoin: state directory %s is not empty: pass --resume to continue from it, or remove it to start over", cfg.State.Dir)
		}
	}
	store, err := joinstate.Open(joinstate.Options{
		Dir: cfg.State.Dir, CacheBytes: int64(cfg.State.CacheMB) << 20, Sync: *cfg.State.Sync, FS: opts.FS,
		MemTableBytes: uint64(cfg.State.MemTableMB) << 20, RowCacheBytes: cfg.State.RowCacheBytes(),
	})
	if err != nil {
		return nil, err
	}
	spec := keyed.NewSpec(cfg)
	e := &Engine{
		cfg: cfg, spec: spec, opts: opts, store: store,
		keyer: keyed.NewKeyer(spec), join: keyed.NewJoin(spec),
		resume: map[topicPart]int64{}, next: map[topicPart]int64{},
	}
	e.decoders = e.NewDecoders()
	e.emit = opts.Emit
	if e.emit == nil {
		e.emit = func(*row.Change) error { return nil }
	}
	if err := e.load(); err != nil {
		store.Close()
		return nil, err
	}
	e.txn = store.Begin()
	return e, nil
}

// fingerprint identifies the state's shape: a state built for another
// projection or join kind must not be resumed.
func (e *Engine) fingerprint() []byte {
	s := fmt.Sprintf("v2|%s|%v|%v|%v|%v|%v|%v", e.spec.Join, e.spec.ParentColumns, e.spec.ChildColumns,
		e.spec.ParentKey, e.spec.ChildKey, e.spec.ChildFK, e.spec.Out)
	return []byte(s)
}

func (e *Engine) load() error {
	fp, err := e.store.Meta(metaFingerprint)
	if err != nil {
		return err
	}
	if fp != nil && string(fp) != string(e.fingerprint()) {
		return fmt.Errorf("cdcjoin: state in %s was built for another join shape (%s); remove it to rebuild", e.cfg.State.Dir, fp)
	}
	v, err := e.store.Meta(metaVersion)
	if err != nil {
		return err
	}
	if len(v) == 8 {
		e.version = binary.BigEndian.Uint64(v)
	}
	return e.store.Positions(func(topic string, part int32, next int64) error {
		e.resume[topicPart{topic, part}] = next
		return nil
	})
}

// OutputTypes returns the Debezium column types of the select list, in
// select order, as declared by the most recent records with a schema (zero
// entries where no such record was seen yet). Sinks that create tables use
// it.
func (e *Engine) OutputTypes() []row.ColumnType {
	out := make([]row.ColumnType, len(e.spec.Out))
	for i, o := range e.spec.Out {
		if ts := e.types[o.Side]; o.Index < len(ts) {
			out[i] = ts[o.Index]
		}
	}
	return out
}

// Version returns the last version assigned.
func (e *Engine) Version() uint64 { return e.version }

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Join = e.join.Stats
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
	Record Record // Key/Value are kept only when Err is set (for dead-lettering)
	side   row.Side
	ok     bool  // false: a tombstone
	Err    error // a bad-record error naming the record's position
	ev     debezium.Event
}

// Decoders decode records for one Engine. Each goroutine needs its own; they
// share nothing with the Engine but its immutable configuration.
type Decoders struct {
	cfg  *config.Config
	decs [3]*debezium.Decoder
}

// NewDecoders returns decoders for e's topics.
func (e *Engine) NewDecoders() *Decoders {
	d := &Decoders{cfg: e.cfg}
	dopts := debezium.Options{MaxRecordBytes: e.cfg.Errors.MaxRecordBytes}
	d.decs[row.Parent] = debezium.NewDecoder(e.spec.ParentColumns, dopts)
	d.decs[row.Child] = debezium.NewDecoder(e.spec.ChildColumns, dopts)
	return d
}

func sideOf(cfg *config.Config, topic string) row.Side {
	switch topic {
	case cfg.Parent.Topic:
		return row.Parent
	case cfg.Child.Topic:
		return row.Child
	}
	return 0
}

// Decode decodes r into out. It never fails: a bad record is reported in
// out.Err and handled by Apply according to the error policy.
func (d *Decoders) Decode(r *Record, out *Decoded) {
	out.Record = Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	out.Err, out.ok = nil, false
	out.side = sideOf(d.cfg, r.Topic)
	if out.side == 0 {
		out.Err = fmt.Errorf("cdcjoin: bad record at %s/%d@%d: topic is neither parent.topic (%s) nor child.topic (%s)",
			r.Topic, r.Partition, r.Offset, d.cfg.Parent.Topic, d.cfg.Child.Topic)
	} else {
		var err error
		out.ok, err = d.decs[out.side].Decode(r.Key, r.Value, &out.ev)
		if err != nil {
			out.Err = debezium.AtPosition(err, r.Topic, r.Partition, r.Offset)
		}
	}
	if out.Err != nil {
		out.Record.Key = append([]byte(nil), r.Key...)
		out.Record.Value = append([]byte(nil), r.Value...)
	}
}

// Process decodes and applies one record; see Apply.
func (e *Engine) Process(ctx context.Context, r *Record) error {
	e.decoders.Decode(r, &e.scratch)
	return e.Apply(ctx, &e.scratch)
}

// Apply applies one decoded record. Records must come in each partition's
// offset order. It commits a batch every state.batch_events records. Bad
// records (undecodable, unkeyable, unknown topic) stop processing with an
// error naming topic/partition/offset under policy stop; under policy dlq
// they go to Options.OnBad. Other errors (state, emit, flush) are returned
// wrapped; after one, the Engine must be closed without Commit.
func (e *Engine) Apply(ctx context.Context, d *Decoded) error {
	r := &d.Record
	e.stats.Records++
	if next, ok := e.resume[topicPart{r.Topic, r.Partition}]; ok && r.Offset < next {
		e.stats.Skipped++
		return nil
	}
	if err := e.apply(d); err != nil {
		var bad *badError
		if !errors.As(err, &bad) {
			return err
		}
		if e.cfg.Errors.Policy != config.PolicyDLQ {
			return bad.err
		}
		if err := e.opts.OnBad(ctx, BadRecord{Record: r, Err: bad.err}); err != nil {
			return fmt.Errorf("cdcjoin: dead-letter record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		e.stats.Bad++
	}
	tp := topicPart{r.Topic, r.Partition}
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

type badError struct{ err error }

func (b *badError) Error() string { return b.err.Error() }

func (e *Engine) apply(d *Decoded) error {
	if d.Err != nil {
		return &badError{d.Err}
	}
	if !d.ok {
		e.stats.Tombstones++
		return nil
	}
	e.stats.Events++
	if d.ev.Types != nil {
		e.types[d.side] = d.ev.Types
	}
	r := &d.Record
	err := e.keyer.Key(e.txn, d.side, &d.ev, func(in *keyed.Input) error {
		e.version++
		return e.join.Apply(e.txn, in, e.version, e.emit)
	})
	var ke *keyed.KeyError
	if errors.As(err, &ke) {
		return &badError{fmt.Errorf("cdcjoin: bad record at %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)}
	}
	return err
}

// Commit flushes emitted changes (Options.Flush) and then commits state,
// version counter and positions atomically.
func (e *Engine) Commit(ctx context.Context) error {
	if e.pending == 0 && e.txn.Empty() {
		return nil
	}
	if e.opts.Flush != nil {
		if err := e.opts.Flush(ctx); err != nil {
			return fmt.Errorf("cdcjoin: flush changes: %w", err)
		}
	}
	for tp, next := range e.next {
		if err := e.txn.SetPosition(tp.topic, tp.part, next); err != nil {
			return err
		}
	}
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], e.version)
	if err := e.txn.SetMeta(metaVersion, v[:]); err != nil {
		return err
	}
	if err := e.txn.SetMeta(metaFingerprint, e.fingerprint()); err != nil {
		return err
	}
	if err := e.txn.Commit(); err != nil {
		return err
	}
	e.stats.Commits++
	e.pending = 0
	e.txn = e.store.Begin()
	return nil
}

// Close discards uncommitted work (call Commit first to keep it) and closes
// the state.
func (e *Engine) Close() error {
	if e.txn != nil {
		e.txn.Abort()
		e.txn = nil
	}
	return e.store.Close()
}

// Final streams the materialized join from the committed state, sorted by row
// key (join key, then child key; a LEFT join's padded row has no child key).
// vals is reused between calls.
func (e *Engine) Final(fn func(parentKey, childKey, vals []row.Value) error) error {
	return Materialize(e.store, e.spec, fn)
}

// Materialize streams the join held in store (see Engine.Final).
func Materialize(store *joinstate.Store, spec *keyed.Spec, fn func(parentKey, childKey, vals []row.Value) error) error {
	t := store.Begin()
	defer t.Abort()
	var vals, pk, ck []row.Value
	return t.Groups(func(jk []byte, p *joinstate.ParentRecord, children joinstate.ChildScan) error {
		var err error
		pk, _, err = row.DecodeKey(pk[:0], jk, len(spec.ParentKey))
		if err != nil {
			return err
		}
		any := false
		err = children(func(ckb []byte, c *joinstate.ChildRecord) error {
			any = true
			var err error
			ck, _, err = row.DecodeKey(ck[:0], ckb, len(spec.ChildKey))
			if err != nil {
				return err
			}
			vals = spec.Output(vals, p.Row, c.Row)
			return fn(pk, ck, vals)
		})
		if err != nil {
			return err
		}
		if !any && spec.Join == config.Left {
			vals = spec.Output(vals, p.Row, nil)
			return fn(pk, nil, vals)
		}
		return nil
	})
}

package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/sink"
)

// jobYAML is the benchmark's join: users ⋈ domains, the same select list as
// the oracle tests (3 parent and 2 child columns of the wide rows).
const jobYAML = `name: bench
parent: {topic: %s, key: id}
child:  {topic: %s, key: id, parent_key: user_id}
join: inner
select: parent.id AS user_id, parent.firstname, parent.lastname, child.id AS domain_id, child.domain_name
state: {dir: %q, cache_mb: %d, batch_events: %d, sync: %t%s}
%s`

func jobConfig(o Options, stateDir, extra string) (*config.Config, error) {
	s := newSynth()
	return jobConfigTopics(o, s.parentTopic, s.childTopic, stateDir, extra)
}

// jobConfigTopics is jobConfig on the given source topics.
func jobConfigTopics(o Options, parentTopic, childTopic, stateDir, extra string) (*config.Config, error) {
	var st string
	for _, kv := range []struct {
		name string
		v    int
	}{{"bulk_load_mb", o.BulkLoadMB}, {"memtable_mb", o.MemTableMB}, {"row_cache_mb", o.RowCacheMB}} {
		if kv.v != 0 {
			st += fmt.Sprintf(", %s: %d", kv.name, kv.v)
		}
	}
	y := fmt.Sprintf(jobYAML, parentTopic, childTopic, stateDir, o.CacheMB, o.BatchEvents, o.Sync, st, extra)
	return config.Parse([]byte(y), "bench.yaml")
}

// phaseDriver feeds a pipeline phase by phase. Implementations: engineDriver
// (in-process engine) and kafkaDriver (kafkarun.Run on Kafka).
type phaseDriver interface {
	// phase runs one phase to completion: every record of the phase has
	// been processed and its changes acknowledged by the sink.
	phase(ctx context.Context, idx int, name string, req phaseReq, rate float64) (Phase, error)
	// snapshotState flushes and measures the state after the snapshot.
	measureState(pt *Point, final bool) error
	// stormVariants are the hot-key variants of --storm-compare, and
	// configure switches to one (returning how long salting the hot
	// parent took, if it did).
	stormVariants() []stormVariant
	configure(ctx context.Context, v stormVariant) (float64, error)
	// tables returns the tables the generators ended with (after the last
	// phase: the generators are idle).
	tables() []cdcgen.Tables
	close() error
}

// engineDriver runs the in-process engine path: one goroutine decodes,
// keys, joins and commits (engine.Engine), fed by a source on another OS
// thread.
type engineDriver struct {
	o      Options
	cfg    *config.Config
	eng    *engine.Engine
	src    *source
	smp    *sampler
	pr     *probes
	ps     *probeSink
	syn    *synth
	p      plan
	last   time.Time // last commit (Flush callback)
	genCPU float64
	probeO int64
}

func newEngineDriver(ctx context.Context, o Options, p plan, stateDir string, inner sink.Sink, smp *sampler, pr *probes) (*engineDriver, error) {
	cfg, err := jobConfig(o, stateDir, "")
	if err != nil {
		return nil, err
	}
	d := &engineDriver{o: o, cfg: cfg, smp: smp, pr: pr, syn: newSynth(), p: p}
	if inner == nil {
		inner = NewNullSink(cfg.OutputNames())
	}
	d.ps = &probeSink{inner: inner, p: pr, out: &smp.out}
	d.eng, err = engine.Open(cfg, engine.Options{Sink: timedSink{d.ps, d}})
	if err != nil {
		return nil, err
	}
	d.src, err = newSource(o.Workload.genOptions(p, 0, 1), p, o.Workload, int32(o.Workload.Partitions), true)
	if err == nil {
		d.src.toCheckpoint = o.Verify
	}
	if err != nil {
		d.eng.Close()
		return nil, err
	}
	d.src.start(ctx)
	return d, nil
}

// timedSink notes when the engine last flushed (before each commit).
type timedSink struct {
	sink.Sink
	d *engineDriver
}

func (s timedSink) Flush(ctx context.Context) error {
	s.d.last = time.Now()
	return s.Sink.Flush(ctx)
}

func (d *engineDriver) tables() []cdcgen.Tables { return []cdcgen.Tables{d.src.gen.Tables()} }

func (d *engineDriver) close() error {
	d.src.close()
	err := d.eng.Close()
	if cerr := d.ps.Close(); err == nil {
		err = cerr
	}
	return err
}

func (d *engineDriver) phase(ctx context.Context, idx int, name string, req phaseReq, rate float64) (Phase, error) {
	ph := Phase{Name: name, TargetRate: rate}
	select {
	case d.src.reqs <- req:
	case <-ctx.Done():
		return ph, ctx.Err()
	}
	m := beginPhase(d.smp, name, expected(req, d.p, d.o.Workload), d.genCPU)
	t0 := time.Now()
	d.last = t0
	var i int64
	probeTopic := d.syn.childTopic
	probePart := int32(d.o.Workload.Partitions + 1)
	// Snapshot probes are snapshot reads too: a streaming event would end
	// the engine's bulk load. Their latency is when the load's rows reach
	// the sink.
	probeOp := byte('c')
	if req.kind == phaseSnapshot {
		probeOp = 'r'
	}
	ahead := d.decodeAhead(ctx)
	defer ahead.stop()
	var er engine.Record
	for {
		var b *decodedBatch
		select {
		case b = <-ahead.out:
		case <-ctx.Done():
			return ph, ctx.Err()
		}
		d.eng.Install(&b.pre)
		for k := range b.recs {
			due := pace(t0, i, rate)
			if err := d.eng.Apply(ctx, &b.recs[k]); err != nil {
				return ph, err
			}
			i++
			ph.InputBytes += int64(b.bytes[k])
			d.smp.in.Add(1)
			if i%int64(d.o.ProbeEvery) == 0 {
				sent := time.Now()
				if rate > 0 {
					sent = due // latency from the scheduled time: no coordinated omission
				}
				id, name := d.pr.next(sent, idx)
				k, v := d.syn.domain(probeOp, id, probeUserID, name, b.tsMs[k])
				er = engine.Record{Topic: probeTopic, Partition: probePart, Offset: d.probeO, Key: k, Value: v}
				d.probeO++
				if err := d.eng.Process(ctx, &er); err != nil {
					return ph, err
				}
				ph.Probes++
			}
			if i&63 == 0 && !d.eng.Loading() && time.Since(d.last) >= d.o.Linger {
				if err := d.eng.Checkpoint(ctx); err != nil {
					return ph, err
				}
				d.last = time.Now()
			}
		}
		last := b.last
		d.genCPU = b.genCPU
		ahead.recycle(b)
		if last {
			break
		}
	}
	// The phase's last records (probes among them) reach the sink now;
	// then the fan-outs still in progress finish.
	if err := d.eng.Checkpoint(ctx); err != nil {
		return ph, err
	}
	if err := d.eng.Commit(ctx); err != nil {
		return ph, err
	}
	ph.Events = i
	m.end(&ph, d.smp, d.pr, idx, d.genCPU)
	return ph, nil
}

// decodedBatch is a source batch decoded ahead of Apply.
type decodedBatch struct {
	recs   []engine.Decoded
	pre    joinstate.Prefetch // read ahead for recs (engine.Warmer)
	bytes  []int              // key + value bytes per record
	tsMs   []int64            // per record
	last   bool
	genCPU float64
}

// aheadQueue is the decode-ahead stage of a phase: a goroutine (owned by
// the phase, stopped and waited for by stop) decodes the source's batches,
// warms the state they will read (engine.Warmer), and hands them over
// through a bounded queue, so that decoding overlaps applying as in
// Engine.Run.
type aheadQueue struct {
	out    chan *decodedBatch
	free   chan *decodedBatch
	cancel context.CancelFunc
	done   chan struct{}
}

const aheadDepth = 4

func (d *engineDriver) decodeAhead(ctx context.Context) *aheadQueue {
	ctx, cancel := context.WithCancel(ctx)
	q := &aheadQueue{out: make(chan *decodedBatch, aheadDepth), free: make(chan *decodedBatch, aheadDepth+2), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(q.done)
		dec := d.eng.NewDecoder()
		wm := d.eng.NewWarmer()
		defer wm.Close()
		for {
			var b *batch
			select {
			case b = <-d.src.out:
			case <-ctx.Done():
				return
			}
			var db *decodedBatch
			select {
			case db = <-q.free:
			default:
				db = &decodedBatch{}
			}
			n := len(b.recs)
			if cap(db.recs) < n {
				db.recs, db.bytes, db.tsMs = make([]engine.Decoded, n), make([]int, n), make([]int64, n)
			}
			db.recs, db.bytes, db.tsMs = db.recs[:n], db.bytes[:n], db.tsMs[:n]
			for k := range b.recs {
				r := &b.recs[k]
				er := engine.Record{Topic: r.topic, Partition: r.partition, Offset: r.offset, Key: r.key, Value: r.val}
				engine.Decode(dec, &er, &db.recs[k])
				db.bytes[k], db.tsMs[k] = len(r.key)+len(r.val), r.tsMs
			}
			wm.Warm(db.recs, &db.pre)
			db.last, db.genCPU = b.last, b.genCPU
			d.src.recycle(b)
			select {
			case q.out <- db:
			case <-ctx.Done():
				return
			}
			if db.last {
				return
			}
		}
	}()
	return q
}

func (q *aheadQueue) recycle(b *decodedBatch) {
	select {
	case q.free <- b:
	default:
	}
}

// stop stops the decoding goroutine and waits for it.
func (q *aheadQueue) stop() {
	q.cancel()
	<-q.done
}

// phaseMeter measures one phase: wall and CPU time, generator CPU, output
// rows, peak RSS, the timeline and the probes' latency.
type phaseMeter struct {
	sw   stopwatch
	gen0 float64
	out0 uint64
}

// beginPhase resets the peak RSS and starts the phase's timeline; gen is
// the generators' cumulative CPU seconds so far.
func beginPhase(smp *sampler, name string, total int64, gen float64) phaseMeter {
	resetPeakRSS()
	m := phaseMeter{sw: startWatch(), gen0: gen}
	smp.begin(name, total)
	m.out0 = smp.out.Load()
	return m
}

// end fills ph's measurements; gen is the generators' cumulative CPU
// seconds now (excluded from the pipeline's CPU).
func (m phaseMeter) end(ph *Phase, smp *sampler, pr *probes, idx int, gen float64) {
	wall, cpu := m.sw.elapsed()
	ph.WallSeconds = wall
	ph.GenCPUSeconds = gen - m.gen0
	ph.CPUSeconds = max(0, cpu-ph.GenCPUSeconds)
	ph.OutputRows = int64(smp.out.Load() - m.out0)
	ph.PeakRSSBytes = peakRSS()
	ph.Timeline = smp.end()
	h := pr.hist(idx)
	ph.Latency = h.Summary()
}

// pace sleeps until record i's scheduled time at rate records/s from t0
// and returns that time (zero when rate is 0: flat out).
func pace(t0 time.Time, i int64, rate float64) time.Time {
	if rate <= 0 {
		return time.Time{}
	}
	due := t0.Add(time.Duration(float64(i) / rate * 1e9))
	if w := time.Until(due); w > time.Millisecond {
		time.Sleep(w)
	}
	return due
}

func expected(req phaseReq, p plan, w Workload) int64 {
	switch req.kind {
	case phaseSnapshot:
		return p.users + p.domains + p.hot + 2
	case phaseStorm:
		return int64(w.StormRenames) * int64(w.StormGap+1)
	}
	return req.n
}

func (d *engineDriver) measureState(pt *Point, final bool) error {
	return measureStore(d.eng.Store(), pt, final)
}

// measureStore flushes st and records its size (after the snapshot) or
// its final size and pebble metrics.
func measureStore(st *joinstate.Store, pt *Point, final bool) error {
	if err := st.Flush(); err != nil {
		return fmt.Errorf("cdcjoin: bench: flush state: %w", err)
	}
	db := st.DB()
	if final {
		pt.FinalStateBytes = st.DiskBytes()
		m := db.Metrics()
		t := m.Total()
		pt.WriteAmp = t.WriteAmp()
		if n := m.BlockCache.Hits + m.BlockCache.Misses; n > 0 {
			pt.BlockCacheHitRate = float64(m.BlockCache.Hits) / float64(n)
		}
		return nil
	}
	pt.StateBytes = st.DiskBytes()
	est := func(prefix byte) uint64 {
		n, err := db.EstimateDiskUsage([]byte{prefix}, []byte{prefix + 1})
		if err != nil {
			return 0
		}
		return n
	}
	parents := pt.Users + 2 // + the hot and the probe parent
	children := pt.Domains + pt.HotChildren
	if rows := parents + children; rows > 0 {
		pt.StateBytesPerRow = float64(pt.StateBytes) / float64(rows)
	}
	pb, cb := est('P'), est('C')+est('I')
	// Attribute the whole state (positions, metadata, estimate slack) in
	// proportion to the per-side estimates, so the two sides add up.
	if sum := pb + cb; sum > 0 {
		pt.ParentStateBytesPerRow = float64(pt.StateBytes) * float64(pb) / float64(sum) / float64(parents)
		if children > 0 {
			pt.ChildStateBytesPerRow = float64(pt.StateBytes) * float64(cb) / float64(sum) / float64(children)
		}
	}
	return nil
}

// formatRows renders 1000000 as 1e6 and 2500000 as 2.5e6.
func formatRows(n int64) string {
	s := strconv.FormatFloat(float64(n), 'g', 4, 64)
	return strings.Replace(s, "e+0", "e", 1)
}

package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/sink"
)

// jobYAML is the benchmark's join: users ⋈ domains, the same select list as
// the oracle tests (3 parent and 2 child columns of the wide rows).
const jobYAML = `name: bench
parent: {topic: %s, key: id}
child:  {topic: %s, key: id, parent_key: user_id}
join: inner
select: parent.id AS user_id, parent.firstname, parent.lastname, child.id AS domain_id, child.domain_name
state: {dir: %q, cache_mb: %d, batch_events: %d, sync: %t}
%s`

func jobConfig(o Options, stateDir, extra string) (*config.Config, error) {
	y := fmt.Sprintf(jobYAML, newSynth().parentTopic, newSynth().childTopic, stateDir, o.CacheMB, o.BatchEvents, o.Sync, extra)
	return config.Parse([]byte(y), "bench.yaml")
}

// driver feeds a pipeline phase by phase. Implementations: engineDriver
// (in-process engine) and kafkaDriver (runtime.Run on Kafka).
type driver interface {
	// phase runs one phase to completion: every record of the phase has
	// been processed and its changes acknowledged by the sink.
	phase(ctx context.Context, idx int, name string, req phaseReq, rate float64) (Phase, error)
	// snapshotState flushes and measures the state after the snapshot.
	measureState(pt *Point, final bool) error
	close() error
}

// engineDriver runs the in-process engine path: one goroutine decodes,
// keys, joins and commits (engine.Engine), fed by a source on another OS
// thread.
type engineDriver struct {
	o      Options
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
	d := &engineDriver{o: o, smp: smp, pr: pr, syn: newSynth(), p: p}
	if inner == nil {
		inner = NewNullSink(cfg.OutputNames())
	}
	d.ps = &probeSink{inner: inner, p: pr, out: &smp.out}
	var one [1]keyed.Change
	d.eng, err = engine.Open(cfg, engine.Options{
		Emit: func(c *keyed.Change) error {
			one[0] = *c
			return d.ps.Write(ctx, one[:])
		},
		Flush: func(ctx context.Context) error {
			d.last = time.Now()
			return d.ps.Flush(ctx)
		},
	})
	if err != nil {
		return nil, err
	}
	d.src, err = newSource(o.Workload.genOptions(p, 0, 1), p, o.Workload, int32(o.Workload.Partitions), true)
	if err != nil {
		d.eng.Close()
		return nil, err
	}
	d.src.start(ctx)
	return d, nil
}

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
	resetPeakRSS()
	sw := startWatch()
	gen0 := d.genCPU
	d.smp.begin(name, expected(req, d.p, d.o.Workload))
	out0 := d.smp.out.Load()
	t0 := time.Now()
	d.last = t0
	var i int64
	probeTopic := d.syn.childTopic
	probePart := int32(d.o.Workload.Partitions + 1)
	var er engine.Record
	for {
		var b *batch
		select {
		case b = <-d.src.out:
		case <-ctx.Done():
			return ph, ctx.Err()
		}
		for k := range b.recs {
			r := &b.recs[k]
			var due time.Time
			if rate > 0 {
				due = t0.Add(time.Duration(float64(i) / rate * 1e9))
				if w := time.Until(due); w > time.Millisecond {
					time.Sleep(w)
				}
			}
			er = engine.Record{Topic: r.topic, Partition: r.partition, Offset: r.offset, Key: r.key, Value: r.val}
			if err := d.eng.Process(ctx, &er); err != nil {
				return ph, err
			}
			i++
			ph.InputBytes += int64(len(r.key) + len(r.val))
			d.smp.in.Add(1)
			if i%int64(d.o.ProbeEvery) == 0 {
				sent := time.Now()
				if rate > 0 {
					sent = due // latency from the scheduled time: no coordinated omission
				}
				id := d.pr.next(sent, idx)
				k, v := d.syn.domain('c', id, probeUserID, "probe.example.com", r.tsMs)
				er = engine.Record{Topic: probeTopic, Partition: probePart, Offset: d.probeO, Key: k, Value: v}
				d.probeO++
				if err := d.eng.Process(ctx, &er); err != nil {
					return ph, err
				}
				ph.Probes++
			}
			if i&63 == 0 && time.Since(d.last) >= d.o.Linger {
				if err := d.eng.Commit(ctx); err != nil {
					return ph, err
				}
				d.last = time.Now()
			}
		}
		last := b.last
		d.genCPU = b.genCPU
		d.src.recycle(b)
		if last {
			break
		}
	}
	if err := d.eng.Commit(ctx); err != nil {
		return ph, err
	}
	wall, cpu := sw.elapsed()
	ph.Events = i
	ph.WallSeconds = wall
	ph.GenCPUSeconds = d.genCPU - gen0
	ph.CPUSeconds = max(0, cpu-ph.GenCPUSeconds)
	ph.OutputRows = int64(d.smp.out.Load() - out0)
	ph.PeakRSSBytes = peakRSS()
	ph.Timeline = d.smp.end()
	h := d.pr.hist(idx)
	ph.Latency = h.Summary()
	return ph, nil
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

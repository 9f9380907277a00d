package bench

import (
	"context"
	goruntime "runtime"
	"sync"

	"github.com/cdcjoin/cdcjoin/cdcgen"
)

// rec is one source record in a batch; Key and Value point into the batch's
// arena.
type rec struct {
	topic     string
	partition int32
	offset    int64
	key, val  []byte
	tsMs      int64
}

// batch is a run of records of one phase. last marks the phase's final
// batch; genCPU is the source thread's cumulative CPU seconds when the batch
// was complete.
type batch struct {
	recs   []rec
	arena  []byte
	last   bool
	genCPU float64
}

type phaseKind uint8

const (
	phaseSnapshot phaseKind = iota + 1
	phaseCDC
	phaseStorm
)

// phaseReq asks the source for one phase's records.
type phaseReq struct {
	kind phaseKind
	n    int64 // phaseCDC: records; phaseStorm: CDC records between renames (0: Workload.StormGap)
}

// source generates records on its own OS thread (so its CPU time can be
// measured apart from the pipeline's) and hands them over in batches on a
// bounded channel. Owner: start launches the goroutine; stop cancels it and
// waits. One phase request at a time.
type source struct {
	gen       *cdcgen.Generator
	snapRecs  int64 // the generator's snapshot records
	p         plan
	w         Workload
	synthPart int32 // partition of synthetic records (engine: one past the last)
	withSynth bool  // this source emits the hot parent, probes' parent and renames

	reqs chan phaseReq
	out  chan *batch
	free chan *batch
	wg   sync.WaitGroup
	stop context.CancelFunc

	synth  *synth
	synOff [2]int64 // next synthetic offset: users, domains
	// atCheckpoint: the last generated record left the consumer at a
	// consistent DB state (cdcgen's Checkpoint); toCheckpoint makes every
	// phase end there, so the generator's Tables match what was consumed
	// (Options.Verify).
	atCheckpoint, toCheckpoint bool
	renames                    int
	cpu0                       float64 // the source thread's CPU seconds when it started (source goroutine only)
	tsMs                       int64
}

const batchRecords = 512

func newSource(o cdcgen.Options, p plan, w Workload, synthPart int32, withSynth bool) (*source, error) {
	g, err := cdcgen.NewGenerator(o)
	if err != nil {
		return nil, err
	}
	s := &source{gen: g, snapRecs: int64(o.Users + o.Domains), p: p, w: w, synthPart: synthPart, withSynth: withSynth,
		reqs: make(chan phaseReq, 1), out: make(chan *batch, 8), free: make(chan *batch, 16),
		synth: newSynth(), tsMs: 1_767_000_000_000}
	return s, nil
}

func (s *source) start(ctx context.Context) {
	ctx, s.stop = context.WithCancel(ctx)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		s.cpu0 = cpuSeconds(rusageThread)
		for {
			select {
			case <-ctx.Done():
				return
			case r := <-s.reqs:
				if !s.run(ctx, r) {
					return
				}
			}
		}
	}()
}

// close stops the goroutine and waits for it.
func (s *source) close() {
	if s.stop != nil {
		s.stop()
	}
	s.wg.Wait()
}

// recycle returns a consumed batch for reuse.
func (s *source) recycle(b *batch) {
	select {
	case s.free <- b:
	default:
	}
}

func (s *source) newBatch() *batch {
	select {
	case b := <-s.free:
		b.recs, b.arena, b.last = b.recs[:0], b.arena[:0], false
		return b
	default:
		return &batch{recs: make([]rec, 0, batchRecords), arena: make([]byte, 0, batchRecords*512)}
	}
}

// emitter accumulates records into batches and sends full ones.
type emitter struct {
	s   *source
	ctx context.Context
	b   *batch
}

func (e *emitter) add(topic string, part int32, off int64, key, val []byte, tsMs int64) bool {
	if e.b == nil {
		e.b = e.s.newBatch()
	}
	b := e.b
	k0 := len(b.arena)
	b.arena = append(b.arena, key...)
	v0 := len(b.arena)
	b.arena = append(b.arena, val...)
	r := rec{topic: topic, partition: part, offset: off, tsMs: tsMs}
	// Offsets into the arena are fixed up in flush (append may move it).
	r.key = b.arena[k0:v0:v0]
	if key == nil {
		r.key = nil
	}
	r.val = b.arena[v0:len(b.arena):len(b.arena)]
	if val == nil {
		r.val = nil
	}
	b.recs = append(b.recs, r)
	if len(b.recs) >= batchRecords {
		return e.flush(false)
	}
	return true
}

// flush re-slices the records into the final arena and sends the batch.
func (e *emitter) flush(last bool) bool {
	b := e.b
	if b == nil {
		b = e.s.newBatch()
	}
	e.b = nil
	off := 0
	for i := range b.recs {
		r := &b.recs[i]
		if r.key != nil {
			n := len(r.key)
			r.key = b.arena[off : off+n : off+n]
			off += n
		}
		if r.val != nil {
			n := len(r.val)
			r.val = b.arena[off : off+n : off+n]
			off += n
		}
	}
	b.last = last
	b.genCPU = cpuSeconds(rusageThread) - e.s.cpu0
	select {
	case e.s.out <- b:
		return true
	case <-e.ctx.Done():
		return false
	}
}

func (s *source) synthUser(e *emitter, op byte, id int64, first string) bool {
	s.tsMs++
	k, v := s.synth.user(op, id, first, "Hot", s.tsMs)
	s.synOff[0]++
	return e.add(s.synth.parentTopic, s.synthPart, s.synOff[0]-1, k, v, s.tsMs)
}

func (s *source) next(e *emitter) bool {
	r, ok := s.gen.Next()
	if !ok {
		return true // cdcgen's Ops is effectively unbounded
	}
	s.atCheckpoint = r.Checkpoint
	return e.add(r.Topic, r.Partition, r.Offset, r.Key, r.Value, r.TsMs)
}

// run produces one phase; false when ctx ended.
func (s *source) run(ctx context.Context, r phaseReq) bool {
	e := &emitter{s: s, ctx: ctx}
	switch r.kind {
	case phaseSnapshot:
		if s.withSynth {
			if !s.synthUser(e, 'r', probeUserID, "Probe") || !s.synthUser(e, 'r', hotUserID, "Hot") {
				return false
			}
			for i := int64(0); i < s.p.hot; i++ {
				s.tsMs++
				k, v := s.synth.domain('r', hotChildID0+i, hotUserID, hotChildName(i), s.tsMs)
				s.synOff[1]++
				if !e.add(s.synth.childTopic, s.synthPart, s.synOff[1]-1, k, v, s.tsMs) {
					return false
				}
			}
		}
		// cdcgen emits exactly Users+Domains op=r records (no rerun)
		// before any streaming record.
		for i := int64(0); i < s.snapRecs; i++ {
			if !s.next(e) {
				return false
			}
		}
	case phaseCDC:
		for i := int64(0); i < r.n; i++ {
			if !s.next(e) {
				return false
			}
		}
	case phaseStorm:
		gap := int64(s.w.StormGap)
		if r.n > 0 {
			gap = r.n
		}
		for n := 0; n < s.w.StormRenames; n++ {
			if s.withSynth {
				s.renames++
				if !s.synthUser(e, 'u', hotUserID, stormName(s.renames)) {
					return false
				}
			}
			for i := int64(0); i < gap; i++ {
				if !s.next(e) {
					return false
				}
			}
		}
	}
	for s.toCheckpoint && !s.atCheckpoint {
		if !s.next(e) {
			return false
		}
	}
	return e.flush(true)
}

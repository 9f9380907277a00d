package engine

import (
	"context"
	"errors"
	"sync"

	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/joinstate"
)

const (
	pipelineBatchSize = 256 // records per hand-off
	pipelineDepth     = 4   // batches in flight between the stages
)

// Run applies every record src yields, decoding ahead of the calling
// goroutine, which keys, joins and commits them in input order. With
// state.parallelism 1 the goroutine that runs src decodes each record
// itself; with P > 1 it only copies the records into batches, and P
// decoding goroutines decode whole batches, which the calling goroutine
// applies in input order (so that a decoding core never waits for the
// reading one, and the applying one never waits for decoding). While the
// state does not fit in the row cache, a decoding goroutine also reads
// ahead what each batch of records will need (Warmer), and the applying
// one installs it before applying the batch.
//
// Decoding in parallel changes nothing in what is applied: every record is
// applied on the calling goroutine in input order, and a record whose
// decoding depends on what earlier records taught the decoder (the class
// of a key column without a declared type, debezium.Decoder.KeyTypes) is
// decoded there, in order: a decoding goroutine's decoder starts each
// batch from what the engine's own decoder has learned, and from the first
// record that would teach it something (or that fails to decode) it leaves
// the rest of its batch to the applying goroutine (see aheadDecoder). So
// the same input gives the same changes, versions, bad records and state
// whatever the parallelism.
//
// The hand-off is bounded (pipelineDepth + P batches of pipelineBatchSize
// records, recycled), so memory stays flat whatever the input size.
//
// src is called once, on a goroutine of its own; it must call yield for
// each record in order and return yield's error if yield fails. The Record
// passed to yield may be reused by src after yield returns. Run returns the
// first error of either side (the other goroutines are stopped and waited
// for); it does not commit the final partial batch: call Commit.
func (e *Engine) Run(ctx context.Context, src func(yield func(*Record) error) error) error {
	workers := e.cfg.State.Parallelism
	return pipeline(ctx, src, stages[Decoded, joinstate.Prefetch]{
		workers: workers,
		worker: func() worker[Decoded, joinstate.Prefetch] {
			wm := e.NewWarmer()
			w := worker[Decoded, joinstate.Prefetch]{
				warm:  wm.Warm,
				close: wm.Close,
			}
			if workers <= 1 {
				dec := e.NewDecoder()
				w.decode = func(r *Record, d *Decoded) { Decode(dec, r, d) }
				return w
			}
			a := &aheadDecoder{e: e}
			w.begin, w.decode = a.begin, a.decode
			return w
		},
		install: e.Install,
		apply:   e.Apply,
	})
}

// aheadDecoder is a decoding goroutine's decoder when several decode in
// parallel (state.parallelism > 1). The classes of key columns a decoder
// learns (debezium.Decoder.KeyTypes: the first value fixes a column's
// class, a later value of another class is a bad record) depend on every
// earlier record, which only the applying goroutine sees in order; its
// decoder (Engine.dec) is the authority, and it publishes what it knows
// (Engine.sharedKeyTypes). An aheadDecoder starts each batch knowing that
// (never more: what it knows is a subset of what the authority will know
// when it reaches the batch, and a class once fixed never changes), so a
// record it decodes without learning anything and without an error
// decodes the same for the authority. The first record that teaches it
// something or fails, and every later one of its batch, it leaves raw
// (Decoded.raw: Apply decodes it with the authority).
type aheadDecoder struct {
	e     *Engine
	dec   *job.Decoder
	kt    *[]byte // the published key types dec was restored from
	stale bool    // dec learned something the authority may not know
}

// begin prepares for a new batch.
func (a *aheadDecoder) begin() {
	kt := a.e.sharedKeyTypes.Load()
	switch {
	case a.dec == nil || a.stale:
		a.dec = job.NewDecoder(a.e.cfg, a.e.spec, a.e.opts.Schemas)
		fallthrough
	case kt != a.kt:
		if kt != nil {
			// Only adds classes dec does not have: it knows a subset of
			// them (it is not stale), and they never change. Cannot fail
			// (the engine's own encoding, of a decoder of the same job).
			a.dec.RestoreKeyTypes(*kt)
		}
	}
	a.kt, a.stale = kt, false
}

// decode decodes r into d, or leaves it raw for the applying goroutine.
func (a *aheadDecoder) decode(r *Record, d *Decoded) {
	if a.e.naiveDecode {
		Decode(a.dec, r, d) // the negative control: each decoder learns on its own
		return
	}
	if !a.stale {
		learned := a.dec.KeyTypesLearned()
		Decode(a.dec, r, d)
		if d.Err == nil && a.dec.KeyTypesLearned() == learned {
			return
		}
		// A failure without learning fails the same way for the
		// authority, which decodes it again (cheap: bad records are rare).
		a.stale = a.dec.KeyTypesLearned() != learned
	}
	d.raw, d.Record, d.Err, d.ok, d.keyTypes = true, *r, nil, false, nil
}

// worker is one decoding goroutine's steps, made on that goroutine.
type worker[D, P any] struct {
	begin  func()            // before each batch (optional; parallel decoding only)
	decode func(*Record, *D) // each record
	warm   func([]D, *P)     // a full batch (optional)
	close  func()            // when the goroutine ends (optional)
}

// stages are pipeline's steps for records decoded into a D, with a
// read-ahead P per batch.
type stages[D, P any] struct {
	// workers is the number of decoding goroutines: ≤ 1 decodes on the
	// goroutine that runs src.
	workers int
	worker  func() worker[D, P]             // once per decoding goroutine, on it
	install func(*P)                        // before the batch is applied (optional)
	apply   func(context.Context, *D) error // each record, in order, on the calling goroutine
}

// batch is one hand-off of pipeline: records decoded into recs[:n], read
// ahead into pre. With parallel decoding, raw holds copies of the records
// (their bytes in buf) and done says when a decoding goroutine finished.
type batch[D, P any] struct {
	recs []D
	n    int
	pre  P
	raw  []Record
	buf  []byte
	done chan struct{}
}

// pipeline runs src on a goroutine of its own and applies the decoded
// records in order on the calling goroutine, handing them over in bounded
// batches (recycled), each read ahead by the worker's warm and installed
// by st.install before it is applied. With st.workers ≤ 1, src's goroutine
// decodes; otherwise it copies records into batches, which st.workers
// goroutines decode (each batch by one, whole), and the calling goroutine
// applies the batches in the order src yielded them. It returns the first
// error of either side (the others are stopped and waited for).
func pipeline[D, P any](ctx context.Context, src func(yield func(*Record) error) error, st stages[D, P]) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	parallel := st.workers > 1
	n := pipelineDepth + 1
	if parallel {
		n += st.workers
	}
	// order carries batches in input order to the applier; with parallel
	// decoding, work carries them to the decoding goroutines too.
	order := make(chan *batch[D, P], n)
	free := make(chan *batch[D, P], n)
	var work chan *batch[D, P]
	for i := 0; i < n; i++ {
		b := &batch[D, P]{recs: make([]D, pipelineBatchSize)}
		if parallel {
			b.raw, b.done = make([]Record, pipelineBatchSize), make(chan struct{}, 1)
		}
		free <- b
	}
	var wg sync.WaitGroup
	if parallel {
		work = make(chan *batch[D, P], st.workers)
		for i := 0; i < st.workers; i++ {
			wg.Add(1)
			go func() { // owned by pipeline: ends when work is closed, waited for below
				defer wg.Done()
				w := st.worker()
				if w.close != nil {
					defer w.close()
				}
				for b := range work {
					w.begin()
					for i := 0; i < b.n; i++ {
						w.decode(&b.raw[i], &b.recs[i])
					}
					if w.warm != nil {
						w.warm(b.recs[:b.n], &b.pre)
					}
					b.done <- struct{}{}
				}
			}()
		}
	}
	errStopped := errors.New("stopped")
	var srcErr error
	wg.Add(1)
	go func() { // owned by pipeline: stopped by cancel, waited for below
		defer wg.Done()
		defer close(order)
		if parallel {
			defer close(work)
		}
		var w worker[D, P]
		if !parallel {
			w = st.worker()
			if w.close != nil {
				defer w.close()
			}
		}
		var b *batch[D, P]
		send := func() bool {
			if !parallel && w.warm != nil {
				w.warm(b.recs[:b.n], &b.pre)
			}
			select {
			case order <- b:
			case <-ctx.Done():
				return false
			}
			if parallel {
				work <- b // never blocks for long: the workers drain work whatever ctx says
			}
			b = nil
			return true
		}
		srcErr = src(func(r *Record) error {
			if b == nil {
				select {
				case b = <-free:
					b.n, b.buf = 0, b.buf[:0]
				case <-ctx.Done():
					return errStopped
				}
			}
			if parallel {
				b.raw[b.n] = b.copyRecord(r)
			} else {
				w.decode(r, &b.recs[b.n])
			}
			b.n++
			if b.n == len(b.recs) && !send() {
				return errStopped
			}
			return nil
		})
		if srcErr == nil && b != nil && b.n > 0 {
			send()
		}
	}()
	var applyErr error
	for b := range order {
		if parallel {
			<-b.done // the batch is the applier's only once decoded
		}
		if applyErr == nil {
			if st.install != nil {
				st.install(&b.pre)
			}
			for i := 0; i < b.n; i++ {
				if applyErr = st.apply(ctx, &b.recs[i]); applyErr != nil {
					cancel()
					break
				}
			}
		}
		free <- b
	}
	wg.Wait()
	if applyErr != nil {
		return applyErr
	}
	if srcErr != nil && !errors.Is(srcErr, errStopped) {
		return srcErr
	}
	return ctx.Err()
}

// copyRecord returns a copy of r whose bytes are in b.buf (valid until
// the batch is reused). Earlier copies' slices stay valid when buf grows:
// they keep pointing into the old array.
func (b *batch[D, P]) copyRecord(r *Record) Record {
	c := Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	c.Key = b.bytes(r.Key)
	c.Value = b.bytes(r.Value)
	if len(r.Headers) > 0 {
		c.Headers = make([]debezium.Header, len(r.Headers))
		for i, h := range r.Headers {
			c.Headers[i] = debezium.Header{Key: h.Key, Value: b.bytes(h.Value)}
		}
	}
	return c
}

// bytes copies p into b.buf; nil stays nil (a tombstone's value).
func (b *batch[D, P]) bytes(p []byte) []byte {
	if p == nil {
		return nil
	}
	start := len(b.buf)
	b.buf = append(b.buf, p...)
	return b.buf[start:len(b.buf):len(b.buf)]
}

package engine

import (
	"context"
	"errors"
	"sync"

	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/joinstate"
)

const (
	pipelineBatchSize = 256 // records per hand-off
	pipelineDepth     = 4   // batches in flight between the stages
)

// Run applies every record src yields, decoding on one goroutine and
// keying/joining/committing on the calling one, so that two cores overlap.
// While the state does not fit in the row cache, the decoding goroutine
// also reads ahead what each batch of records will need (Warmer), and the
// applying one installs it before applying the batch.
// The hand-off is bounded (pipelineDepth batches of pipelineBatchSize
// records, recycled), so memory stays flat whatever the input size.
//
// src is called once, on the decoding goroutine; it must call yield for each
// record in order and return yield's error if yield fails. The Record passed
// to yield may be reused by src after yield returns. Run returns the first
// error of either stage (the other stage is stopped and waited for); it does
// not commit the final partial batch: call Commit.
func (e *Engine) Run(ctx context.Context, src func(yield func(*Record) error) error) error {
	var dec *job.Decoder
	var wm *Warmer
	defer func() {
		if wm != nil {
			wm.Close()
		}
	}()
	return pipeline(ctx, src, stages[Decoded, joinstate.Prefetch]{
		start:   func() { dec, wm = e.NewDecoder(), e.NewWarmer() },
		decode:  func(r *Record, d *Decoded) { Decode(dec, r, d) },
		warm:    func(recs []Decoded, p *joinstate.Prefetch) { wm.Warm(recs, p) },
		install: e.Install,
		apply:   e.Apply,
	})
}

// stages are pipeline's steps for records decoded into a D, with a
// read-ahead P per batch.
type stages[D, P any] struct {
	start   func()                          // first, on the decoding goroutine
	decode  func(*Record, *D)               // on the decoding goroutine
	warm    func([]D, *P)                   // a full batch, on the decoding goroutine (optional)
	install func(*P)                        // before the batch is applied (optional)
	apply   func(context.Context, *D) error // each record, in order, on the calling goroutine
}

// pipeline runs src on a goroutine of its own, decoding each record into
// a D there (st.start runs first, on that goroutine), and applies the
// decoded records in order on the calling goroutine, handing them over in
// bounded batches (pipelineDepth batches of pipelineBatchSize, recycled),
// each read ahead by st.warm and installed by st.install before it is
// applied. It returns the first error of either side (the other is
// stopped and waited for).
func pipeline[D, P any](ctx context.Context, src func(yield func(*Record) error) error, st stages[D, P]) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type batch struct {
		recs []D
		n    int
		pre  P
	}
	full := make(chan *batch, pipelineDepth)
	free := make(chan *batch, pipelineDepth+1)
	for i := 0; i < pipelineDepth+1; i++ {
		free <- &batch{recs: make([]D, pipelineBatchSize)}
	}
	errStopped := errors.New("stopped")
	var srcErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned by pipeline: stopped by cancel, waited for below
		defer wg.Done()
		defer close(full)
		st.start()
		var b *batch
		send := func() bool {
			if st.warm != nil {
				st.warm(b.recs[:b.n], &b.pre)
			}
			select {
			case full <- b:
				b = nil
				return true
			case <-ctx.Done():
				return false
			}
		}
		srcErr = src(func(r *Record) error {
			if b == nil {
				select {
				case b = <-free:
					b.n = 0
				case <-ctx.Done():
					return errStopped
				}
			}
			st.decode(r, &b.recs[b.n])
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
	for b := range full {
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

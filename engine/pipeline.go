package engine

import (
	"context"
	"errors"
	"sync"

	"github.com/cdcjoin/cdcjoin/joinstate"
)

// pipelineBatch is a unit of work between the two stages of Run.
type pipelineBatch struct {
	recs []Decoded
	n    int
	pre  joinstate.Prefetch // read ahead for recs[:n] (Warmer)
}

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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	full := make(chan *pipelineBatch, pipelineDepth)
	free := make(chan *pipelineBatch, pipelineDepth+1)
	for i := 0; i < pipelineDepth+1; i++ {
		free <- &pipelineBatch{recs: make([]Decoded, pipelineBatchSize)}
	}
	errStopped := errors.New("stopped")
	var srcErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned by Run: stopped by cancel, waited for below
		defer wg.Done()
		defer close(full)
		dec := e.NewDecoder()
		wm := e.NewWarmer()
		defer wm.Close()
		var b *pipelineBatch
		send := func() bool {
			wm.Warm(b.recs[:b.n], &b.pre)
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
			Decode(dec, r, &b.recs[b.n])
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
			e.Install(&b.pre)
			for i := 0; i < b.n; i++ {
				if applyErr = e.Apply(ctx, &b.recs[i]); applyErr != nil {
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

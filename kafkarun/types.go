package kafkarun

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/registry"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/timejoin"
)

// Sampler reads the source topics from their beginning and learns the
// select list's column types: from Kafka Connect schemas, and for records
// without one from their non-NULL values (job.Types: a NULL never decides
// a type). Sinks that create tables use it: the join stage itself only
// sees projected rows, not schemas. A time join's topics are decoded by
// its job.TimeDecoder and its output columns typed alike (window bounds
// are timestamps). Each Sample reads on where the last stopped, so a
// caller can wait for values of columns still unknown. Not safe for
// concurrent use.
type Sampler struct {
	cl      *kgo.Client
	spec    *keyed.Spec
	schemas *registry.Client // nil for JSON
	dec     *job.Decoder
	types   job.Types
	// A plan's decoder and types (spec and dec are nil then).
	pdec   *job.PlanDecoder
	ptypes job.PlanTypes
	// A time join's spec, decoder and scratch record (spec, dec and pdec
	// are nil then; its types are in types).
	ts   *job.TimeSpec
	tdec *job.TimeDecoder
	trec timejoin.Record
	ev   debezium.Event
	hdrs []debezium.Header
}

// NewSampler returns a sampler of cfg's source topics.
func NewSampler(cfg *config.Config) (*Sampler, error) {
	base, err := clientOpts(&cfg.Kafka, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, err
	}
	var spec *keyed.Spec
	var pr *planRun
	var ts *job.TimeSpec
	if cfg.IsTimeJoin() {
		if ts, err = job.TimeJoin(cfg); err != nil {
			return nil, err
		}
	} else if cfg.Plan() != nil {
		pr = newPlanRun(cfg)
	} else if spec, err = job.Spec(cfg); err != nil {
		return nil, err
	}
	topics := sourceTopics(cfg, pr)
	if ts != nil {
		topics = []string{cfg.TimeJoin.Left.Topic, cfg.TimeJoin.Right.Topic}
	}
	cl, err := kgo.NewClient(append(base,
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)...)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: sample types: %w", err)
	}
	schemas, err := job.OpenSchemas(cfg, registry.Options{})
	if err != nil {
		cl.Close()
		return nil, err
	}
	if ts != nil {
		return &Sampler{cl: cl, schemas: schemas, ts: ts, tdec: job.NewTimeDecoder(cfg, ts)}, nil
	}
	if pr != nil {
		return &Sampler{cl: cl, schemas: schemas, pdec: job.NewPlanDecoder(cfg)}, nil
	}
	return &Sampler{cl: cl, spec: spec, schemas: schemas, dec: job.NewDecoder(cfg, spec, schemas)}, nil
}

// Sample reads up to limit more records (fewer when every column's type is
// known, the topics are read to their end, or ctx is done) and returns the
// select list's types in select order (zero entries for columns unknown
// yet).
func (s *Sampler) Sample(ctx context.Context, limit int) []row.ColumnType {
	defer context.AfterFunc(ctx, s.schemas.Close)()
	for n := 0; n < limit && !row.AllKnown(s.output()) && ctx.Err() == nil; {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := s.cl.PollRecords(pctx, 500)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			n++
			s.hdrs = s.hdrs[:0]
			for _, h := range r.Headers {
				s.hdrs = append(s.hdrs, debezium.Header{Key: h.Key, Value: h.Value})
			}
			if s.tdec != nil {
				side := row.Parent
				if s.tdec.Side(r.Topic) == timejoin.SideRight {
					side = row.Child
				}
				if ok, err := s.tdec.Decode(r.Topic, r.Partition, r.Offset, r.Key, r.Value, &s.trec); err == nil && ok {
					s.types.Observe(side, s.tdec.Event())
				}
				return
			}
			if s.pdec != nil {
				for _, it := range s.pdec.Items(r.Topic) {
					if ok, err := s.pdec.Decode(it, r.Topic, r.Partition, r.Offset, r.Key, r.Value, &s.ev); err == nil && ok {
						s.ptypes.Observe(it, &s.ev)
					}
				}
				return
			}
			if side, ok, err := s.dec.DecodeHeaders(r.Topic, r.Partition, r.Offset, r.Key, r.Value, s.hdrs, &s.ev); err == nil && ok {
				s.types.Observe(side, &s.ev)
			}
		})
		if fs.Empty() && ctx.Err() == nil && pctx.Err() == nil {
			break
		}
	}
	return s.output()
}

func (s *Sampler) output() []row.ColumnType {
	if s.ts != nil {
		return s.types.TimeOutput(s.ts)
	}
	if s.pdec != nil {
		return s.ptypes.Output(s.pdec.Plan())
	}
	return s.types.Output(s.spec)
}

// Close closes the sampler's client and schema source.
func (s *Sampler) Close() {
	s.cl.Close()
	s.schemas.Close()
}

// SampleTypes samples the source topics' first limit records at most (see
// Sampler). It blocks for at most the context's deadline and reads nothing
// else; errors are connection errors.
func SampleTypes(ctx context.Context, cfg *config.Config, limit int) ([]row.ColumnType, error) {
	s, err := NewSampler(cfg)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Sample(ctx, limit), nil
}

package bench

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// NullSink is a sink that does the encoding work of a real one and then
// drops the bytes: every change is encoded as a JSON line (row.Change
// AppendJSON, the JSONL sink's format) and appended to ClickHouse-like
// column buffers (fixed-width little-endian numbers, length-prefixed
// strings, a null flag per value, version and sign columns). Like the
// ClickHouse sink, which sends a batch when it holds clickhouse.batch.rows
// rows, it discards the buffers every nullSinkBatch rows (a bulk load emits
// millions of rows before its one Flush), and on Flush. Safe for use by one
// goroutine at a time.
type NullSink struct {
	names   []string
	json    []byte
	cols    [][]byte
	ver     []byte
	sign    []byte
	bytes   uint64
	rows    uint64
	pending int // rows in the buffers
}

// nullSinkBatch is the ClickHouse sink's default batch.rows.
const nullSinkBatch = 50000

var _ sink.Sink = (*NullSink)(nil)

// NewNullSink returns a null sink for the select output names.
func NewNullSink(names []string) *NullSink {
	return &NullSink{names: names, cols: make([][]byte, len(names))}
}

// Write encodes changes.
func (s *NullSink) Write(_ context.Context, cs []row.Change) error {
	for i := range cs {
		c := &cs[i]
		s.json = c.AppendJSON(s.json, s.names)
		s.json = append(s.json, '\n')
		for j, v := range c.Values {
			if j < len(s.cols) {
				s.cols[j] = appendColumn(s.cols[j], v)
			}
		}
		s.ver = binary.LittleEndian.AppendUint64(s.ver, c.Version)
		sign := byte(1)
		if c.Op == row.Retract {
			sign = 0xff
		}
		s.sign = append(s.sign, sign)
		s.rows++
		if s.pending++; s.pending >= nullSinkBatch {
			s.drop()
		}
	}
	return nil
}

// appendColumn appends v in a ClickHouse-native-like layout.
func appendColumn(b []byte, v row.Value) []byte {
	switch v.Kind {
	case row.KindNull, row.KindUnavailable:
		return append(b, 1)
	case row.KindInt, row.KindBool, row.KindDate, row.KindTimestamp, row.KindTime:
		return binary.LittleEndian.AppendUint64(append(b, 0), uint64(v.Int))
	case row.KindFloat:
		return binary.LittleEndian.AppendUint64(append(b, 0), math.Float64bits(v.Float))
	default:
		b = binary.AppendUvarint(append(b, 0), uint64(len(v.Str)))
		return append(b, v.Str...)
	}
}

// Flush drops the encoded buffers, counting their bytes.
func (s *NullSink) Flush(context.Context) error {
	s.drop()
	return nil
}

func (s *NullSink) drop() {
	s.bytes += uint64(len(s.json) + len(s.ver) + len(s.sign))
	for i := range s.cols {
		s.bytes += uint64(len(s.cols[i]))
		s.cols[i] = s.cols[i][:0]
	}
	s.json, s.ver, s.sign = s.json[:0], s.ver[:0], s.sign[:0]
	s.pending = 0
}

// Close does nothing.
func (s *NullSink) Close() error { return nil }

// Stats reports rows and encoded bytes flushed.
func (s *NullSink) Stats() sink.Stats {
	return sink.Stats{Rows: s.rows, Bytes: s.bytes, Changes: s.rows}
}

// probes tracks latency probes: the driver registers each probe's send
// time; the probe sink records send → acknowledgement latencies into the
// histogram of the phase the probe was sent in. Safe for concurrent use.
type probes struct {
	sent  [probeRing]atomic.Int64 // send time, unix ns (0: none)
	phase [probeRing]atomic.Int32
	seq   atomic.Int64

	mu     sync.Mutex
	hists  map[int]*Histogram
	maxLat atomic.Int64 // max latency since the last take (timeline)
}

const probeRing = 1 << 16

func newProbes() *probes { return &probes{hists: map[int]*Histogram{}} }

// probeChildren is how many child ids the probes cycle through: the probe
// parent keeps at most this many children (it must not turn into a hot
// parent itself), each probe updating one with its sequence number in its
// name.
const probeChildren = 1024

// next reserves a probe sent at t during phase; it returns the probe's
// child id and domain name (which carries its sequence number).
func (p *probes) next(t time.Time, phase int) (int64, string) {
	s := p.seq.Add(1) - 1
	p.sent[s%probeRing].Store(t.UnixNano())
	p.phase[s%probeRing].Store(int32(phase))
	return probeChild0 + s%probeChildren, "probe-" + strconv.FormatInt(s, 10) + ".example.com"
}

// probeSeq returns the sequence number of a probe row (its domain name),
// or -1.
func probeSeq(c *row.Change) int64 {
	ck := c.ChildKey
	if len(ck) != 1 || ck[0].Kind != row.KindInt || ck[0].Int < probeChild0 || ck[0].Int >= probeChild0+probeChildren || c.Op != row.Upsert || len(c.Values) < 5 {
		return -1
	}
	name := strings.TrimSuffix(strings.TrimPrefix(c.Values[4].Str, "probe-"), ".example.com")
	s, err := strconv.ParseInt(name, 10, 64)
	if err != nil {
		return -1
	}
	return s
}

// acked records probes (sequence numbers) acknowledged at t.
func (p *probes) acked(ids []int64, t time.Time) {
	if len(ids) == 0 {
		return
	}
	now := t.UnixNano()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range ids {
		if s < 0 || s >= p.seq.Load() || p.seq.Load()-s > probeRing {
			continue // unknown, or overwritten in the ring
		}
		sent := p.sent[s%probeRing].Load()
		if sent == 0 {
			continue
		}
		ph := int(p.phase[s%probeRing].Load())
		h := p.hists[ph]
		if h == nil {
			h = &Histogram{}
			p.hists[ph] = h
		}
		lat := now - sent
		h.Record(lat)
		for {
			m := p.maxLat.Load()
			if lat <= m || p.maxLat.CompareAndSwap(m, lat) {
				break
			}
		}
	}
}

// hist returns a copy of phase's histogram.
func (p *probes) hist(phase int) Histogram {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.hists[phase]; h != nil {
		return *h
	}
	return Histogram{}
}

// probeSink wraps a sink: it counts output rows and notices probe rows in
// Write, and reports them acknowledged after the inner Flush returns. It
// serializes nothing itself: callers follow the inner sink's rules.
type probeSink struct {
	inner   sink.Sink
	p       *probes
	out     *atomic.Uint64
	pending []int64
	fenced  []fenceSeen
	hotRows int64
	mu      sync.Mutex // guards pending, fenced, hotRows (Kafka runtime: one sink per partition)
	// fences, if set (Kafka pipeline), tracks the phase-completion fence
	// rows (kafka.go).
	fences *fences
	// hot, if set, counts the hot parent's rows of a storm's last rename
	// (hotkeys.go).
	hot *hotWatch
}

func (s *probeSink) Write(ctx context.Context, cs []row.Change) error {
	var found []int64
	var fenced []fenceSeen
	var hot int64
	for i := range cs {
		if s.fences != nil {
			if fs, fence, ok := s.fences.seen(&cs[i]); fence {
				if ok {
					fenced = append(fenced, fs)
				}
				continue
			}
		}
		if s.hot != nil && s.hot.match(&cs[i]) {
			hot++
		}
		if seq := probeSeq(&cs[i]); seq >= 0 {
			found = append(found, seq)
		}
	}
	if len(found) > 0 || len(fenced) > 0 || hot > 0 {
		s.mu.Lock()
		s.pending = append(s.pending, found...)
		s.fenced = append(s.fenced, fenced...)
		s.hotRows += hot
		s.mu.Unlock()
	}
	s.out.Add(uint64(len(cs)))
	return s.inner.Write(ctx, cs)
}

func (s *probeSink) Flush(ctx context.Context) error {
	s.mu.Lock()
	ids, fenced, hot := s.pending, s.fenced, s.hotRows
	s.pending, s.fenced, s.hotRows = nil, nil, 0
	s.mu.Unlock()
	if err := s.inner.Flush(ctx); err != nil {
		return err
	}
	s.p.acked(ids, time.Now())
	if s.fences != nil {
		s.fences.acked(fenced)
	}
	if s.hot != nil {
		s.hot.acked(hot)
	}
	return nil
}

func (s *probeSink) Close() error { return s.inner.Close() }

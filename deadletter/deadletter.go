// Package deadletter is the bad-record policy both drivers share. A record
// that cannot be decoded or keyed (malformed JSON, unknown op, type
// mismatch, oversized, NULL key, …) either stops the job — policy stop, the
// default: the error names topic/partition/offset and nothing past the
// record is committed — or, under policy dlq, is written with its
// provenance to a dead-letter destination (a Kafka topic for `run`, a file
// for `replay`) and counted. Nothing is dropped silently.
package deadletter

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/cdcjoin/cdcjoin/row"
)

// Provenance headers of a dead-lettered record.
const (
	HeaderSourceTopic     = "cdcjoin.source.topic"
	HeaderSourcePartition = "cdcjoin.source.partition"
	HeaderSourceOffset    = "cdcjoin.source.offset"
	HeaderError           = "cdcjoin.error"
	HeaderStage           = "cdcjoin.stage"
	// A late record (a time join's input behind the watermark) carries
	// the reason "late", its event time and the watermark it was judged
	// against (RFC 3339, microseconds, UTC).
	HeaderReason    = "cdcjoin.reason"
	HeaderTime      = "cdcjoin.record.time"
	HeaderWatermark = "cdcjoin.watermark"
)

// Late says why a late record is bad: its event time and the join's
// watermark just before it (µs since the epoch).
type Late struct {
	Time, Watermark int64
}

// ReasonLate is a late record's Kind and reason.
const ReasonLate = "late"

// FormatTime renders µs since the epoch as RFC 3339 with microseconds.
func FormatTime(us int64) string {
	switch us {
	case math.MinInt64:
		return "-infinity"
	case math.MaxInt64:
		return "infinity"
	}
	return time.UnixMicro(us).UTC().Format("2006-01-02T15:04:05.000000Z")
}

// Header is one record header.
type Header struct {
	Key   string
	Value []byte
}

// Letter is one bad record with where it came from and what was wrong.
type Letter struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte   // nil for a tombstone
	Headers   []Header // the record's own headers
	Stage     string   // the stage that rejected it: "keying", "replay", …
	Kind      string   // error kind, a metric label ("malformed", "key", "late", …)
	Err       error
	// Late is set for a late record (Kind ReasonLate).
	Late *Late
}

// ProvenanceHeaders returns the record's own headers followed by the
// provenance headers (source topic, partition, offset, error, stage).
func (l *Letter) ProvenanceHeaders() []Header {
	h := append([]Header(nil), l.Headers...)
	h = append(h,
		Header{HeaderSourceTopic, []byte(l.Topic)},
		Header{HeaderSourcePartition, strconv.AppendInt(nil, int64(l.Partition), 10)},
		Header{HeaderSourceOffset, strconv.AppendInt(nil, l.Offset, 10)},
		Header{HeaderError, []byte(l.Err.Error())},
		Header{HeaderStage, []byte(l.Stage)},
	)
	if l.Late != nil {
		h = append(h,
			Header{HeaderReason, []byte(ReasonLate)},
			Header{HeaderTime, []byte(FormatTime(l.Late.Time))},
			Header{HeaderWatermark, []byte(FormatTime(l.Late.Watermark))},
		)
	}
	return h
}

// Writer is a dead-letter destination. DeadLetter must make the letter
// part of the caller's unit of work (the same Kafka transaction, or a file
// written before the state commits); it must not keep l's slices.
type Writer interface {
	DeadLetter(ctx context.Context, l *Letter) error
}

// Policy applies errors.policy: Writer nil is policy stop.
type Policy struct {
	Writer Writer
}

// Handle applies the policy to l: under stop it returns l.Err; under dlq it
// writes l and returns nil, or the write's error (wrapped), which is fatal.
func (p Policy) Handle(ctx context.Context, l *Letter) error {
	if p.Writer == nil {
		return l.Err
	}
	if err := p.Writer.DeadLetter(ctx, l); err != nil {
		return fmt.Errorf("cdcjoin: dead-letter record %s/%d@%d: %w", l.Topic, l.Partition, l.Offset, err)
	}
	return nil
}

// JSONL writes letters as JSON lines (`replay --bad-records`):
//
//	{"topic":"…","partition":0,"offset":12,"stage":"replay","error":"…","key":"…","value":"…"}
//
// A late record also has "reason":"late", "time" and "watermark" (RFC
// 3339, microseconds) before "key".
//
// key and value are the raw bytes as JSON strings (null for nil). Not safe
// for concurrent use.
type JSONL struct {
	w   io.Writer
	buf []byte
}

// NewJSONL returns a writer of letters to w (which it does not close).
func NewJSONL(w io.Writer) *JSONL { return &JSONL{w: w} }

// DeadLetter implements Writer.
func (j *JSONL) DeadLetter(_ context.Context, l *Letter) error {
	b := append(j.buf[:0], `{"topic":`...)
	b = row.AppendJSONString(b, l.Topic)
	b = append(b, `,"partition":`...)
	b = strconv.AppendInt(b, int64(l.Partition), 10)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, l.Offset, 10)
	b = append(b, `,"stage":`...)
	b = row.AppendJSONString(b, l.Stage)
	b = append(b, `,"error":`...)
	b = row.AppendJSONString(b, l.Err.Error())
	if l.Late != nil {
		b = append(b, `,"reason":"late","time":"`...)
		b = append(b, FormatTime(l.Late.Time)...)
		b = append(b, `","watermark":"`...)
		b = append(b, FormatTime(l.Late.Watermark)...)
		b = append(b, '"')
	}
	b = append(b, `,"key":`...)
	b = appendBytes(b, l.Key)
	b = append(b, `,"value":`...)
	b = appendBytes(b, l.Value)
	b = append(b, "}\n"...)
	j.buf = b
	_, err := j.w.Write(b)
	return err
}

func appendBytes(b, v []byte) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	return row.AppendJSONString(b, string(v))
}

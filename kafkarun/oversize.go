package kafkarun

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/deadletter"
	"github.com/cdcjoin/cdcjoin/row"
)

// Brokers reject a record batch larger than its topic's max.message.bytes
// (MESSAGE_TOO_LARGE), and inside a transaction one rejected record aborts
// the whole transaction: the keying stage would stop on every retry. So the
// keying stage learns each topic it writes to's limit at setup, never
// builds a batch beyond it, dead-letters a truncated copy of a record too
// large for the dead-letter topic, and treats a source record whose keyed
// record would not fit as a bad record ("oversized").

// defaultMaxMessageBytes is Kafka's default max.message.bytes, assumed for
// a topic whose configuration cannot be read.
const defaultMaxMessageBytes = 1048588

// recordOverhead bounds what a batch of one record adds to the record's
// key, value and headers (the batch header is 61 bytes; record framing and
// varints a few more).
const recordOverhead = 256

// Headers a dead letter carries when its payload was cut to fit the
// dead-letter topic.
const (
	// HeaderTruncated lists what was cut: "value", "key,value", and
	// "headers" when the source record's own headers were dropped.
	HeaderTruncated = "cdcjoin.truncated"
	// HeaderKeyBytes and HeaderValueBytes are the original sizes.
	HeaderKeyBytes   = "cdcjoin.original.key.bytes"
	HeaderValueBytes = "cdcjoin.original.value.bytes"
	// HeaderValueSHA256 is the hex SHA-256 of the original value, to tell
	// the record from others at the same source position after a rewrite.
	HeaderValueSHA256 = "cdcjoin.original.value.sha256"
)

// messageLimits returns max.message.bytes of each topic (its own setting or
// the broker's default); a topic whose configuration cannot be read gets
// Kafka's default, with a warning.
func messageLimits(ctx context.Context, adm *kadm.Client, log *slog.Logger, topics ...string) map[string]int {
	out := make(map[string]int, len(topics))
	for _, t := range topics {
		out[t] = defaultMaxMessageBytes
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		log.Warn("cannot read the topics' max.message.bytes; assuming Kafka's default", "topics", topics, "default", defaultMaxMessageBytes, "err", err)
		return out
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			log.Warn("cannot read a topic's max.message.bytes; assuming Kafka's default", "topic", rc.Name, "default", defaultMaxMessageBytes, "err", rc.Err)
			continue
		}
		for _, c := range rc.Configs {
			if c.Key != "max.message.bytes" || c.Value == nil {
				continue
			}
			if n, err := strconv.Atoi(*c.Value); err == nil && n > 0 {
				out[rc.Name] = n
			}
		}
	}
	return out
}

// batchLimit returns the producer's batch limit for topic: the topic's
// max.message.bytes when known, else franz-go's default.
func batchLimit(limits map[string]int) func(string) int32 {
	return func(topic string) int32 {
		if n, ok := limits[topic]; ok {
			return int32(n)
		}
		return 1000012
	}
}

// deadLetterWithin returns the dead-letter record of l (see
// DeadLetterRecord) for topic, cut to fit a batch of limit bytes: when the
// record with its provenance headers is larger, the source record's own
// headers are dropped, then the value and if need be the key are
// truncated, and headers say what was cut, the original sizes and the
// value's SHA-256.
func deadLetterWithin(l *deadletter.Letter, topic string, limit int) *kgo.Record {
	d := DeadLetterRecord(l, topic)
	if recordSize(d)+recordOverhead <= limit {
		return d
	}
	var cut []string
	if len(l.Headers) > 0 {
		cut = append(cut, "headers")
	}
	sum := sha256.Sum256(l.Value)
	h := append([]kgo.RecordHeader(nil), d.Headers[len(l.Headers):]...) // provenance only
	h = append(h,
		kgo.RecordHeader{Key: HeaderKeyBytes, Value: strconv.AppendInt(nil, int64(len(l.Key)), 10)},
		kgo.RecordHeader{Key: HeaderValueBytes, Value: strconv.AppendInt(nil, int64(len(l.Value)), 10)},
		kgo.RecordHeader{Key: HeaderValueSHA256, Value: []byte(hex.EncodeToString(sum[:]))},
		kgo.RecordHeader{Key: HeaderTruncated, Value: []byte("headers,key,value")}, // the longest; set below
	)
	room := max(limit-recordOverhead-headersSize(h), 0)
	key, value := l.Key, l.Value
	if len(key) > room/2 {
		key = key[:room/2]
		cut = append(cut, "key")
	}
	if n := room - len(key); len(value) > n {
		value = value[:n]
		cut = append(cut, "value")
	}
	h[len(h)-1].Value = []byte(strings.Join(cut, ","))
	d.Key, d.Value, d.Headers = key, value, h
	return d
}

func recordSize(r *kgo.Record) int {
	return len(r.Key) + len(r.Value) + headersSize(r.Headers)
}

func headersSize(h []kgo.RecordHeader) int {
	n := 0
	for _, x := range h {
		n += len(x.Key) + len(x.Value) + 10
	}
	return n
}

// keyedSize estimates, before keying it, the size of the largest record
// that keying a decoded event produces (the keyed record, or the index
// changelog record, both of which carry the projected row): the projected
// row, the source key and framing.
func keyedSize(after []row.Value, key []byte, scratch []byte) (int, []byte) {
	scratch = row.AppendRow(scratch[:0], after)
	return len(scratch) + 2*len(key) + recordOverhead, scratch
}

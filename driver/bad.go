package driver

import (
	"context"
	"errors"

	"github.com/cdcjoin/cdcjoin/deadletter"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/internal/cerr"
	"github.com/cdcjoin/cdcjoin/keyed"
)

// The bad-record step both drivers take for a source record they cannot
// use: classify its error (Bad), then apply the job's policy to it
// (HandleBad: stop with the error, which names the record, or send its
// dead letter). Every other error (state, sink, Kafka) is fatal and never
// reaches here.

// Source is a source record as the bad-record step sees it: where it came
// from, and its bytes (for the dead letter).
type Source struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []deadletter.Header
}

// Bad is a bad record's error and its kind (a metric label and the dead
// letter's): a decoder's DecodeError kind ("malformed", "type", …),
// "decode" for other decoder errors, "key" for a record the keyer cannot
// key, "oversized".
type Bad struct {
	Kind string
	Err  error
}

func (b *Bad) Error() string { return b.Err.Error() }
func (b *Bad) Unwrap() error { return b.Err }

// BadDecode classifies a decoder's error (job.Decoder.Decode's, which
// names the record's position): a bad record, unless the decoder's schema
// source failed (a *debezium.SourceError: the schema registry, not the
// record; ok false, the error is fatal).
func BadDecode(err error) (b *Bad, ok bool) {
	var se *debezium.SourceError
	if errors.As(err, &se) {
		return nil, false
	}
	var de *debezium.DecodeError
	if errors.As(err, &de) {
		return &Bad{Kind: de.Kind.String(), Err: err}, true
	}
	return &Bad{Kind: "decode", Err: err}, true
}

// BadKey classifies a keyer's error for the record at src: a
// *keyed.KeyError is a bad record of kind "key", named by src's position;
// any other error is not a bad record (ok false).
func BadKey(err error, src *Source) (b *Bad, ok bool) {
	var ke *keyed.KeyError
	if !errors.As(err, &ke) {
		return nil, false
	}
	return &Bad{Kind: "key", Err: cerr.Wrap(err, "bad record at %s/%d@%d", src.Topic, src.Partition, src.Offset)}, true
}

// HandleBad applies policy to the bad record b at src, rejected by stage:
// under stop it returns b's error; under dlq it writes the dead letter
// (with src's bytes and headers) and returns nil, or the write's error.
func HandleBad(ctx context.Context, policy deadletter.Policy, stage string, src *Source, b *Bad) error {
	l := deadletter.Letter{Topic: src.Topic, Partition: src.Partition, Offset: src.Offset,
		Key: src.Key, Value: src.Value, Headers: src.Headers, Stage: stage, Kind: b.Kind, Err: b.Err}
	return policy.Handle(ctx, &l)
}

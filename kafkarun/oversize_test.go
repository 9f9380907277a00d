package kafkarun_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/deadletter"
	"github.com/cdcjoin/cdcjoin/kafkarun"
)

// bigRecords returns two users records a broker with default settings
// cannot take: a 12 MiB one (more than errors.max_record_bytes: an
// oversized record) and a 2 MiB create whose projected firstname alone
// exceeds the keyed topic's max.message.bytes.
func bigRecords() []cdcgen.Record {
	huge := strings.Repeat("h", 12<<20)
	long := strings.Repeat("l", 2<<20)
	return []cdcgen.Record{
		{Topic: cdcgen.DefaultParentTopic, Partition: 0, Key: []byte(`{"id":999998}`),
			Value: []byte(`{"before":null,"after":{"id":999998,"firstname":"` + huge + `","lastname":"x"},"source":{},"op":"c","ts_ms":1}`)},
		{Topic: cdcgen.DefaultParentTopic, Partition: 1, Key: []byte(`{"id":999999}`),
			Value: []byte(`{"before":null,"after":{"id":999999,"firstname":"` + long + `","lastname":"y"},"source":{},"op":"c","ts_ms":1}`)},
	}
}

// allowLargeSource lets the users topic hold 16 MiB records (as a Debezium
// deployment with large rows would set it) and produces recs with a
// client that can send them.
func allowLargeSource(t *testing.T, c interface{ ListenAddrs() []string }, recs []cdcgen.Record) {
	t.Helper()
	adm := kadm.NewClient(mustClient(t, c))
	v := strconv.Itoa(16 << 20)
	rs, err := adm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Name: "max.message.bytes", Value: &v}}, cdcgen.DefaultParentTopic)
	if err == nil {
		err = rs[0].Err
	}
	if err != nil {
		t.Fatalf("alter %s: %v", cdcgen.DefaultParentTopic, err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(16<<20), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range recs {
		r := &recs[i]
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value}).FirstErr(); err != nil {
			t.Fatalf("produce a %d-byte record: %v", len(r.Value), err)
		}
	}
}

// TestOversizedDeadLettered: under policy dlq, a record larger than the
// dead-letter topic accepts is dead-lettered truncated, with headers that
// say so and its provenance; a record whose keyed record would exceed the
// keyed topic's limit is dead-lettered as oversized; the run goes on and
// the output equals the oracle (before: run died with MESSAGE_TOO_LARGE).
func TestOversizedDeadLettered(t *testing.T) {
	h := smallHistory(t, 51, 1000)
	c := newCluster(t, 3)
	third := len(h.Records) / 3
	produce(t, c.ListenAddrs(), h.Records[:third])
	allowLargeSource(t, c, bigRecords())
	produce(t, c.ListenAddrs(), h.Records[third:])
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir(), policy: "dlq", dlq: "user_domains.dlq"})
	runToOracle(t, cfg, h)
	got := readTopic(t, c, "user_domains.dlq", 2)
	for _, r := range got {
		hd := map[string]string{}
		for _, x := range r.Headers {
			hd[x.Key] = string(x.Value)
		}
		size := len(r.Key) + len(r.Value)
		t.Logf("dead letter %s/%s@%s: %d bytes kept of %s, truncated %q: %s", hd[deadletter.HeaderSourceTopic],
			hd[deadletter.HeaderSourcePartition], hd[deadletter.HeaderSourceOffset], size, hd[kafkarun.HeaderValueBytes], hd[kafkarun.HeaderTruncated], hd[deadletter.HeaderError])
		if hd[deadletter.HeaderSourceTopic] != cdcgen.DefaultParentTopic || hd[deadletter.HeaderSourceOffset] == "" || hd[deadletter.HeaderStage] != "keying" {
			t.Errorf("dead letter lacks provenance: %v", hd)
		}
		if !strings.Contains(hd[deadletter.HeaderError], "oversized") {
			t.Errorf("error header %q does not say oversized", hd[deadletter.HeaderError])
		}
		if hd[kafkarun.HeaderTruncated] != "value" || hd[kafkarun.HeaderValueSHA256] == "" || size > 1<<20 {
			t.Errorf("dead letter of %d bytes: truncated %q, sha256 %q", size, hd[kafkarun.HeaderTruncated], hd[kafkarun.HeaderValueSHA256])
		}
		orig, _ := strconv.Atoi(hd[kafkarun.HeaderValueBytes])
		if orig < 2<<20 || !strings.HasPrefix(`{"before":null,"after":{"id":99999`, string(r.Value[:20])) {
			t.Errorf("original size %d, value starts %q", orig, r.Value[:20])
		}
	}
}

// TestOversizedStop: under policy stop, a record whose keyed record would
// exceed the keyed topic's max.message.bytes stops the run with an error
// naming the record, the limit and what to do.
func TestOversizedStop(t *testing.T) {
	c := newCluster(t, 3)
	allowLargeSource(t, c, bigRecords()[1:])
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir()})
	in := start(t, cfg, newModel().sink())
	select {
	case <-in.done:
	case <-time.After(60 * time.Second):
		in.stop(t)
		t.Fatal("Run did not stop on an oversized record")
	}
	want := fmt.Sprintf("%s/1@0", cdcgen.DefaultParentTopic)
	if in.err == nil || !strings.Contains(in.err.Error(), want) || !strings.Contains(in.err.Error(), "max.message.bytes") {
		t.Fatalf("Run: %v; want an error naming %s and max.message.bytes", in.err, want)
	}
	t.Logf("stopped with: %v", in.err)
}

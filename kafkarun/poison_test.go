package kafkarun_test

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/deadletter"
)

// poisons returns three bad users records: malformed JSON, an unknown op,
// and a value of the wrong type for its schema.
func poisons(t *testing.T, h *cdcgen.History) []cdcgen.Record {
	t.Helper()
	var typed cdcgen.Record
	for _, r := range h.Records {
		if r.Topic == cdcgen.DefaultParentTopic && r.Op == 'c' && bytes.HasPrefix(r.Value, []byte(`{"schema"`)) &&
			bytes.Contains(r.Value, []byte(`"firstname":"`)) {
			typed = r
			break
		}
	}
	if typed.Value == nil {
		t.Fatal("no schema-on users insert in the history")
	}
	typed.Value = bytes.Replace(typed.Value, []byte(`"firstname":"`), []byte(`"firstname":123,"x":"`), 1)
	key := []byte(`{"id":999999}`)
	return []cdcgen.Record{
		{Topic: cdcgen.DefaultParentTopic, Partition: 0, Key: key, Value: []byte(`{"op":"c","after":{"id":`)},
		{Topic: cdcgen.DefaultParentTopic, Partition: 1, Key: key, Value: []byte(`{"before":null,"after":{"id":999999,"firstname":"a","lastname":"b"},"source":{},"op":"x","ts_ms":1}`)},
		{Topic: cdcgen.DefaultParentTopic, Partition: typed.Partition, Key: typed.Key, Value: typed.Value},
	}
}

// withPoisons inserts the poison records after the snapshot-ish first
// third of the history.
func withPoisons(h *cdcgen.History, ps []cdcgen.Record) []cdcgen.Record {
	at := len(h.Records) / 3
	out := append([]cdcgen.Record(nil), h.Records[:at]...)
	out = append(out, ps...)
	return append(out, h.Records[at:]...)
}

// TestPoisonStop: under policy stop, Run halts with an error naming the
// record, and the keying group's committed offset does not pass it.
func TestPoisonStop(t *testing.T) {
	h := smallHistory(t, 11, 1000)
	c := newCluster(t, 3)
	ps := poisons(t, h)[:1]
	produce(t, c.ListenAddrs(), h.Records[:len(h.Records)/3])
	adm := kadm.NewClient(mustClient(t, c))
	ends, err := adm.ListEndOffsets(context.Background(), cdcgen.DefaultParentTopic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(cdcgen.DefaultParentTopic, 0)
	poisonOffset := end.Offset
	produce(t, c.ListenAddrs(), append(ps, h.Records[len(h.Records)/3:]...))
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir()})
	in := start(t, cfg, newModel().sink())
	select {
	case <-in.done:
	case <-time.After(60 * time.Second):
		in.stop(t)
		t.Fatal("Run did not stop on a poison record")
	}
	want := "dbserver1.public.users/0@" + itoa(poisonOffset)
	if in.err == nil || !strings.Contains(in.err.Error(), want) || !strings.Contains(in.err.Error(), "malformed") {
		t.Fatalf("Run error = %v, want one naming %s and the reason", in.err, want)
	}
	offs, err := adm.FetchOffsets(context.Background(), cfg.Kafka.KeyingGroup())
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup(cdcgen.DefaultParentTopic, 0); ok && o.At > poisonOffset {
		t.Fatalf("committed offset %d is past the poison record at %d", o.At, poisonOffset)
	}
	t.Logf("stopped with: %v", in.err)
}

// TestPoisonDLQ: under policy dlq, bad records go to the dead-letter topic
// with provenance headers and the output still equals the oracle.
func TestPoisonDLQ(t *testing.T) {
	h := smallHistory(t, 12, 1000)
	c := newCluster(t, 3)
	produce(t, c.ListenAddrs(), withPoisons(h, poisons(t, h)))
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir(), policy: "dlq", dlq: "user_domains.dlq"})
	runToOracle(t, cfg, h)
	got := readTopic(t, c, "user_domains.dlq", 3)
	kinds := map[string]bool{}
	for _, r := range got {
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		if h[deadletter.HeaderSourceTopic] != cdcgen.DefaultParentTopic || h[deadletter.HeaderSourcePartition] == "" ||
			h[deadletter.HeaderSourceOffset] == "" || h[deadletter.HeaderStage] != "keying" || h[deadletter.HeaderError] == "" {
			t.Errorf("dead letter lacks provenance: %v", h)
		}
		for _, k := range []string{"malformed", "unknown_op", "type_mismatch"} {
			if strings.Contains(h[deadletter.HeaderError], k) {
				kinds[k] = true
			}
		}
		t.Logf("dead letter: %s", h[deadletter.HeaderError])
	}
	if len(kinds) != 3 {
		t.Errorf("error kinds seen %v, want malformed, unknown_op, type_mismatch", kinds)
	}
}

func mustClient(t *testing.T, c interface{ ListenAddrs() []string }) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// runToOracle runs the job until its output equals h's oracle join, then
// stops it.
func runToOracle(t *testing.T, cfg *config.Config, h *cdcgen.History) {
	t.Helper()
	m := newModel()
	in := start(t, cfg, m.sink())
	diff, err := m.waitEqual(oracle(h, false), 60*time.Second, in)
	if serr := in.stop(t); serr != nil {
		t.Fatalf("Run: %v", serr)
	}
	if err != nil || diff != "" {
		t.Fatalf("%v\n%s", err, diff)
	}
}

// readTopic reads the first n committed records of topic (failing the test
// when there are fewer within 20 s, or more).
func readTopic(t *testing.T, c interface{ ListenAddrs() []string }, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(got) < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	if len(got) != n {
		t.Fatalf("%s has %d records, want %d", topic, len(got), n)
	}
	return got
}

// TestImpossibleKeysDeadLettered: records without schemas whose keys no
// row can have — a child's foreign key 71.5 and parent ids 34.5 and 1e30
// where the key columns hold integers — are bad records under the policy
// (here dlq: dead-lettered as type mismatches), and the output equals the
// oracle. Before, they were keyed as decimal keys: the child's row was
// lost silently, and the parents were rows no child could join.
func TestImpossibleKeysDeadLettered(t *testing.T) {
	h := smallHistory(t, 13, 1000)
	var bad []cdcgen.Record
	fk := regexp.MustCompile(`"user_id":\d+`)
	id := regexp.MustCompile(`"id":\d+`)
	for _, r := range h.Records[len(h.Records)/3:] {
		if r.Op != 'c' || bytes.HasPrefix(r.Value, []byte(`{"schema"`)) {
			continue
		}
		switch {
		case r.Topic == cdcgen.DefaultChildTopic && len(bad) == 0 && fk.Match(r.Value):
			r.Value = fk.ReplaceAll(r.Value, []byte(`"user_id":71.5`))
		case r.Topic == cdcgen.DefaultParentTopic && len(bad) == 1:
			r.Key, r.Value = id.ReplaceAll(r.Key, []byte(`"id":34.5`)), id.ReplaceAll(r.Value, []byte(`"id":34.5`))
		case r.Topic == cdcgen.DefaultParentTopic && len(bad) == 2:
			r.Key, r.Value = id.ReplaceAll(r.Key, []byte(`"id":1e30`)), id.ReplaceAll(r.Value, []byte(`"id":1e30`))
		default:
			continue
		}
		bad = append(bad, r)
		if len(bad) == 3 {
			break
		}
	}
	if len(bad) != 3 {
		t.Fatalf("found %d schemaless creates to spoil, want 3", len(bad))
	}
	c := newCluster(t, 3)
	produce(t, c.ListenAddrs(), withPoisons(h, bad))
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: t.TempDir(), policy: "dlq", dlq: "user_domains.dlq"})
	runToOracle(t, cfg, h)
	for _, r := range readTopic(t, c, "user_domains.dlq", 3) {
		for _, x := range r.Headers {
			if x.Key == deadletter.HeaderError {
				if !strings.Contains(string(x.Value), "type_mismatch") || !strings.Contains(string(x.Value), "integers") {
					t.Errorf("dead letter %s: want a type mismatch naming integers", x.Value)
				}
				t.Logf("dead letter: %s", x.Value)
			}
		}
	}
}

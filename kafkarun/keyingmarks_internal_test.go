package kafkarun

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/internal/testenv"
)

// TestReadPartitionMark: on the real broker, a changelog partition whose
// last stable offset stands before a transaction's records (the
// transaction left open here: what a committed transaction looks like to
// a reader until its commit marker is written) is read by readPartition
// to the last stable offset alone without a mark (3 of 5 records: the
// restore that left an index behind its committed offsets), and through
// the transaction's records, once they are committed, with a mark past
// them. The reader signals when it has read what is stable; only then is
// the transaction committed, so a reader that does not wait for the mark
// returns 3 records and fails. A mark past the log's end is ignored.
func TestReadPartitionMark(t *testing.T) {
	brokers := strings.Split(testenv.Require(t, testenv.KafkaEnv, "Kafka"), ",")
	topic := fmt.Sprintf("cdcjoin-readmark-%d", time.Now().UnixNano())
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	if _, err := adm.CreateTopic(ctx, 1, -1, nil, topic); err != nil {
		t.Fatal(err)
	}
	defer adm.DeleteTopics(ctx, topic)
	for i := 0; i < 3; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(fmt.Sprint("c", i)), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	txn, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.TransactionalID(topic+"-txn"), kgo.TransactionTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := txn.ProduceSync(ctx, &kgo.Record{Key: []byte(fmt.Sprint("t", i)), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	base := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	read := func(mark int64, stable chan<- struct{}) (int, error) {
		n := 0
		err := readPartition(ctx, base, adm, topic, 0, 0, mark, func(r *kgo.Record) error {
			n++
			if n == 3 && stable != nil {
				close(stable)
			}
			return nil
		})
		return n, err
	}
	if n, err := read(-1, nil); err != nil || n != 3 {
		t.Fatalf("without a mark: %d records (%v), want the 3 below the open transaction", n, err)
	}
	if n, err := read(100, nil); err != nil || n != 3 {
		t.Fatalf("a mark past the log's end: %d records (%v), want it ignored (3 records)", n, err)
	}
	stable := make(chan struct{})
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := read(5, stable)
		done <- result{n, err}
	}()
	select {
	case <-stable:
	case r := <-done:
		t.Fatalf("the reader returned before the stable records were read: %d (%v)", r.n, r.err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the stable records were not read within 2 minutes")
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.n != 5 {
			t.Fatalf("with the mark past the transaction: %d records (%v), want 5 (the committed transaction's too)", r.n, r.err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the reader did not end within 2 minutes of the commit")
	}
}

// TestMarkCodec: offset metadata round-trips a changelog end; other
// metadata (franz-go's member id, none) carries no mark.
func TestMarkCodec(t *testing.T) {
	m := encodeMark(1234)
	if n, ok := decodeMark(&m); !ok || n != 1234 {
		t.Fatalf("decodeMark(%q) = %d, %v", m, n, ok)
	}
	for _, s := range []string{"", "kgo-1234-abc", markPrefix, markPrefix + "x", markPrefix + "-1"} {
		if n, ok := decodeMark(&s); ok {
			t.Fatalf("decodeMark(%q) = %d, want none", s, n)
		}
	}
	if _, ok := decodeMark(nil); ok {
		t.Fatal("decodeMark(nil) found a mark")
	}
}

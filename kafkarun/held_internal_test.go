package kafkarun

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/metrics"
)

// TestHeldBatchesStayWithTheirWorker: batches held for a partition's
// worker (its queue was full) reach that worker only. When the partition
// has another worker meanwhile (lost and assigned again by one rebalance,
// as after a broker outage longer than the session), they are dropped and
// the partition's fetching resumed: the new worker starts at its own
// position, and the held records (fetched past the old worker's) would
// make it skip the records in between. Before: deliverPending handed them
// to whatever worker the partition had (TestBrokerRestarts' upsert job
// stayed short of the join after the 60 s outage).
func TestHeldBatchesStayWithTheirWorker(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const topic = "k"
	j := &joinStage{cl: cl, topic: topic, workers: map[int32]*worker{}}
	newWorker := func(p int32) *worker { return &worker{j: j, p: p, in: make(chan []*kgo.Record, 1)} }
	old, cur := newWorker(0), newWorker(0)
	j.workers[0] = cur
	stale := []*kgo.Record{{Partition: 0, Offset: 50}}
	fresh := []*kgo.Record{{Partition: 1, Offset: 7}}
	w1 := newWorker(1)
	j.workers[1] = w1
	pending := map[int32]*held{0: {w: old, q: [][]*kgo.Record{stale}}, 1: {w: w1, q: [][]*kgo.Record{fresh, fresh}}}
	cl.PauseFetchPartitions(map[string][]int32{topic: {0, 1}})

	j.deliverPending(pending)
	if n := len(cur.in); n != 0 {
		t.Fatalf("partition 0's new worker got %d batches held for its old worker (offset %d)", n, (<-cur.in)[0].Offset)
	}
	if n := len(old.in); n != 0 {
		t.Fatalf("partition 0's old worker got %d batches after it was replaced", n)
	}
	if _, ok := pending[0]; ok {
		t.Fatal("partition 0's stale batches still held")
	}
	if got := <-w1.in; got[0] != fresh[0] {
		t.Fatalf("partition 1's worker got %v, want its held batch", got)
	}
	if h := pending[1]; h == nil || len(h.q) != 1 {
		t.Fatalf("partition 1 (queue full after one batch): held %+v, want one batch left", h)
	}
	paused := cl.PauseFetchPartitions(nil)[topic]
	if len(paused) != 1 || paused[0] != 1 {
		t.Fatalf("paused partitions %v, want [1] (0 resumed: nothing held for it)", paused)
	}
	j.deliverPending(pending)
	if len(pending) != 0 || len(cl.PauseFetchPartitions(nil)[topic]) != 0 {
		t.Fatalf("after the queue drained: held %v, paused %v", pending, cl.PauseFetchPartitions(nil))
	}
	if got := <-w1.in; got[0] != fresh[0] {
		t.Fatalf("partition 1's second batch: %v", got)
	}
}

// TestLostPartitionForgetsFailures: a partition revoked or lost while its
// worker's failure was pending leaves no failure history behind, so the
// worker of its next assignment is judged by its own failures only. Before:
// the old failure's clock stayed, and the next worker's first restartable
// failure, more than persistentErrors after it, stopped the instance.
func TestLostPartitionForgetsFailures(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	j := &joinStage{deps: &deps{m: m}, topic: "k", workers: map[int32]*worker{}, committed: map[int32]int64{},
		restarts: map[int32]error{}, failing: map[int32]time.Time{}}
	long := time.Now().Add(-time.Hour)
	for _, p := range []int32{0, 1, 2} {
		j.failing[p], j.restarts[p] = long, errors.New("unable to dial")
	}
	j.lose(context.Background(), nil, map[string][]int32{"k": {0}})
	j.revoke(context.Background(), nil, map[string][]int32{"k": {1}})
	for _, p := range []int32{0, 1} {
		if _, ok := j.failing[p]; ok {
			t.Errorf("partition %d: failure clock kept after it was no longer ours", p)
		}
		if _, ok := j.restarts[p]; ok {
			t.Errorf("partition %d: restart kept after it was no longer ours", p)
		}
	}
	if j.failing[2] != long || j.restarts[2] == nil {
		t.Errorf("partition 2 (still ours): failure history dropped")
	}
}

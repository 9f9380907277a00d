package kafkarun_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/internal/testenv"
)

// TestRealKafka runs the oracle workload against a real Apache Kafka
// broker (deploy/local/kafka.sh), on fresh topics and groups.
func TestRealKafka(t *testing.T) {
	brokers := testenv.Require(t, testenv.KafkaEnv, "Kafka")
	seed := clusterSeed(t)
	run := fmt.Sprintf("cdcjoin-test-%d-%d", time.Now().Unix(), seed)
	o := oracleOptions(seed)
	o.Ops, o.Users, o.Domains = 3000, 50, 100
	o.ParentTopic, o.ChildTopic = run+".public.users", run+".public.domains"
	h := generate(t, o)
	addrs := strings.Split(brokers, ",")
	adm := brokerAdmin(t, addrs)
	ctx := context.Background()
	if _, err := adm.CreateTopics(ctx, int32(o.Partitions), -1, nil, o.ParentTopic, o.ChildTopic); err != nil {
		t.Fatal(err)
	}
	produce(t, addrs, h.Records)
	cfg := jobConfig(t, jobOpts{name: run, brokers: brokers, stateDir: t.TempDir(),
		parentTopic: o.ParentTopic, childTopic: o.ChildTopic})
	m := newModel()
	in := start(t, cfg, m.sink())
	want := oracle(h, false)
	diff, err := m.waitEqual(want, stallLimit, in)
	if serr := in.stop(t); serr != nil {
		t.Errorf("seed %d: Run: %v", seed, serr)
	}
	if err != nil || diff != "" {
		t.Fatalf("seed %d: %v\n%s", seed, err, diff)
	}
	checkFinal(t, seed, m, want)
	adm.DeleteTopics(ctx, o.ParentTopic, o.ChildTopic, cfg.Kafka.KeyedTopic(), cfg.Kafka.ChildIndexTopic())
}

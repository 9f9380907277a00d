package kafkarun_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/row"
)

// SampleTypes finds the column types in real Debezium records (schemas on)
// on the source topics.
func TestSampleTypes(t *testing.T) {
	const users, domains = "dbserver1.public.users", "dbserver1.public.domains"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, users, domains))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	f, err := os.Open("../debezium/testdata/real/schema-on.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	err = engine.ReadJSONL(f, "schema-on.jsonl", func(r *engine.Record) error {
		return cl.ProduceSync(ctx, &kgo.Record{Topic: r.Topic, Key: append([]byte(nil), r.Key...), Value: append([]byte(nil), r.Value...)}).FirstErr()
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(`name: types
parent: {topic: `+users+`, key: id}
child:  {topic: `+domains+`, key: id, parent_key: user_id}
select: parent.id AS user_id, parent.balance, parent.created_at, child.domain_name
state: {dir: /tmp/unused}
kafka: {brokers: [`+c.ListenAddrs()[0]+`]}
`), "types.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	types, err := kafkarun.SampleTypes(sctx, cfg, 1000)
	if err != nil {
		t.Fatal(err)
	}
	want := []row.Kind{row.KindInt, row.KindDecimal, row.KindTimestamp, row.KindString}
	for i, k := range want {
		if types[i].Kind != k {
			t.Errorf("column %s: kind %s, want %s (%+v)", cfg.Select[i].Name, types[i].Kind, k, types[i])
		}
	}
	if types[1].Scale != 2 {
		t.Errorf("balance scale %d, want 2", types[1].Scale)
	}
}

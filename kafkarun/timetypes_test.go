package kafkarun_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/timejoin"
	"github.com/cdcjoin/cdcjoin/timejoin/timegen"
)

// TestSamplerTimeJoinTypes: the Sampler of a time join (a LEFT interval
// join of timegen's topics, select left.v AS lv, right.v AS rv) on the
// real broker types lv and rv from the records of each side: their
// schema's type with schemas on (Connect string), the inferred type of
// their values without (Connect "", variable scale). Negative check:
// while the right topic holds no record, rv stays unknown; the sampler
// reads on where it stopped once the right side's records are there.
func TestSamplerTimeJoinTypes(t *testing.T) {
	brokers := testenv.Require(t, testenv.KafkaEnv, "Kafka")
	for _, schemas := range []bool{false, true} {
		t.Run(fmt.Sprintf("schemas=%v", schemas), func(t *testing.T) {
			suffix := fmt.Sprintf("-sampler-%v-%d", schemas, time.Now().UnixNano())
			left, right := timegen.LeftTopic+suffix, timegen.RightTopic+suffix
			addrs := strings.Split(brokers, ",")
			cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx := context.Background()
			if _, err := kadm.NewClient(cl).CreateTopics(ctx, 2, -1, nil, left, right); err != nil {
				t.Fatal(err)
			}
			s := &timejoin.Spec{Kind: timejoin.Interval, Join: timejoin.LeftOuter, Lower: -3000, Upper: 5000,
				Out: []timejoin.Column{{From: timejoin.FromLeft}, {From: timejoin.FromRight}}}
			yaml := timegen.Config(timegen.ConfigOptions{Name: "sampler" + suffix, Spec: s, StateDir: t.TempDir(),
				Extra: fmt.Sprintf("kafka: {brokers: [%s]}\n", brokers)})
			yaml = strings.ReplaceAll(strings.ReplaceAll(yaml, timegen.LeftTopic, left), timegen.RightTopic, right)
			cfg, err := config.Parse([]byte(yaml), "sampler.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if err := cfg.ValidateForKafka(); err != nil {
				t.Fatal(err)
			}
			events := []timegen.Event{
				{Side: timejoin.SideLeft, Partition: 0, Op: timejoin.Insert, Time: 1000, Key: "a", PK: "l1", Val: "x"},
				{Side: timejoin.SideLeft, Partition: 1, Op: timejoin.Insert, Time: 2000, Key: "b", PK: "l2", Val: "y"},
				{Side: timejoin.SideRight, Partition: 1, Op: timejoin.Insert, Time: 3000, Key: "c", PK: "r1", Val: "z"},
			}
			recs := timegen.Encode(events, timegen.EncodeOptions{Schemas: schemas, Seed: 1})
			produceTo := func(topic string) {
				t.Helper()
				var krs []*kgo.Record
				for _, r := range recs {
					if r.Topic+suffix == topic {
						krs = append(krs, &kgo.Record{Topic: topic, Partition: r.Partition, Key: r.Key, Value: r.Value})
					}
				}
				if len(krs) == 0 {
					t.Fatalf("no record of %s", topic)
				}
				if err := cl.ProduceSync(ctx, krs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			produceTo(left)

			sampler, err := kafkarun.NewSampler(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer sampler.Close()
			check := func(ct row.ColumnType, col string) {
				t.Helper()
				if ct.Kind != row.KindString {
					t.Fatalf("%s: %+v, want a string", col, ct)
				}
				if schemas && ct.Connect != "string" || !schemas && (ct.Connect != "" || ct.Scale != -1) {
					t.Fatalf("%s: %+v is not the type of its %s", col, ct, map[bool]string{true: "schema", false: "values"}[schemas])
				}
			}
			// Only the left side's records: rv stays unknown however long
			// the sampler waits for more.
			nctx, ncancel := context.WithTimeout(ctx, 10*time.Second)
			types := sampler.Sample(nctx, 1000)
			ncancel()
			if len(types) != 2 {
				t.Fatalf("%d types, want 2: %+v", len(types), types)
			}
			check(types[0], "lv")
			if types[1].Known() {
				t.Fatalf("rv is typed %+v without any record of the right side", types[1])
			}
			produceTo(right)
			sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			for !types[1].Known() && sctx.Err() == nil {
				types = sampler.Sample(sctx, 1000)
			}
			check(types[0], "lv")
			check(types[1], "rv")
		})
	}
}

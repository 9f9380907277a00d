package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// TestOracleAvro replays each seeded history twice, as JsonConverter
// records with schemas and re-encoded as Avro through a schema registry
// (cdcgen.AvroEncoder: Connect schemas mapped as AvroData maps them,
// Confluent wire format), and requires both runs to emit exactly the same
// changes (op, version, keys, values, in order), and the Avro run's sink
// model to equal the SQL join of the final tables.
func TestOracleAvro(t *testing.T) {
	oracleFormat(t, "avro", 6, func() registryEncoder { return avroEncoder{cdcgen.NewAvroEncoder()} })
}

// TestOracleProtobuf is TestOracleAvro in Protobuf (cdcgen.ProtobufEncoder:
// Connect schemas mapped as Confluent's ProtobufConverter maps them).
func TestOracleProtobuf(t *testing.T) {
	oracleFormat(t, "protobuf", 3, func() registryEncoder { return protoEncoder{cdcgen.NewProtobufEncoder()} })
}

// registryEncoder re-encodes JsonConverter records in a registry format
// and serves the schemas it registered.
type registryEncoder interface {
	debezium.SchemaSource
	Record(cdcgen.Record) (cdcgen.Record, error)
	Schemas() int
}

type avroEncoder struct{ *cdcgen.AvroEncoder }

type protoEncoder struct{ *cdcgen.ProtobufEncoder }

func (p protoEncoder) Schemas() int { return len(p.ProtobufEncoder.Schemas()) }

func oracleFormat(t *testing.T, format string, maxSeeds int, newEncoder func() registryEncoder) {
	ss := seeds(t)
	if len(ss) > maxSeeds {
		ss = ss[:maxSeeds]
	}
	for _, join := range []string{"inner", "left"} {
		for _, seed := range ss {
			t.Run(fmt.Sprintf("%s/seed=%d", join, seed), func(t *testing.T) {
				t.Parallel()
				opts := cdcgen.DefaultOptions(seed)
				opts.SchemaMode = cdcgen.SchemaOn
				opts.Ops = 5000
				h, err := cdcgen.Generate(opts)
				if err != nil {
					t.Fatal(err)
				}
				enc := newEncoder()
				avroRecs := make([]cdcgen.Record, len(h.Records))
				for i, r := range h.Records {
					if avroRecs[i], err = enc.Record(r); err != nil {
						t.Fatalf("seed %d: %v", seed, err)
					}
				}
				run := func(recs []cdcgen.Record, format string) ([]string, *sinkModel) {
					cfg := jobConfig(t, join)
					cfg.State.Dir = t.TempDir()
					var opts engine.Options
					if format != "json" {
						cfg.Format = format
						opts.Schemas = enc
					}
					model := newSinkModel()
					var log []string
					opts.Sink = sink.Func(func(c *row.Change) error {
						log = append(log, fmt.Sprintf("%v v%d pk=%v ck=%v %v", c.Op, c.Version, c.ParentKey, c.ChildKey, c.Values))
						return model.emit(c)
					})
					opts.Now = func() time.Time { return time.Unix(1700000000, 0) } // one version epoch for both runs
					e, err := engine.Open(cfg, opts)
					if err != nil {
						t.Fatal(err)
					}
					defer e.Close()
					ctx := context.Background()
					for i, r := range recs {
						rec := engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
						if err := e.Process(ctx, &rec); err != nil {
							t.Fatalf("seed %d %s: record %d: %v", seed, format, i, err)
						}
					}
					if err := e.Commit(ctx); err != nil {
						t.Fatal(err)
					}
					return log, model
				}
				jsonLog, _ := run(h.Records, "json")
				avroLog, model := run(avroRecs, format)
				if len(jsonLog) != len(avroLog) {
					t.Fatalf("seed %d: %d changes from JSON, %d from %s", seed, len(jsonLog), len(avroLog), format)
				}
				for i := range jsonLog {
					if jsonLog[i] != avroLog[i] {
						t.Fatalf("seed %d: change %d differs:\njson: %s\n%s: %s", seed, i, jsonLog[i], format, avroLog[i])
					}
				}
				check(t, seed, format+" sink model", oracle(t, h.Final, join == "left"), model.rmt.Live())
				t.Logf("seed %d: %d records, %d schemas, %d identical changes", seed, len(avroRecs), enc.Schemas(), len(avroLog))
				if enc.Schemas() < 4 || len(jsonLog) == 0 {
					t.Fatalf("seed %d: %d schemas, %d changes: the history did not exercise the formats", seed, enc.Schemas(), len(jsonLog))
				}
			})
		}
	}
}

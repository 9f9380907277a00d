package main

import (
	"context"
	"fmt"
	"io"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/kafkarun"
)

func handoverCommand() command {
	c := command{
		name:    "handover",
		summary: "let `run` continue where a `replay` of the same job stopped (backfill, then go live)",
		usage:   "--config FILE --state DIR [--log-format text|json] [--log-level LEVEL]",
	}
	c.run = func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		fs := newFlags(&c, stderr, `
Loads the state of a finished `+"`cdcjoin replay`"+` (--state, the replay's state.dir)
into the job's Kafka topics, so that `+"`cdcjoin run`"+` continues exactly where the
replay stopped: the join state goes to the keyed topic with the versions the
replay emitted (a multi-stage plan's: each stage's rows to its stage's keyed
topic), the indexes to their changelogs, and the consumer groups are
committed at the replay's input positions. A plan's replay state must come
from this version of cdcjoin or later (its indexes record source partitions). Run it once, before the job's first
`+"`run`"+`, with the config `+"`run`"+` will use (same join, its own state.dir); the
replay's input must be records of the same Kafka topics (topic, partition and
offset as in Kafka). The typical use: backfill a big table fast with
`+"`replay --clickhouse`"+` from a dump of the topics, then hand over and go live.

Refuses a job that has already run. Safe to run again if interrupted.`)
		cfgPath := fs.String("config", "", "job configuration (YAML) `file` of the run (required)")
		state := fs.String("state", "", "the replay's state `dir` (required)")
		logger := logFlags(fs, stderr)
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if *cfgPath == "" || *state == "" {
			fs.Usage()
			return fmt.Errorf("cdcjoin handover: --config and --state are required: %w", errUsage)
		}
		log, err := logger()
		if err != nil {
			return err
		}
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			return err
		}
		st, err := kafkarun.Handover(ctx, cfg, *state, log)
		if err != nil {
			return err
		}
		if st.StageRows != nil {
			fmt.Fprintf(stdout, "handover done: %v rows loaded into the stages' keyed topics (stage 1 first), %d table index entries into the index changelogs, %d keyed partitions each; "+
				"%d source partitions continue at the replay's positions; start `cdcjoin run --config %s`\n",
				st.StageRows, st.TableIndex, st.KeyedPartitions, st.SourcePartitions, *cfgPath)
			return nil
		}
		fmt.Fprintf(stdout, "handover done: %d parents, %d children, %d child index and %d parent index entries loaded into %d keyed partitions; "+
			"%d source partitions continue at the replay's positions; start `cdcjoin run --config %s`\n",
			st.Parents, st.Children, st.ChildIndex, st.ParentIndex, st.KeyedPartitions, st.SourcePartitions, *cfgPath)
		return nil
	}
	return c
}

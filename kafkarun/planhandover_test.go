package kafkarun_test

import (
	"context"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/stage"
)

// TestPlanReplayThenRun: handover for multi-stage plans. A seeded cdcgen
// four-table history (every hard case at every table) is replayed in part
// by `replay` (the engine, on a state directory) into a sink, handed over
// (kafkarun.Handover: every stage's rows as load records with the
// replay's versions, the tables' indexes on their source partitions,
// epoch markers on every stage, the groups committed) and continued by
// `run` on kfake into the same sink. The sink must then hold exactly
// what replay emits for the whole history (which TestMultiOracle proves
// equal to PostgreSQL's answer): its live rows as a ReplacingMergeTree
// shows them (upsert mode) and as the changelog's signs sum them (every
// retraction and update cancels the version it replaces: changelog mode),
// for chains and stars, INNER/LEFT/RIGHT/FULL, filters in ON and WHERE,
// materializers. One case's handover is interrupted (the broker fails its
// last step, the keying group's commit) and run again. Negative control:
// run keying the topics from their start without a handover must differ.
func TestPlanReplayThenRun(t *testing.T) {
	seed := clusterSeed(t)
	names := []string{"chain-full-full", "star-left-full", "chain-inner-left", "star-right-inner", "chain-right-left"}
	if testing.Short() {
		names = []string{"chain-full-full", "chain-inner-left"}
	}
	for i, name := range names {
		t.Run(name, func(t *testing.T) {
			// The first case: truncates (on one source partition) and an
			// interrupted handover.
			runPlanHandover(t, seed+int64(i), testkit.MultiQueries[name], i == 0, i == 0, true)
		})
	}
	t.Run("negative-control-no-handover", func(t *testing.T) {
		runPlanHandover(t, seed, testkit.MultiQueries["chain-inner-left"], false, false, false)
	})
}

func runPlanHandover(t *testing.T, seed int64, sql string, truncates, interrupt, handover bool) {
	opts := cdcgen.DefaultMultiOptions(seed)
	opts.Ops, opts.Rows = 1500, 60 // -short too: a selective query's answer needs the rows
	// Truncates only on one partition (on several, their order against the
	// other partitions' records is undefined, replay's and run's alike).
	opts.Truncates = truncates
	if truncates {
		opts.Partitions = 1
	}
	opts.Seed = seed
	h, want := planHistory(t, &opts, sql, 10)
	probe := planRunConfig(t, sql, "127.0.0.1:9", t.TempDir(), "probe", 100)
	seed = opts.Seed
	rng := rand.New(rand.NewSource(seed))
	cut := len(h.Records) * (3 + rng.Intn(5)) / 10
	t.Logf("seed %d: %s; replay the first %d of %d records", seed, h.Stats, cut, len(h.Records))
	if cdcgen.Diff(want, replayLive(t, probe, h.Records[:cut]), 1) == "" {
		t.Fatalf("seed %d: replay's answer after %d records is already the final one: run would have nothing to do", seed, cut)
	}

	c := schema4Cluster(t, opts.Partitions)
	root := t.TempDir()
	cfg := planRunConfig(t, sql, brokersOf(c), filepath.Join(root, "run"), "i0", 1+rng.Intn(200))
	ctx := context.Background()

	// Backfill: replay the first part into the sink.
	m := newModel()
	rcfg := *cfg
	rcfg.State.Dir = filepath.Join(root, "replay")
	eng, err := engine.Open(&rcfg, engine.Options{Sink: m.sink()})
	if err != nil {
		t.Fatal(err)
	}
	replayInto(t, eng, h.Records[:cut], planTopics(cfg))
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}

	produce(t, c.ListenAddrs(), h.Records)
	if handover {
		if interrupt {
			// The broker fails the keying group's commit, the handover's
			// last step: it fails, and is run again.
			f := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: cfg.Kafka.KeyingGroup(), Err: kerr.GroupAuthorizationFailed})
			if _, err := kafkarun.Handover(ctx, cfg, rcfg.State.Dir, nil); err == nil {
				t.Fatalf("seed %d: the handover succeeded although its keying group commit failed", seed)
			}
			if f.Hits() == 0 {
				t.Fatalf("seed %d: the commit fault never fired", seed)
			}
			t.Logf("seed %d: handover interrupted as injected", seed)
		}
		st, err := kafkarun.Handover(ctx, cfg, rcfg.State.Dir, nil)
		if err != nil {
			t.Fatalf("seed %d: handover: %v", seed, err)
		}
		t.Logf("handover: %+v", st)
		if len(st.StageRows) != stage.Stages(cfg.Plan()) || st.TableIndex == 0 || st.SourcePartitions == 0 {
			t.Fatalf("seed %d: handover loaded %+v", seed, st)
		}
		if _, err := kafkarun.Handover(ctx, cfg, rcfg.State.Dir, nil); err == nil || !strings.Contains(err.Error(), "already run") {
			t.Fatalf("seed %d: a second handover of the same job: %v", seed, err)
		}
	}

	in := start(t, cfg, m.sink())
	stall := 90 * time.Second
	if !handover {
		stall = 20 * time.Second // the stale rows never go
	}
	diff, werr := m.waitEqual(want, stall, in)
	cl, cerr := m.changelog()
	if cerr == nil {
		if d := cdcgen.Diff(want, cl, 10); d != "" {
			diff += "\nchangelog mode (sum of signs):\n" + d
		}
	} else {
		diff += "\nchangelog mode: " + cerr.Error()
	}
	if err := in.stop(t); err != nil {
		t.Fatalf("seed %d: run: %v", seed, err)
	}
	if !judge(t, seed, !handover, werr, diff, "run without a handover gave replay's rows (the check is blind)",
		"after the handover, the sink differs from replay's answer") {
		return
	}
	t.Logf("seed %d: %d rows equal replay's in upsert and changelog mode", seed, len(want))
}

// TestPlanHandoverOldState: a plan's replay state made by a cdcjoin whose
// index entries do not record their source partitions (fingerprint
// "plan1", as every earlier plan state has) still resumes as it was — the
// resumed replay's answer over the whole history equals a fresh one's —
// and a handover refuses it, saying why, instead of guessing partitions.
func TestPlanHandoverOldState(t *testing.T) {
	seed := clusterSeed(t)
	opts := cdcgen.DefaultMultiOptions(seed)
	opts.Ops = 600
	h, err := cdcgen.GenerateMulti(opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg := planRunConfig(t, testkit.MultiQueries["chain-full-full"], "127.0.0.1:9", t.TempDir(), "i0", 50)
	want := replayLive(t, cfg, h.Records)
	// An old state: its fingerprint written before anything else.
	st, err := joinstate.Open(job.StateOptions(cfg, cfg.State.Dir))
	if err != nil {
		t.Fatal(err)
	}
	tx := st.Begin()
	if err := driver.MetaFingerprint.Put(tx, driver.PlanFingerprint(cfg, false)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	st.Close()
	m := newModel()
	ctx := context.Background()
	for i, part := range [][]cdcgen.Record{h.Records[:len(h.Records)/2], h.Records[len(h.Records)/2:]} {
		eng, err := engine.Open(cfg, engine.Options{Sink: m.sink(), Resume: true})
		if err != nil {
			t.Fatalf("seed %d: open %d: %v", seed, i, err)
		}
		replayInto(t, eng, part, planTopics(cfg))
		if err := eng.Close(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := m.live()
	if err != nil {
		t.Fatal(err)
	}
	if d := cdcgen.Diff(want, got, 10); d != "" {
		t.Fatalf("seed %d: the old state resumed differs from a fresh replay:\n%s", seed, d)
	}
	st, err = joinstate.Open(job.StateOptions(cfg, cfg.State.Dir))
	if err != nil {
		t.Fatal(err)
	}
	fp, _, err := driver.MetaFingerprint.Get(st)
	st.Close()
	if err != nil || string(fp) != string(driver.PlanFingerprint(cfg, false)) {
		t.Fatalf("the resumed old state's fingerprint is %q (%v), want the old one", fp, err)
	}
	_, err = kafkarun.Handover(ctx, cfg, cfg.State.Dir, nil)
	if err == nil || !strings.Contains(err.Error(), "do not record the source partition") {
		t.Fatalf("seed %d: a handover of an old plan state: %v", seed, err)
	}
	t.Logf("refused: %v", err)
}

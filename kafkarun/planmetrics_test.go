package kafkarun_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/metrics"
	"github.com/cdcjoin/cdcjoin/stage"
)

// TestPlanMetrics: the /metrics endpoint of a running multi-stage plan
// answers 200 and reports every stage's state stores by stage and
// partition. (Every stage's stores once went into one collector labelled
// by partition alone: a plan's stages exported the same series twice and
// the endpoint answered 500.) Then a second instance on a lost state
// directory: its catch-ups are counted per plan stage (cdcjoin_catchup_*
// once said stage="join" for every stage), and its rows equal replay's.
func TestPlanMetrics(t *testing.T) {
	seed := clusterSeed(t)
	sql := testkit.MultiQueries["chain-full-full"]
	opts := cdcgen.DefaultMultiOptions(seed)
	opts.Ops = 300
	// No truncates: their order against the other tables' records is the
	// history's only on one source partition, and this test produces three.
	opts.Truncates = false
	h, want := planHistory(t, &opts, sql, 5)
	seed = opts.Seed
	c := schema4Cluster(t, opts.Partitions)
	produce(t, c.ListenAddrs(), h.Records)
	cfg := planRunConfig(t, sql, brokersOf(c), t.TempDir(), "i0", 50)
	stages := stage.Stages(cfg.Plan())
	if stages < 2 {
		t.Fatalf("seed %d: %d stages: the test needs a plan of two or more", seed, stages)
	}

	m := newModel()
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	in := newInstance(cfg, cancel)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	go func() {
		defer close(in.done)
		in.err = kafkarun.Run(ctx, cfg, kafkarun.Options{Sink: m.sink(), Logger: log, Ready: in.ready, Registry: reg})
	}()
	defer in.stop(t)
	srv, err := metrics.Listen("127.0.0.1:0", reg, in.ready)
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx) }()
	defer func() {
		scancel()
		if err := <-served; err != nil {
			t.Errorf("metrics server: %v", err)
		}
	}()
	if diff, err := m.waitEqual(want, 90*time.Second, in); err != nil || diff != "" {
		t.Fatalf("seed %d: run's rows differ from replay's (%v):\n%s", seed, err, diff)
	}

	resp, err := http.Get("http://" + srv.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("seed %d: GET /metrics: %s\n%s", seed, resp.Status, firstLines(string(body), 8))
	}
	// Every stage's every keyed partition is owned by this one instance:
	// cdcjoin_state_bytes has one sample per stage and partition.
	seen := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "cdcjoin_state_bytes{") {
			continue
		}
		labels := line[len("cdcjoin_state_bytes{"):strings.IndexByte(line, '}')]
		seen[labels]++
	}
	perStage := map[string]int{}
	for labels, n := range seen {
		if n != 1 {
			t.Errorf("seed %d: cdcjoin_state_bytes{%s} reported %d times", seed, labels, n)
		}
		for _, l := range strings.Split(labels, ",") {
			if v, ok := strings.CutPrefix(l, "stage="); ok {
				perStage[strings.Trim(v, `"`)]++
			}
		}
	}
	parts := cfg.Kafka.KeyedPartitions
	for s := 1; s <= stages; s++ {
		if n := perStage[string(rune('0'+s))]; n != parts {
			t.Errorf("seed %d: stage %d: %d partitions' state reported, want %d (all: %v)", seed, s, n, parts, seen)
		}
	}
	t.Logf("seed %d: %d stages, %d state series, /metrics 200", seed, stages, len(seen))

	// A second instance on a lost state directory rebuilds every stage's
	// partitions up to the committed positions: cdcjoin_catchup_* count
	// those catch-ups under each plan stage's number, none under "join"
	// (they all did once).
	if err := in.stop(t); err != nil {
		t.Fatalf("seed %d: stop: %v", seed, err)
	}
	cfg = planRunConfig(t, sql, brokersOf(c), t.TempDir(), "i1", 50)
	reg2 := prometheus.NewRegistry()
	ctx2, cancel2 := context.WithCancel(context.Background())
	in2 := newInstance(cfg, cancel2)
	go func() {
		defer close(in2.done)
		in2.err = kafkarun.Run(ctx2, cfg, kafkarun.Options{Sink: m.sink(), Logger: log, Ready: in2.ready, Registry: reg2})
	}()
	defer in2.stop(t)
	caught := func() string {
		var b strings.Builder
		for s := 1; s <= stages; s++ {
			_, n, modes := stageCatchUps(t, reg2, strconv.Itoa(s))
			fmt.Fprintf(&b, "stage %d: %d (%s); ", s, n, modes)
		}
		return b.String()
	}
	total := func() int {
		_, n, _ := stageCatchUps(t, reg2, "join")
		for s := 1; s <= stages; s++ {
			_, k, _ := stageCatchUps(t, reg2, strconv.Itoa(s))
			n += k
		}
		return n
	}
	waitFor(t, 3*time.Minute, "every stage's partitions to catch up on lost state", func() bool { return total() >= stages*parts })
	for s := 1; s <= stages; s++ {
		if _, n, _ := stageCatchUps(t, reg2, strconv.Itoa(s)); n != parts {
			t.Errorf("seed %d: stage %d: %d catch-ups counted, want %d (one per partition); by stage: %s", seed, s, n, parts, caught())
		}
	}
	if _, n, modes := stageCatchUps(t, reg2, "join"); n != 0 {
		t.Errorf("seed %d: a plan's catch-ups labelled stage=\"join\": %d (%s); by stage: %s", seed, n, modes, caught())
	}
	if diff, err := m.waitEqual(want, 90*time.Second, in2); err != nil || diff != "" {
		t.Fatalf("seed %d: after the rebuild, run's rows differ from replay's (%v):\n%s", seed, err, diff)
	}
	t.Logf("seed %d: catch-ups on lost state: %s", seed, caught())
}

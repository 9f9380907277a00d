package kafkarun_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/stage"
)

// Hot keys at the inner stages of a plan, on the real Kafka broker of the
// test environment (fresh topics and groups per run). The history is
// cdcgen's four-table one with MultiOptions.Hot: about a third of every
// foreign key drawn points at id 1, so user 1 has many domains (a hot key
// at stage 1 of the chain and of the star), domain 1 many dns records
// (stage 2 of the chain) and registrar 1 many domains (stage 2 of the
// star); skew.chunk_rows is 1-3, so their fan-outs are done in chunks.
//
// Whether the history's own changes fan out past a chunk at a stage
// depends on the order the source topics are read in (fetch timing, not
// the seed: users read before their domains fan out nothing at stage 1),
// so the history ends with touches (cdcgen MultiHistory.AppendUpdate): an
// update of a projected column of each stage's hottest parent in the final
// state (hotTouches), produced only once the last instance's sink shows
// replay's answer for the records before them, so every stage holds those
// parents' children when they arrive and each touch fans out over more
// rows than a chunk at its stage, whatever the timing.

// planHotRun is the outcome of planHotKeys.
type planHotRun struct {
	store *exactStore // changelog mode (nil in upsert mode)
	// chunked: fan-outs done in chunks, per stage ("1", "2", "3": a
	// materializer's, always 0); lastInput: those of the last stage paced
	// by input (changelog mode; stages before the last write no sink and
	// pace by time); steps: step markers written.
	chunked          map[string]float64
	lastInput        float64
	lastJoins        bool // the last stage is a join (not a materializer, which does every input at once)
	steps            float64
	crashes          int
	final, changelog string // differences from replay's answer ("": none)
}

// planHotKeys runs sql over a hot-key history on the real broker through
// instances that crash (changelog mode: right after random INSERTs of an
// exact sink, mid-batch and at batch ends; upsert mode: a sink failing
// after a flush landed), on kept and lost state directories, then a last
// instance to the end. paceByTime breaks stepping by input in changelog
// mode (the negative control).
func planHotKeys(t *testing.T, seed int64, sql string, changelog, paceByTime bool) planHotRun {
	t.Helper()
	brokers := testenv.Require(t, testenv.KafkaEnv, "Kafka")
	rng := rand.New(rand.NewPCG(uint64(seed), 20))
	opts := cdcgen.DefaultMultiOptions(seed)
	opts.Ops, opts.Truncates, opts.Hot = 1200, false, 0.35
	if testing.Short() {
		opts.Ops = 700
	}
	var h *cdcgen.MultiHistory
	var touches []hotTouch
	fan := 0 // the smallest fan-out of a touch
	for try := 0; ; try++ {
		h, _ = planHistory(t, &opts, sql, 3)
		touches, fan = hotTouches(t, h, hotParentsOf(t, sql))
		if fan >= 2 {
			break
		}
		if try == 2 {
			t.Fatalf("seed %d: no hot parent with 2 children at every stage in 3 histories: the touches cannot force a chunk", seed)
		}
		t.Logf("seed %d: history %d's touches fan out to %d rows at most at a stage; taking another", seed, opts.Seed, fan)
		opts.Seed += 7
	}
	tail := len(h.Records) // the touches: produced once the rest is in the sink
	for _, tc := range touches {
		if err := h.AppendUpdate(tc.table, tc.id, tc.col, cdcgen.MultiValue{Str: true, Text: "Hot touch"}); err != nil {
			t.Fatal(err)
		}
	}
	probe := planRunConfig(t, sql, "127.0.0.1:9", t.TempDir(), "probe", 100)
	wantBefore, want := replayLive(t, probe, h.Records[:tail]), replayLive(t, probe, h.Records)
	if cdcgen.Diff(want, wantBefore, 1) == "" {
		t.Fatalf("seed %d: the touches %v do not change replay's answer", opts.Seed, touches)
	}
	t.Logf("seed %d: %s; touches %v (each fans out to at least %d rows at its stage); replay's answer has %d rows", opts.Seed, h.Stats, touches, fan, len(want))
	// Fresh names on the shared broker: topics, groups, transactional ids.
	run := fmt.Sprintf("cdcjoin-planhot-%d-%d", time.Now().UnixNano()%1e12, seed)
	recs := make([]cdcgen.Record, len(h.Records))
	var topics []string
	seen := map[string]bool{}
	for i, r := range h.Records {
		r.Topic = strings.Replace(r.Topic, "dbserver1.", run+".", 1)
		recs[i] = r
		if !seen[r.Topic] {
			seen[r.Topic] = true
			topics = append(topics, r.Topic)
		}
	}
	addrs := strings.Split(brokers, ",")
	adm := brokerAdmin(t, addrs)
	if _, err := adm.CreateTopics(context.Background(), int32(opts.Partitions), -1, nil, topics...); err != nil {
		t.Fatal(err)
	}
	chunk := 1 + rng.IntN(min(3, fan-1)) // every touch fans out past a chunk
	cfgFor := func(stateDir, instance string) *config.Config {
		var b strings.Builder
		b.WriteString(strings.ReplaceAll(testkit.SQLJob(run, sql), "dbserver1.", run+"."))
		fmt.Fprintf(&b, "state: {dir: %s, sync: false, batch_events: %d}\n", stateDir, 20+rng.IntN(150))
		fmt.Fprintf(&b, "kafka:\n  keyed_partitions: 4\n  brokers: [%s]\n  instance_id: %s\n  session_timeout: 6s\n  commit_interval: 100ms\n  transaction_timeout: 10s\n", brokers, instance)
		fmt.Fprintf(&b, "skew: {chunk_rows: %d}\n", chunk)
		cfg, err := config.Parse([]byte(b.String()), "planhot.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Plan() == nil {
			t.Fatal("not a multi-stage plan")
		}
		return cfg
	}
	defer func() {
		probe := cfgFor(t.TempDir(), "cleanup")
		names := kafkarun.NamesOf(probe)
		del := append(append(append([]string{}, names.Sources...), names.Keyed...), names.Index...)
		adm.DeleteTopics(context.Background(), del...)
		adm.DeleteGroups(context.Background(), names.Groups...)
	}()
	t.Logf("seed %d: chunk_rows %d, changelog %v, paced by time %v, run %s", seed, chunk, changelog, paceByTime, run)

	m := newModel()
	m.ordered = true
	res := planHotRun{chunked: map[string]float64{}}
	var store *exactStore
	if changelog {
		store = newExactStore(m)
		res.store = store
	}
	start := func(state, instance string, failAt int) (*instance, *prometheus.Registry) {
		cfg := cfgFor(state, instance)
		ctx, cancel := context.WithCancel(context.Background())
		in := newInstance(cfg, cancel)
		reg := prometheus.NewRegistry()
		lvl := slog.LevelWarn
		if testing.Verbose() {
			lvl = slog.LevelInfo
		}
		o := kafkarun.Options{Registry: reg, Ready: in.ready,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("instance", instance)}
		if changelog {
			o.NewSink = store.newSink
		} else {
			s := m.sink()
			s.failAt, s.failApplied, s.name = failAt, true, instance
			o.Sink = s
		}
		if paceByTime {
			kafkarun.PaceByTime(&o)
		}
		go func() {
			defer close(in.done)
			in.err = kafkarun.Run(ctx, cfg, o)
		}()
		return in, reg
	}
	pcfg := cfgFor(t.TempDir(), "probe")
	pl, groups := pcfg.Plan(), kafkarun.NamesOf(pcfg).Groups
	last := strconv.Itoa(stage.Stages(pl))
	res.lastJoins = !pl.Materialize
	tally := func(reg *prometheus.Registry) {
		for _, n := range []string{"1", "2", "3"} {
			res.chunked[n] += counter(t, reg, "cdcjoin_stage_chunked_total", "stage", n)
		}
		res.lastInput += counter(t, reg, "cdcjoin_stage_chunked_total", "stage", last, "steps", "input")
		res.steps += counter(t, reg, "cdcjoin_skew_step_markers_total")
	}
	recs, touchRecs := recs[:tail], recs[tail:]
	n := len(recs)
	produce(t, addrs, recs[:n/2])
	dir := t.TempDir()
	for i := 0; i < 5; i++ {
		if i == 2 {
			produce(t, addrs, recs[n/2:])
		}
		state := dir
		if rng.IntN(4) == 0 {
			state = filepath.Join(dir, fmt.Sprint("lost-", i)) // every stage's partitions rebuilt from their logs
		}
		failAt := 0
		if changelog {
			// Rounds 0 and 2 (each with records produced just before it)
			// crash inside a batch, so a batch is cut short and re-created
			// whatever the batch sizes: with chunk_rows 1-3 stepped by
			// input, most of the last stage's batches are shorter than an
			// INSERT, and a crash counted over every INSERT (the odd rounds)
			// fell on batch ends alone in a CI run (seed 215: 3 crashes, no
			// batch re-created).
			if k := 1 + rng.IntN(30); i%2 == 0 {
				store.armMid(1 + k%10)
				t.Logf("seed %d: run %d: lost state %v, crash inside INSERT %d", seed, i, state != dir, 1+k%10)
			} else {
				store.arm(k)
				t.Logf("seed %d: run %d: lost state %v, crash after INSERT %d", seed, i, state != dir, k)
			}
		} else {
			failAt = 1 + rng.IntN(6)
			t.Logf("seed %d: run %d: lost state %v, sink fails after flush %d landed", seed, i, state != dir, failAt)
		}
		in, reg := start(state, fmt.Sprint("i", i), failAt)
		select {
		case <-in.done:
			res.crashes++
			t.Logf("seed %d: run %d crashed: %v", seed, i, in.err)
			if !errors.Is(in.err, errInjected) {
				t.Fatalf("seed %d: run %d stopped by %v, not by the injected crash", seed, i, in.err)
			}
		case <-time.After(10 * time.Second):
			if err := in.stop(t); err != nil && !errors.Is(err, errInjected) {
				t.Fatalf("seed %d: stop %d: %v", seed, i, err)
			}
		}
		tally(reg)
		t.Logf("seed %d: after run %d: %s", seed, i, committedOffsets(adm, groups, run))
	}
	if changelog {
		store.arm(0)
		store.mu.Lock()
		caught := store.diff != ""
		store.mu.Unlock()
		if paceByTime && caught {
			return res // the negative control is caught already
		}
	}
	in, reg := start(dir, "last", 0)
	target := wantBefore
	diff, err := m.waitEqual(target, stallLimit, in)
	if err == nil && diff == "" {
		// Every stage holds what the sink shows: the touches' parents'
		// children among it.
		produce(t, addrs, touchRecs)
		target = want
		diff, err = m.waitEqual(target, stallLimit, in)
	} else {
		diff = "before the touches: " + diff
	}
	if diff != "" && !changelog {
		got, _ := m.live()
		diff += "\nwhat the sink got of the rows that differ:\n" + m.history(target, got, 20)
	}
	serr := in.stop(t)
	tally(reg)
	res.final = runDiff(diff, err, serr)
	if err := keyingMarked(adm, groups[0]); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	if changelog {
		if got, err := m.changelog(); err != nil {
			res.changelog = err.Error()
		} else {
			res.changelog = cdcgen.Diff(want, got, 10)
		}
		store.mu.Lock()
		t.Logf("seed %d: %d crashes (%d inside a batch), %d re-created batches compared", seed, store.crashes, store.midCrash, store.compared)
		store.mu.Unlock()
	}
	t.Logf("seed %d: chunked per stage %v (last stage %s by input: %g), %g step markers, %d runs crashed", seed, res.chunked, last, res.lastInput, res.steps, res.crashes)
	return res
}

// hotTouch is an update appended to a history: column col of row id of
// table.
type hotTouch struct {
	table string
	id    int64
	col   string
}

func (tc hotTouch) String() string { return fmt.Sprintf("%s %d.%s", tc.table, tc.id, tc.col) }

// hotParent is how a plan stage fans out a parent's update: over the rows
// of child whose column fk is the parent's id and that pass keep (the
// final tables: what else the row needs to reach the stage and match).
type hotParent struct {
	parent, col, child, fk string
	keep                   func(final cdcgen.MultiTables, child cdcgen.MultiRow) bool
}

// column returns the MultiRow index of table's column (0 is id).
func column(t *testing.T, table, col string) int {
	t.Helper()
	for _, tb := range cdcgen.Schema4() {
		if tb.Name == table {
			for i, c := range tb.Columns {
				if c.Name == col {
					return i + 1
				}
			}
		}
	}
	t.Fatalf("no column %s.%s", table, col)
	return 0
}

// hotTouches picks, per stage (ps), the live parent with the most children
// that fan out from it in h's final tables, and returns a touch of each
// and the smallest of those fan-outs.
func hotTouches(t *testing.T, h *cdcgen.MultiHistory, ps []hotParent) ([]hotTouch, int) {
	t.Helper()
	var out []hotTouch
	least := -1
	for _, p := range ps {
		fk := column(t, p.child, p.fk)
		count := map[int64]int{}
		for _, r := range h.Final[p.child] {
			if v := r[fk]; !v.Null && (p.keep == nil || p.keep(h.Final, r)) {
				if _, live := h.Final[p.parent][v.Int]; live {
					count[v.Int]++
				}
			}
		}
		var best int64
		n := 0
		for id, c := range count {
			if c > n || c == n && id < best {
				best, n = id, c
			}
		}
		if least < 0 || n < least {
			least = n
		}
		if n > 0 {
			out = append(out, hotTouch{p.parent, best, p.col})
		}
	}
	return out, max(least, 0)
}

// liveUser: a domain whose user is live (it passes stage 1's inner join).
func liveUser(t *testing.T) func(cdcgen.MultiTables, cdcgen.MultiRow) bool {
	uid := column(t, "domains", "user_id")
	return func(final cdcgen.MultiTables, d cdcgen.MultiRow) bool {
		_, ok := final["users"][d[uid].Int]
		return !d[uid].Null && ok
	}
}

// planHotQueries are the shapes of the hot-key tests: a chain of three
// tables (stage 1 keyed by user, stage 2 by domain; no WHERE, so that
// the hot domain's rows reach stage 2 whatever its name) and a star (stage
// 1 keyed by user, stage 2 by registrar, then a materializer), each with
// a LEFT join.
var planHotQueries = map[string]string{
	"chain": `SELECT u.id AS uid, u.firstname, d.id AS did, d.domain_name, r.id AS rid, r.rtype
		FROM users u JOIN domains d ON d.user_id = u.id
		LEFT JOIN dns_records r ON r.domain_id = d.id AND r.rtype <> 'TXT'`,
	"star": testkit.MultiQueries["star-inner-left"],
}

// hotParentsOf is a planHotQueries query's stages' hot parents: the
// chain's users (stage 1: over their domains) and domains with a live user
// (stage 2: over their dns records other than TXT); the star's users (stage
// 1) and registrars (stage 2: over their domains with a live user).
func hotParentsOf(t *testing.T, sql string) []hotParent {
	t.Helper()
	live := liveUser(t)
	users := hotParent{parent: "users", col: "firstname", child: "domains", fk: "user_id"}
	switch sql {
	case planHotQueries["chain"]:
		rtype, dom := column(t, "dns_records", "rtype"), column(t, "dns_records", "domain_id")
		return []hotParent{users, {parent: "domains", col: "domain_name", child: "dns_records", fk: "domain_id",
			keep: func(final cdcgen.MultiTables, r cdcgen.MultiRow) bool {
				d, ok := final["domains"][r[dom].Int]
				return r[rtype].Text != "TXT" && ok && live(final, d)
			}}}
	case planHotQueries["star"]:
		return []hotParent{users, {parent: "registrars", col: "name", child: "domains", fk: "registrar_id", keep: live}}
	}
	t.Fatalf("no hot parents known for %s", sql)
	return nil
}

// TestPlanHotKeysChangelog: in changelog mode (an exact sink: delivery
// markers), fan-outs of hot keys at both stages of a chain and of a star
// are done in chunks stepped by input (skew.chunk_rows rows per record
// read, step markers when a stage's worker has work and no input), across
// crashes right after an INSERT landed on kept and lost state directories
// (rounds 0 and 2 crash inside a batch, cutting it short; the others after
// any INSERT): every batch cut short is re-created, every batch re-created after a crash emits exactly the changes that
// landed of it (compared change by change), every row key's changes reach
// the sink in increasing version order, and the changelog and upsert
// tables equal replay's answer (TestMultiOracle proves replay equal to
// PostgreSQL's). It fails unless fan-outs were chunked by input at stage 1
// and at stage 2 (cdcjoin_stage_chunked_total{stage,steps="input"}) and
// batches were re-created. Negative control:
// TestPlanHotKeysChangelogTimePaced.
func TestPlanHotKeysChangelog(t *testing.T) {
	for _, name := range []string{"chain", "star"} {
		t.Run(name, func(t *testing.T) {
			seed := testSeed()
			t.Logf("seed %d (rerun with CDCJOIN_SEED=%d)", seed, seed)
			r := planHotKeys(t, seed, planHotQueries[name], true, false)
			if r.store.diff != "" {
				t.Fatalf("seed %d: %s", seed, r.store.diff)
			}
			if r.final != "" || r.changelog != "" {
				t.Fatalf("seed %d: the tables differ from replay's answer:\nupsert: %s\nchangelog: %s", seed, r.final, r.changelog)
			}
			if r.store.compared < r.store.midCrash {
				t.Fatalf("seed %d: %d batches cut short by a crash, %d re-created: a batch's next owner did not begin where it was cut short", seed, r.store.midCrash, r.store.compared)
			}
			if r.chunked["1"] == 0 || r.chunked["2"] == 0 || r.lastJoins && r.lastInput == 0 || r.store.compared == 0 {
				t.Fatalf("seed %d: chunked per stage %v (the last stage's by input: %g), %d re-created batches: the test proves nothing", seed, r.chunked, r.lastInput, r.store.compared)
			}
		})
	}
}

// TestPlanHotKeysChangelogTimePaced is TestPlanHotKeysChangelog's negative
// control: with the stages' steps paced by time under the same exact sink
// (as upsert mode paces them), one of up to 5 seeds' re-created batches must
// differ from what landed of them (or the tables from replay's answer;
// caught on the 3rd seed when it was written).
func TestPlanHotKeysChangelogTimePaced(t *testing.T) {
	for i := int64(0); i < 5; i++ {
		seed := testSeed() + i
		r := planHotKeys(t, seed, planHotQueries["chain"], true, true)
		if r.store.diff != "" || r.final != "" || r.changelog != "" {
			t.Logf("seed %d: time-paced chunks are caught: %s %s %s", seed, r.store.diff, r.final, r.changelog)
			return
		}
	}
	t.Fatal("time-paced chunks of plan stages under the delivery markers were never caught: the comparison cannot fail")
}

// TestPlanHotKeysUpsert: in upsert mode the same hot keys' fan-outs are
// done in chunks paced by time at both stages of the chain and the star,
// through sinks that fail after a flush landed (the state not committed)
// and restarts on kept and lost state directories; the upsert table
// equals replay's answer and every row key's new changes arrive in
// increasing version order. It fails unless fan-outs were chunked (by
// time) at stage 1 and stage 2. Negative control of the comparison:
// TestPlanRunNegativeControl (the same model and oracle).
func TestPlanHotKeysUpsert(t *testing.T) {
	for _, name := range []string{"chain", "star"} {
		t.Run(name, func(t *testing.T) {
			seed := testSeed()
			t.Logf("seed %d (rerun with CDCJOIN_SEED=%d)", seed, seed)
			r := planHotKeys(t, seed, planHotQueries[name], false, false)
			if r.final != "" {
				t.Fatalf("seed %d: the table differs from replay's answer:\n%s", seed, r.final)
			}
			if r.chunked["1"] == 0 || r.chunked["2"] == 0 || r.crashes == 0 {
				t.Fatalf("seed %d: chunked per stage %v, %d crashes: the test proves nothing", seed, r.chunked, r.crashes)
			}
		})
	}
}

// keyingMarked checks that every source offset the keying group committed
// carries the end of its index changelog in its metadata (keyingmarks.go:
// what a restore reads to at least), and that there are some.
func keyingMarked(adm *kadm.Client, group string) error {
	offs, err := adm.FetchOffsets(context.Background(), group)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		return fmt.Errorf("keying group %s: %w", group, err)
	}
	n := 0
	for _, o := range offs.Sorted() {
		if !strings.HasPrefix(o.Metadata, "cdcjoin.changelog=") {
			return fmt.Errorf("keying group's committed offset of %s/%d (%d) carries no changelog mark: metadata %q", o.Topic, o.Partition, o.At, o.Metadata)
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("keying group %s committed no offsets", group)
	}
	return nil
}

// committedOffsets describes the offsets groups committed, per topic and
// partition, with the job's name (prefix) trimmed from groups and topics
// (for the logs of a failing run: which stage stopped where).
func committedOffsets(adm *kadm.Client, groups []string, prefix string) string {
	var b strings.Builder
	for _, g := range groups {
		offs, err := adm.FetchOffsets(context.Background(), g)
		if err == nil {
			err = offs.Error()
		}
		if err != nil {
			fmt.Fprintf(&b, "%s: %v; ", strings.TrimPrefix(g, prefix), err)
			continue
		}
		fmt.Fprintf(&b, "%s:", strings.TrimPrefix(g, prefix))
		for _, o := range offs.Sorted() {
			fmt.Fprintf(&b, " %s/%d=%d", strings.TrimPrefix(o.Topic, prefix+"."), o.Partition, o.At)
		}
		b.WriteString("; ")
	}
	return b.String()
}

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/internal/progress"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
)

// childEnv makes the test binary run `cdcjoin` itself (realMain) with the
// arguments in the variable (separated by \x1f): a child process the
// tests can kill -9.
const childEnv = "CDCJOIN_TEST_CHILD_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := realMain(ctx, strings.Split(args, "\x1f"), os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// child starts `cdcjoin args…` as a separate process, its output in log.
func child(t *testing.T, log *os.File, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(args, "\x1f"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// runProc is a `cdcjoin run` child process a test started (startRun).
type runProc struct {
	cmd     *exec.Cmd
	log     *os.File
	exited  chan error // cmd.Wait's result, sent once
	mark    int64      // log's size when the run started: its own lines follow
	metrics string     // host:port of the run's metrics server
}

// startRun starts `cdcjoin run args…` (child) with its output in log and
// returns once the run serves its metrics.
func startRun(t *testing.T, log *os.File, args ...string) *runProc {
	t.Helper()
	p := &runProc{log: log, exited: make(chan error, 1), mark: logSize(t, log)}
	p.cmd = child(t, log, append([]string{"run"}, args...)...)
	go func() { p.exited <- p.cmd.Wait() }()
	p.metrics = waitLog(t, log, p.mark, "serving metrics", 3*time.Minute)
	return p
}

// alive fails the test when the run has exited.
func (p *runProc) alive(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		t.Fatalf("cdcjoin run exited: %v (log: %s)", err, p.log.Name())
	default:
	}
}

// stopWait is how long a run may take to exit after SIGTERM where a test
// asks nothing tighter: a hang guard (the jobs' drain timeouts are 1-5 s).
const stopWait = 5 * time.Minute

// stop sends SIGTERM and returns the run's exit error (nil: exit 0). A run
// still up d later is killed, and that is the error.
func (p *runProc) stop(d time.Duration) error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		return err
	case <-time.After(d):
		p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("still running %v after SIGTERM (killed)", d)
	}
}

// awaitRows polls rows until they equal want (why ""), or returns why the
// run stopped converging (convergeWatch) with the last rows read and their
// Diff. The run exiting fails the test.
func (p *runProc) awaitRows(t *testing.T, want []cdcgen.JoinedRow, rows func() []cdcgen.JoinedRow) (why, diff string, got []cdcgen.JoinedRow) {
	t.Helper()
	var w convergeWatch
	for {
		got = rows()
		if diff = cdcgen.Diff(want, got, 10); diff == "" {
			return "", "", got
		}
		select {
		case err := <-p.exited:
			t.Fatalf("cdcjoin run exited: %v (log: %s)", err, p.log.Name())
		case <-time.After(500 * time.Millisecond):
		}
		if why = w.stalled(diff, scrape(p.metrics)); why != "" {
			return why, diff, got
		}
	}
}

// sourceCluster starts an in-process Kafka (kfake, one broker; closed when
// the test ends) holding the default source topics, partitions each.
// Groups may use sessions down to 500 ms: the jobs' session_timeout is
// below Kafka's own minimum of 6 s.
func sourceCluster(t *testing.T, partitions int32) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic),
		kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// generate is cdcgen.Generate(o), failing the test on an error.
func generate(t *testing.T, o cdcgen.Options) *cdcgen.History {
	t.Helper()
	h, err := cdcgen.Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func testSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("CDCJOIN_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return uint64(time.Now().UnixNano() % 100000)
}

// TestChangelogKills: `cdcjoin run` writing a changelog table is killed
// with SIGKILL at random points, 22 times, while the input keeps coming,
// and restarted each time; at the end every row's sum(_sign) is 0 or 1 and
// the live rows equal the join of the source tables. (pebble buffers its
// WAL, so a kill also loses the newest state commits: most restarts find
// ClickHouse ahead of a partition's state, the case that double-counts.)
// Before the delivery markers, INSERTs of a batch whose commit a kill
// prevented were inserted again after the restart: on the code before
// them this test ends with 1,212 live rows for 811 (401 extra, 38 with
// stale values).
func TestChangelogKills(t *testing.T) {
	changelogKills(t, 22, "", 0)
}

// TestChangelogKillsHotKeys is TestChangelogKills with hot keys: a few
// parents (Zipf) cross a small hot_children threshold up and down, so
// kills hit salting moves, coolings and forwards to replicas, and the
// worker's forwarding transactions (committed after the sink's End and
// before the state: a kill between the two leaves the sink ahead of
// forwards that were never committed, which the restarted worker sends
// again). Fan-outs and moves are done in chunks of 2 rows stepped by input
// (each record read buys a chunk, so a batch re-created after a kill cuts
// the same chunks, as the markers require). It fails unless some key was
// salted and some work was done in chunks stepped by input.
func TestChangelogKillsHotKeys(t *testing.T) {
	changelogKills(t, 12, "skew: {hot_children: 6, salts: 3, chunk_rows: 2}\n", 1.15)
}

// changelogKills runs the kill test: kills SIGKILLs, the job's extra YAML
// (skew settings), parentSkew the history's Zipf exponent over parents (0:
// uniform).
func changelogKills(t *testing.T, kills int, extra string, parentSkew float64) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	seed := testSeed(t)
	t.Logf("seed %d (rerun with CDCJOIN_SEED=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 11))
	o := cdcgen.DefaultOptions(int64(seed))
	o.Ops, o.Users, o.Domains = 4000, 60, 150
	o.ParentSkew = parentSkew
	o.Mix.TruncateUsers, o.Mix.TruncateDomains = 0, 0 // undefined order across partitions (see kafkarun)
	h := generate(t, o)
	// Session timeout 3 s (Kafka's own minimum is 6 s): with 1 s, on a
	// machine at load 20 the in-process broker (under -race too) answered
	// heartbeats and joins too late for any keying group session to last a
	// transaction — a livelock of the group, not of cdcjoin (issue 24).
	c := sourceCluster(t, int32(o.Partitions))
	dir := t.TempDir()
	table := fmt.Sprintf("kills_%d_%d", time.Now().Unix(), seed)
	cfg := writeFile(t, dir, "job.yaml", fmt.Sprintf(`name: kills
parent: {topic: %s, key: id}
child:  {topic: %s, key: id, parent_key: user_id}
select: parent.id AS user_id, parent.firstname, parent.lastname, child.id AS domain_id, child.domain_name
state: {dir: %s, batch_events: 200}
kafka:
  brokers: [%s]
  session_timeout: 3s
  commit_interval: 100ms
  transaction_timeout: 5s
  drain_timeout: 1s
  rebalance_timeout: 6s
  metrics_addr: 127.0.0.1:0
clickhouse:
  addr: [%s]
  database: cdcjoin_test
  table: %s
  mode: changelog
  batch: {rows: 8, interval: 40ms}
  retry: {initial: 20ms, max: 200ms, max_elapsed: 1m}
%s`, cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic, filepath.Join(dir, "state"), strings.Join(c.ListenAddrs(), ", "), addr, table, extra))
	log := childLog(t, dir)
	conn := openClickHouse(t, addr)
	slices := kills + 1
	per := (len(h.Records) + slices - 1) / slices
	midBatch := 0
	var chunked float64 // work done in chunks stepped by input, over the runs (as of their last commit before the kill)
	points := drawKillPoints(r, kills, per, extra != "")
	for k := 0; k < kills; k++ {
		lo, hi := k*per, min((k+1)*per, len(h.Records))
		produceRecords(t, c.ListenAddrs(), h.Records[lo:hi])
		p := startRun(t, log, "--config", cfg, "--log-level", "info")
		// Kill once the run joins (its partitions were assigned), at a
		// point of the work this slice of input brings (killPoint).
		waitLog(t, log, p.mark, "partition assigned", 3*time.Minute)
		what := points[k].await(p.metrics)
		chunked += inputChunks(p.metrics)
		inFlight := batchInProgress(t, conn, "cdcjoin_test."+table)
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.exited
		if inFlight {
			midBatch++
		}
		line := fmt.Sprintf("kill %d at %s: %s", k+1, points[k], what)
		t.Log(line)
		fmt.Fprintf(log, "--- %s\n", line)
	}
	b, _ := os.ReadFile(log.Name())
	ahead := strings.Count(string(b), "the sink holds this partition's output beyond the local state")
	t.Logf("%d of %d kills hit a batch cut into INSERTs before its end; %d restarts found ClickHouse ahead of a partition's state (the INSERTs a kill left uncommitted, which were inserted again before)", midBatch, kills, ahead)
	produceRecords(t, c.ListenAddrs(), h.Records[min(kills*per, len(h.Records)):])
	killed := time.Now()
	p := startRun(t, log, "--config", cfg, "--log-level", "info")
	want := cdcgen.Join(h.Final.Users, h.Final.Domains, false)
	rows := func() []cdcgen.JoinedRow { return changelogRows(t, conn, "cdcjoin_test."+table) }
	if why, diff, got := p.awaitRows(t, want, rows); why != "" {
		report := childProgress(p.metrics) + progress.Report(want, got, int32(o.Partitions))
		dumpGoroutines(p.cmd, log)
		t.Fatalf("after %d kills, ClickHouse does not equal the join: %s:\n%s\n%s", kills, why, diff, report)
	}
	t.Logf("the last run converged %v after its start", time.Since(killed).Round(time.Millisecond))
	chunked += inputChunks(p.metrics)
	if err := p.stop(stopWait); err != nil {
		t.Errorf("cdcjoin run after SIGTERM: %v", err)
	}
	inserts := checkSigns(t, conn, "cdcjoin_test."+table)
	b, _ = os.ReadFile(log.Name())
	t.Logf("%d kills; %d rows of the join equal; %d INSERTs; over all runs: %d keying restarts after Kafka failures, %d keying transactions aborted by a rebalance, %d join partition restarts",
		kills, len(want), inserts, strings.Count(string(b), "keying stage restarting"), strings.Count(string(b), "transaction aborted by a rebalance"),
		strings.Count(string(b), "join partition restarting"))
	if extra != "" {
		b, _ := os.ReadFile(log.Name())
		salted := strings.Count(string(b), "hot key: salted")
		t.Logf("%d keys salted, %d cooled (over all runs); %g fan-outs and moves done in chunks stepped by input", salted, strings.Count(string(b), "hot key: cooled"), chunked)
		if salted == 0 {
			t.Fatalf("no key was salted: the test proves nothing")
		}
		if chunked == 0 {
			t.Fatalf("no work was done in chunks stepped by input (cdcjoin_skew_chunked_total{steps=\"input\"}): the test proves nothing of them")
		}
	}
	conn.Exec(context.Background(), "DROP TABLE IF EXISTS cdcjoin_test."+table)
}

// inputChunks reads a run's cdcjoin_skew_chunked_total{steps="input"}
// (0 when the run does not answer).
func inputChunks(addr string) float64 {
	return scrapeGauge(addr, "cdcjoin_skew_chunked_total")[`steps="input"`]
}

func logSize(t *testing.T, f *os.File) int64 {
	t.Helper()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// waitLog waits until the log written after offset from contains s and
// returns the value of the addr attribute of the line ("" when none).
func waitLog(t *testing.T, f *os.File, from int64, s string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		b, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) > from {
			if i := strings.Index(string(b[from:]), s); i >= 0 {
				line, _, _ := strings.Cut(string(b[from+int64(i):]), "\n")
				_, addr, _ := strings.Cut(line, " addr=")
				addr, _, _ = strings.Cut(addr, " ")
				return addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("cdcjoin did not log %q within %v", s, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// batchInProgress reports whether the table's latest delivery marker is a
// cut inside a batch (INSERTs landed whose batch has not ended).
func batchInProgress(t *testing.T, conn ch.Conn, table string) bool {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT _ck, max(_version) FROM "+table+" WHERE _pk = '\\0cdcjoin' AND _sign = 1 GROUP BY _ck")
	if err != nil {
		return false // no table yet
	}
	defer rows.Close()
	for rows.Next() {
		var ck string
		var v uint64
		if err := rows.Scan(&ck, &v); err != nil {
			t.Fatal(err)
		}
		if v&1 == 0 {
			return true
		}
	}
	return false
}

// childLog creates the log file of the children a test starts in dir; its
// tail is logged when the test fails.
func childLog(t *testing.T, dir string) *os.File { return jobLog(t, dir, "") }

// jobLog is childLog for the children of one job of several (job: its
// name, in the file names).
func jobLog(t *testing.T, dir, job string) *os.File {
	t.Helper()
	name, keepName := "cdcjoin.log", strings.ReplaceAll(t.Name(), "/", "_")
	if job != "" {
		name, keepName = job+".log", keepName+"-"+job
	}
	log, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		log.Close()
		if t.Failed() {
			// The whole log outlives the test's directory.
			b, _ := os.ReadFile(log.Name())
			keep := filepath.Join(os.TempDir(), fmt.Sprintf("cdcjoin-%s-%s.log", keepName, time.Now().Format("20060102-150405")))
			if err := os.WriteFile(keep, b, 0o644); err == nil {
				t.Logf("cdcjoin's whole log (goroutine dumps included): %s", keep)
			}
			if i := strings.Index(string(b), goroutinesMark); i >= 0 {
				b = b[:i]
			}
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("cdcjoin's log (tail):\n%s", b)
		}
	})
	return log
}

// openClickHouse connects to the test server (closed at the test's end).
func openClickHouse(t *testing.T, addr string) ch.Conn {
	t.Helper()
	conn, err := ch.Open(&ch.Options{Addr: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// checkSigns fails the test unless every row key of the changelog table
// has sum(_sign) 0 or 1, and returns how many INSERTs carried a delivery
// marker.
func checkSigns(t *testing.T, conn ch.Conn, table string) uint64 {
	t.Helper()
	var bad uint64
	q := "SELECT count() FROM (SELECT sum(_sign) AS n FROM " + table + " GROUP BY _pk, _ck HAVING n NOT IN (0, 1))"
	if err := conn.QueryRow(context.Background(), q).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Fatalf("%d row keys have sum(_sign) outside {0, 1}", bad)
	}
	var inserts uint64
	if err := conn.QueryRow(context.Background(), "SELECT count() FROM "+table+" WHERE _pk = '\\0cdcjoin' AND _sign = 1").Scan(&inserts); err != nil {
		t.Fatal(err)
	}
	return inserts
}

// selectJoined is the SELECT of the default select list's five columns
// (user_id, firstname, lastname, domain_id, domain_name), each as text
// (NULL: \N), from table.
func selectJoined(table string) string {
	txt := func(col string) string { return "ifNull(toString(" + col + "), '\\\\N')" }
	return "SELECT " + strings.Join([]string{txt("user_id"), txt("firstname"), txt("lastname"), txt("domain_id"), txt("domain_name")}, ", ") +
		" FROM " + table
}

// queryJoined runs q (selectJoined and what follows) and returns its rows
// as cdcgen rows; the error is the query's (a failure to read its rows
// fails the test).
func queryJoined(t *testing.T, conn ch.Conn, q string) ([]cdcgen.JoinedRow, error) {
	t.Helper()
	rows, err := conn.Query(context.Background(), q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []cdcgen.JoinedRow
	for rows.Next() {
		v := make([]string, 5)
		if err := rows.Scan(&v[0], &v[1], &v[2], &v[3], &v[4]); err != nil {
			t.Fatal(err)
		}
		out = append(out, cdcgen.JoinedRow{Key: rowKey(v[0], v[3]), Values: v})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out, nil
}

// pollJoined is queryJoined for a poll: a query that fails (no table yet,
// or the server is busy) is logged and reads as no rows.
func pollJoined(t *testing.T, conn ch.Conn, table, q string) []cdcgen.JoinedRow {
	t.Helper()
	out, err := queryJoined(t, conn, q)
	if err != nil {
		t.Logf("reading %s: %v", table, err)
	}
	return out
}

// changelogRows reads the live rows of a changelog table (sum(_sign) > 0,
// delivery markers excluded) as cdcgen rows of the default select list.
func changelogRows(t *testing.T, conn ch.Conn, table string) []cdcgen.JoinedRow {
	t.Helper()
	return pollJoined(t, conn, table, selectJoined(table)+
		" WHERE _pk != '\\0cdcjoin' GROUP BY _pk, _ck, user_id, firstname, lastname, domain_id, domain_name HAVING sum(_sign) > 0")
}

// upsertRows reads the live rows of an upsert table (FINAL, not deleted).
func upsertRows(t *testing.T, conn ch.Conn, table string) []cdcgen.JoinedRow {
	t.Helper()
	return pollJoined(t, conn, table, selectJoined(table)+" FINAL WHERE _deleted = 0")
}

// rowKey is the oracle's key of a row read back with these parent and
// child key texts (a NULL child: a LEFT join's padded row).
func rowKey(parent, child string) cdcgen.RowKey {
	if child == cdcgen.Null {
		return cdcgen.RowKey{Parent: parent, Padded: true}
	}
	return cdcgen.RowKey{Parent: parent, Child: child}
}

// produceRecords writes recs to their topics and partitions, in order.
func produceRecords(t *testing.T, brokers []string, recs []cdcgen.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	for i := range recs {
		r := &recs[i]
		cl.Produce(ctx, &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

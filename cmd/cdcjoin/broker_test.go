package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/internal/progress"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
)

// brokerFaultsEnv turns on the tests that kill, stop and restart a real
// broker of their own (make e2e sets it): each starts a private KRaft
// broker (deploy/local/kafka.sh with its own ports and data directory) that
// no other test shares.
const brokerFaultsEnv = "CDCJOIN_BROKER_FAULTS"

// broker is a private KRaft broker a test kills and restarts.
type broker struct {
	t      *testing.T
	env    []string
	addr   string
	script string
}

func requireBrokerFaults(t *testing.T) {
	t.Helper()
	if os.Getenv(brokerFaultsEnv) == "" {
		t.Skipf("%s is not set: this test kills and restarts a broker of its own (make e2e runs it)", brokerFaultsEnv)
	}
}

// startBroker starts a private broker on free loopback ports; it is stopped
// (and its data removed) when the test ends.
func startBroker(t *testing.T) *broker {
	t.Helper()
	script, err := filepath.Abs("../../deploy/local/kafka.sh")
	if err != nil {
		t.Fatal(err)
	}
	port, cport := freePort(t), freePort(t)
	b := &broker{t: t, script: script, addr: "127.0.0.1:" + strconv.Itoa(port), env: append(os.Environ(),
		"KAFKA_PORT="+strconv.Itoa(port), "KAFKA_CONTROLLER_PORT="+strconv.Itoa(cport),
		"KAFKA_RUN_DIR="+filepath.Join(t.TempDir(), "kafka"), "KAFKA_HEAP=-Xms128m -Xmx512m")}
	t.Cleanup(func() { b.do("down") })
	b.do("up")
	return b
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// do runs the broker script with cmd (up, down, kill).
func (b *broker) do(cmd string) {
	b.t.Helper()
	c := exec.Command(b.script, cmd)
	c.Env = b.env
	out, err := c.CombinedOutput()
	if err != nil {
		b.t.Fatalf("kafka.sh %s: %v\n%s", cmd, err, out)
	}
	b.t.Logf("broker %s: %s", cmd, strings.TrimSpace(lastLine(string(out))))
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// brokerJob is one `cdcjoin run` of TestBrokerRestarts.
type brokerJob struct {
	name, join, mode string // mode: upsert, changelog, jsonl
	table, output    string
	*runProc         // set by start
	// unhealthy, notReady: what /healthz and /readyz answered with 503
	// during the outages (the first answer of each).
	unhealthy, notReady string
}

// TestBrokerRestarts: three `cdcjoin run` instances (upsert/INNER,
// changelog/LEFT, JSON lines/INNER) run against a private KRaft broker
// while a loader produces the rest of a ~9K-record workload; the broker is
// SIGKILLed and restarted on the same data after 10 s, and later stopped
// cleanly for 60 s (longer than the jobs' session and transaction
// timeouts). Every instance must ride both out by itself and converge:
// upsert rows equal the join, the changelog's sum(_sign) is 0 or 1 per row
// with the live rows equal to the LEFT join, the JSON lines applied by
// version equal the join; no instance exits; while the broker is away
// /readyz answers 503 and, past the stall limit, /healthz too; SIGTERM
// ends each with exit 0. Before: the upsert instance exited ("keying: end
// transaction: unable to dial"), the other two stayed up with ~1,000 rows
// missing for good (End waiting forever).
func TestBrokerRestarts(t *testing.T) {
	requireBrokerFaults(t)
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	b := startBroker(t)
	seed := testSeed(t)
	t.Logf("seed %d (rerun with CDCJOIN_SEED=%d)", seed, seed)
	o := cdcgen.DefaultOptions(int64(seed))
	o.Ops, o.Users, o.Domains = 6000, 60, 150
	o.Mix.TruncateUsers, o.Mix.TruncateDomains = 0, 0 // undefined order across partitions
	h := generate(t, o)
	t.Logf("%d records", len(h.Records))
	createTopics(t, b.addr, int32(o.Partitions), cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic)
	dir := t.TempDir()
	conn := openClickHouse(t, addr)
	stamp := fmt.Sprintf("%d_%d", time.Now().Unix(), seed)
	jobs := []*brokerJob{
		{name: "bf_upsert", join: "inner", mode: "upsert", table: "bf_upsert_" + stamp},
		{name: "bf_changelog", join: "left", mode: "changelog", table: "bf_changelog_" + stamp},
		{name: "bf_jsonl", join: "inner", mode: "jsonl", output: filepath.Join(dir, "bf_jsonl.jsonl")},
	}
	third := len(h.Records) / 3
	produceRecords(t, []string{b.addr}, h.Records[:third])
	for _, j := range jobs {
		j.start(t, dir, b.addr, addr)
	}
	for _, j := range jobs {
		j.waitReady(t, 2*time.Minute)
	}
	loader := newLoader(t, b.addr)
	rest := h.Records[third:]
	chunk := (len(rest) + 29) / 30
	next := func(n int) {
		for i := 0; i < n && len(rest) > 0; i++ {
			k := min(chunk, len(rest))
			loader.produce(rest[:k])
			rest = rest[k:]
			time.Sleep(200 * time.Millisecond) // pacing of the load, not a wait for anything
		}
	}
	next(10)
	// SIGKILL, restart on the same data after 10 s; the loader goes on
	// (its produces wait for the broker).
	b.do("kill")
	outage(t, jobs, 10*time.Second, false)
	b.do("up")
	next(10)
	// A clean stop for longer than the session and transaction timeouts.
	b.do("down")
	outage(t, jobs, 60*time.Second, true)
	b.do("up")
	next(len(rest))
	loader.close()
	converge(t, conn, jobs, h, int32(o.Partitions))
	for _, j := range jobs { // SIGTERM: exit 0 within 30 s
		if err := j.stop(30 * time.Second); err != nil {
			t.Errorf("%s: exit after SIGTERM: %v", j.name, err)
		}
	}
	if t.Failed() {
		return
	}
	checkSigns(t, conn, "cdcjoin_test."+jobs[1].table)
	for _, j := range jobs {
		if j.table != "" {
			conn.Exec(context.Background(), "DROP TABLE IF EXISTS cdcjoin_test."+j.table)
		}
	}
}

func createTopics(t *testing.T, brokers string, parts int32, topics ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopics(context.Background(), parts, 1, nil, topics...)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
}

func (j *brokerJob) start(t *testing.T, dir, brokers, chAddr string) {
	t.Helper()
	sink := fmt.Sprintf(`clickhouse:
  addr: [%s]
  database: cdcjoin_test
  table: %s
  mode: %s
  batch: {rows: 200, interval: 100ms}
  retry: {initial: 20ms, max: 500ms, max_elapsed: 1m}
`, chAddr, j.table, j.mode)
	args := []string{}
	if j.mode == "jsonl" {
		sink = ""
		args = append(args, "--output", j.output)
	}
	cfg := writeFile(t, dir, j.name+".yaml", fmt.Sprintf(`name: %s
parent: {topic: %s, key: id}
child:  {topic: %s, key: id, parent_key: user_id}
join: %s
select: parent.id AS user_id, parent.firstname, parent.lastname, child.id AS domain_id, child.domain_name
state: {dir: %s, batch_events: 500}
kafka:
  brokers: [%s]
  session_timeout: 6s
  rebalance_timeout: 10s
  transaction_timeout: 10s
  drain_timeout: 2s
  commit_interval: 200ms
  metrics_addr: 127.0.0.1:0
%s`, j.name, cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic, j.join, filepath.Join(dir, j.name+"-state"), brokers, sink))
	j.runProc = startRun(t, jobLog(t, dir, j.name), append([]string{"--config", cfg, "--log-level", "info"}, args...)...)
}

// get returns the status code and body of a path of the job's metrics
// server (0 when it does not answer).
func (j *brokerJob) get(path string) (int, string) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + j.metrics + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var sb strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		sb.WriteString(sc.Text())
		sb.WriteByte('\n')
	}
	return resp.StatusCode, strings.TrimSpace(sb.String())
}

func (j *brokerJob) waitReady(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		j.alive(t)
		code, body := j.get("/readyz")
		if code == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not ready after %v: %s", j.name, d, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// outage watches the jobs while the broker is away for d: each must stay
// alive; with want, each must have answered 503 on /readyz and /healthz
// (a stage that cannot progress shows) by the end.
func outage(t *testing.T, jobs []*brokerJob, d time.Duration, want bool) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		for _, j := range jobs {
			j.alive(t)
			if code, body := j.get("/readyz"); code == 503 && j.notReady == "" {
				j.notReady = body
			}
			if code, body := j.get("/healthz"); code == 503 && j.unhealthy == "" {
				j.unhealthy = body
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, j := range jobs {
		t.Logf("%s during the %v outage: /readyz %q, /healthz %q", j.name, d, j.notReady, j.unhealthy)
		if want && (j.notReady == "" || j.unhealthy == "") {
			t.Errorf("%s: the %v outage did not show in /readyz and /healthz (readyz %q, healthz %q)", j.name, d, j.notReady, j.unhealthy)
		}
		j.notReady, j.unhealthy = "", ""
	}
}

// converge waits until every job's output equals the join (failing a
// job that stops progressing: convergeWatch), then reports.
func converge(t *testing.T, conn ch.Conn, jobs []*brokerJob, h *cdcgen.History, parts int32) {
	t.Helper()
	began := time.Now()
	for _, j := range jobs {
		want := cdcgen.Join(h.Final.Users, h.Final.Domains, j.join == "left")
		rows := func() []cdcgen.JoinedRow {
			switch j.mode {
			case "upsert":
				return upsertRows(t, conn, "cdcjoin_test."+j.table)
			case "changelog":
				return changelogRows(t, conn, "cdcjoin_test."+j.table)
			}
			return jsonlRows(t, j.output)
		}
		j.alive(t)
		if why, diff, got := j.awaitRows(t, want, rows); why != "" {
			// What the stuck run says of itself, then its goroutines (into
			// its kept log) and its end: a stall must be diagnosable from
			// the test's output alone.
			_, ready := j.get("/readyz")
			_, live := j.get("/healthz")
			_, status := j.get("/statusz")
			report := progress.Report(want, got, parts) + childProgress(j.metrics)
			dumpGoroutines(j.cmd, j.log)
			t.Errorf("%s: not equal to the join after the broker came back: %s:\n%s\n%s/readyz: %s\n/healthz: %s\n/statusz: %s", j.name, why, diff, report, ready, live, status)
			continue
		}
		t.Logf("%s: equal to the join (%d rows) %v after the last record", j.name, len(want), time.Since(began).Round(time.Millisecond))
	}
}

// jsonlRows applies a run's JSON-lines output to a ReplacingMergeTree
// model (highest version wins) and returns the live rows; a version
// inserted twice with other values fails the test.
func jsonlRows(t *testing.T, path string) []cdcgen.JoinedRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	m := cdcgen.NewReplacingMergeTree()
	names := []string{"user_id", "firstname", "lastname", "domain_id", "domain_name"}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var c struct {
			Op        string                     `json:"op"`
			Version   uint64                     `json:"version"`
			ParentKey []json.RawMessage          `json:"parent_key"`
			ChildKey  []json.RawMessage          `json:"child_key"`
			Values    map[string]json.RawMessage `json:"values"`
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			break // a line being written
		}
		key := cdcgen.RowKey{Parent: rawText(c.ParentKey...)}
		if c.ChildKey == nil {
			key.Padded = true
		} else {
			key.Child = rawText(c.ChildKey...)
		}
		vals := make([]string, len(names))
		for i, n := range names {
			vals[i] = rawText(c.Values[n])
		}
		if err := m.Apply(key, c.Version, c.Op == "retract", vals); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	return m.Live()
}

// rawText renders JSON values as the oracle's text (strings unquoted,
// null as cdcgen.Null), joined by ','.
func rawText(vs ...json.RawMessage) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		var s string
		switch {
		case len(v) == 0 || string(v) == "null":
			parts[i] = cdcgen.Null
		case json.Unmarshal(v, &s) == nil:
			parts[i] = s
		default:
			parts[i] = string(v)
		}
	}
	return strings.Join(parts, ",")
}

// loader produces records in order with one client (its produces wait for
// a broker that is away: the client retries until it is back).
type loader struct {
	t  *testing.T
	cl *kgo.Client
}

func newLoader(t *testing.T, brokers string) *loader {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	return &loader{t: t, cl: cl}
}

// produce writes recs and waits for them.
func (l *loader) produce(recs []cdcgen.Record) {
	ctx := context.Background()
	for i := range recs {
		r := &recs[i]
		l.cl.Produce(ctx, &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value}, nil)
	}
	if err := l.cl.Flush(ctx); err != nil {
		l.t.Errorf("loader: %v", err)
	}
}

func (l *loader) close() {
	l.cl.Flush(context.Background())
	l.cl.Close()
}

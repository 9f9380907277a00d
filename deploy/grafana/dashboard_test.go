// Package grafana tests the Grafana dashboard deploy/grafana/cdcjoin.json:
// every PromQL expression parses with Prometheus' own parser, and every
// metric an expression names is exported by a running `cdcjoin run`
// (scraped from its /metrics), so no panel stays empty because of a typo or
// a renamed metric.
package grafana

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/deploy/internal/cdcjoinbin"
)

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// exprs returns every PromQL expression of the dashboard with the panel it
// belongs to: panel targets, and the metric queries of label_values(…)
// template variables.
func exprs(t *testing.T) (map[string]string, *dashboard) {
	t.Helper()
	data, err := os.ReadFile("cdcjoin.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("cdcjoin.json: %v", err)
	}
	out := map[string]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for i, tg := range p.Targets {
				out[fmt.Sprintf("panel %q target %d", p.Title, i)] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_]+\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		s, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(<selector>, <label>)", v.Name, s)
		}
		out["variable "+v.Name] = m[1]
	}
	return out, &d
}

// grafanaVars replaces Grafana's variables with values PromQL accepts.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$job", ".*", "$instance", ".*")

// metricNames parses every expression and returns the metric names they
// select, each with where it is used.
func metricNames(t *testing.T, ex map[string]string) map[string][]string {
	t.Helper()
	names := map[string][]string{}
	for where, e := range ex {
		if strings.TrimSpace(e) == "" {
			t.Errorf("%s: empty expression", where)
			continue
		}
		expr, err := promql.ParseExpr(grafanaVars.Replace(e))
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", where, e, err)
			continue
		}
		found := false
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				found = true
				if vs.Name == "" {
					t.Errorf("%s: a selector without a metric name: %s", where, vs)
				}
				names[vs.Name] = append(names[vs.Name], where)
			}
			return nil
		})
		if !found {
			t.Errorf("%s: %q selects no metric", where, e)
		}
	}
	return names
}

// TestDashboardParses: structure, the sections the dashboard must have,
// and every expression parses (no servers needed).
func TestDashboardParses(t *testing.T) {
	ex, d := exprs(t)
	if d.UID != "cdcjoin" || d.Title != "cdcjoin" {
		t.Errorf("uid %q title %q", d.UID, d.Title)
	}
	names := metricNames(t, ex)
	for _, want := range []string{
		"cdcjoin_keying_consumer_lag_records", "cdcjoin_join_consumer_lag_records", // lag per stage and partition
		"cdcjoin_keying_events_total", "cdcjoin_join_changes_total", // events/s
		"cdcjoin_sink_inserts_total", "cdcjoin_sink_rows_total", "cdcjoin_sink_retries_total", // sink
		"cdcjoin_state_keyspace_bytes",                                               // state per keyspace
		"cdcjoin_state_row_cache_hits_total", "cdcjoin_state_block_cache_hits_total", // cache hit rates
		"cdcjoin_catchup_records_total", "cdcjoin_catchup_seconds_bucket", // catch-up
		"cdcjoin_skew_hot_key_children", "cdcjoin_skew_busy_key_events", // hot and busy keys
		"cdcjoin_live", "cdcjoin_ready", // liveness
	} {
		if len(names[want]) == 0 {
			t.Errorf("the dashboard shows no %s", want)
		}
	}
	// Negative control: the parser refuses a broken expression.
	if _, err := promql.ParseExpr(grafanaVars.Replace(`sum by (op (rate(cdcjoin_join_changes_total[$__rate_interval]))`)); err == nil {
		t.Error("a broken expression parsed")
	}
}

// promql is Prometheus' own parser with its default options.
var promql = parser.NewParser(parser.Options{})

var bin cdcjoinbin.Builder

// TestDashboardMetricsExported runs `cdcjoin run` on the real Kafka and
// ClickHouse of `make test` (CDCJOIN_KAFKA_BROKERS, CDCJOIN_CLICKHOUSE_ADDR)
// with a workload that exercises every panel — a hot parent that gets
// salted, a bad record dead-lettered — then stops it, removes its state
// directory (a pod that lost its volume) and runs it again, so that the
// rebuild's catch-up metrics appear; every metric the dashboard names must
// be in one of the two instances' /metrics.
func TestDashboardMetricsExported(t *testing.T) {
	brokers, chAddr := os.Getenv("CDCJOIN_KAFKA_BROKERS"), os.Getenv("CDCJOIN_CLICKHOUSE_ADDR")
	if brokers == "" || chAddr == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CDCJOIN_KAFKA_BROKERS and CDCJOIN_CLICKHOUSE_ADDR must be set under CI (make test sets them)")
		}
		t.Skip("needs CDCJOIN_KAFKA_BROKERS and CDCJOIN_CLICKHOUSE_ADDR (make test)")
	}
	ex, _ := exprs(t)
	want := metricNames(t, ex)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	prefix := fmt.Sprintf("dash%d", time.Now().UnixNano()%1e9)
	users, domains := prefix+".public.users", prefix+".public.domains"
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopics(ctx, 2, 1, nil, users, domains); err != nil {
		t.Fatal(err)
	}
	produce := func(recs ...*kgo.Record) {
		t.Helper()
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	env := func(op string, after string) []byte {
		return []byte(fmt.Sprintf(`{"before":null,"after":%s,"source":{"connector":"postgresql","name":%q,"snapshot":"false","db":"shop","schema":"public","table":"t","lsn":1},"op":%q,"ts_ms":1700000000000}`, after, prefix, op))
	}
	user := func(id int, name string) *kgo.Record {
		return &kgo.Record{Topic: users, Key: []byte(fmt.Sprintf(`{"id":%d}`, id)), Value: env("c", fmt.Sprintf(`{"id":%d,"firstname":%q,"lastname":"L"}`, id, name))}
	}
	domain := func(id, uid int) *kgo.Record {
		return &kgo.Record{Topic: domains, Key: []byte(fmt.Sprintf(`{"id":%d}`, id)), Value: env("c", fmt.Sprintf(`{"id":%d,"user_id":%d,"domain_name":"d%d"}`, id, uid, id))}
	}
	var recs []*kgo.Record
	for u := 1; u <= 20; u++ {
		recs = append(recs, user(u, fmt.Sprintf("u%d", u)))
	}
	for d := 1; d <= 60; d++ {
		uid := 1 // user 1 is hot: 40 children
		if d > 40 {
			uid = 2 + d%19
		}
		recs = append(recs, domain(d, uid))
	}
	recs = append(recs, &kgo.Record{Topic: users, Key: []byte(`{"id":99}`), Value: []byte("not json: a bad record")})
	produce(recs...)

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "job.yaml")
	cfg := fmt.Sprintf(`name: %s
parent: {topic: %s, key: id}
child: {topic: %s, key: id, parent_key: user_id}
join: left
select: parent.id AS user_id, parent.firstname, child.id AS domain_id, child.domain_name
state: {dir: %s}
errors: {policy: dlq, dlq_topic: %s.dlq}
kafka:
  brokers: [%s]
  keyed_partitions: 4
  metrics_addr: 127.0.0.1:0
  commit_interval: 200ms
clickhouse: {addr: [%s], database: cdcjoin_dashboard, batch: {interval: 50ms}}
skew: {hot_children: 10, salts: 2}
`, prefix, users, domains, filepath.Join(dir, "state"), prefix, brokers, chAddr)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}

	got := map[string]bool{}
	missing := func() []string {
		var m []string
		for n := range want {
			if !got[n] {
				m = append(m, n)
			}
		}
		sort.Strings(m)
		return m
	}
	for round := 1; round <= 2; round++ {
		inst := start(t, ctx, cfgPath, filepath.Join(dir, fmt.Sprintf("run%d.log", round)))
		// Ready, then changes flowing into ClickHouse; in round 2 a few more
		// inputs so that the rates move after the rebuild.
		inst.wait(t, ctx, "/readyz 200", func() bool { return inst.get("/readyz") == 200 })
		if round == 2 {
			produce(user(3, "renamed"), domain(61, 3))
		}
		deadline := time.Now().Add(90 * time.Second)
		for {
			for _, n := range inst.scrape(t) {
				got[n] = true
			}
			if len(missing()) == 0 || time.Now().After(deadline) || (round == 1 && got["cdcjoin_sink_rows_total"] && inst.value(t, "cdcjoin_sink_rows_total") > 0 && inst.value(t, "cdcjoin_skew_hot_keys") > 0) {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		inst.stop(t)
		if round == 1 {
			// The pod lost its volume: the next start rebuilds from the topics.
			if err := os.RemoveAll(filepath.Join(dir, "state")); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, n := range missing() {
		t.Errorf("%s (used by %s) is not exported by cdcjoin run", n, strings.Join(want[n], ", "))
	}
}

// instance is a running `cdcjoin run`.
type instance struct {
	cmd  *exec.Cmd
	addr string
	log  string
	done chan error
}

var listenRE = regexp.MustCompile(`msg="serving metrics" .*addr=([0-9.:]+)`)

func start(t *testing.T, ctx context.Context, cfg, logPath string) *instance {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin.Path(t), "run", "--config", cfg)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = f, io.MultiWriter(f, pw)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	in := &instance{cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() { in.done <- cmd.Wait(); pw.Close(); f.Close() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case in.addr = <-addr:
	case err := <-in.done:
		t.Fatalf("cdcjoin run exited: %v\n%s", err, tail(logPath))
	case <-ctx.Done():
		t.Fatalf("no metrics address in the log\n%s", tail(logPath))
	}
	if _, _, err := net.SplitHostPort(in.addr); err != nil {
		t.Fatalf("metrics address %q: %v", in.addr, err)
	}
	return in
}

func (in *instance) get(path string) int {
	resp, err := http.Get("http://" + in.addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (in *instance) wait(t *testing.T, ctx context.Context, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		select {
		case err := <-in.done:
			t.Fatalf("cdcjoin run exited before %s: %v\n%s", what, err, tail(in.log))
		case <-ctx.Done():
			t.Fatalf("no %s\n%s", what, tail(in.log))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

var sampleRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})? (\S+)`)

func (in *instance) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + in.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := sampleRE.FindStringSubmatch(sc.Text()); m != nil {
			var v float64
			fmt.Sscan(m[2], &v)
			out[m[1]] += v
		}
	}
	return out
}

// scrape returns the metric names of the exposition (sample names:
// histograms as _bucket, _sum and _count).
func (in *instance) scrape(t *testing.T) []string {
	var names []string
	for n := range in.metrics(t) {
		names = append(names, n)
	}
	return names
}

func (in *instance) value(t *testing.T, name string) float64 { return in.metrics(t)[name] }

// stop sends SIGTERM (what Kubernetes does) and waits for exit 0.
func (in *instance) stop(t *testing.T) {
	t.Helper()
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-in.done:
		if err != nil {
			t.Fatalf("cdcjoin run after SIGTERM: %v\n%s", err, tail(in.log))
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("cdcjoin run did not stop within 60s of SIGTERM\n%s", tail(in.log))
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

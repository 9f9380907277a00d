package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func kstreams(args []string) error {
	fs := flag.NewFlagSet("kstreams", flag.ExitOnError)
	brokers := fs.String("brokers", "127.0.0.1:19092", "brokers")
	peerDir := fs.String("peer-dir", "bench/peers/kstreams", "the built Kafka Streams peer (target/ with the jar and lib/)")
	users := fs.String("users", "", "users topic")
	domains := fs.String("domains", "", "domains topic")
	guarantee := fs.String("guarantee", "exactly_once_v2", "processing.guarantee: exactly_once_v2 or at_least_once")
	threads := fs.Int("threads", 0, "num.stream.threads (0: the cores)")
	brokerPid := fs.Int("broker-pid", 0, "broker process id")
	expect := fs.String("expect", "", "a `cdcjoin replay --final` file of the same input: compare the output's final rows with it")
	javaBin := fs.String("java", "java", "java binary")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after")
	var confs multi
	fs.Var(&confs, "config", "an extra Kafka Streams property `K=V` (repeatable)")
	checkParts := fs.Bool("check-partitioning", true, "refuse source topics whose first records are not where Kafka's default partitioner puts their keys (false: run anyway, e.g. to show what the peer misses then)")
	fs.Parse(args)
	if *users == "" || *domains == "" {
		return errors.New("kstreams: --users and --domains are required")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	srcEnds, err := adm.ListEndOffsets(ctx, *users, *domains)
	if err != nil || srcEnds.Error() != nil {
		return fmt.Errorf("kstreams: source topics: %v %v", err, srcEnds.Error())
	}
	if *checkParts {
		if err := defaultPartitioned(ctx, *brokers, 1000, *users, *domains); err != nil {
			return fmt.Errorf("kstreams: %w", err)
		}
	}
	var input int64
	parts := 0
	srcEnds.Each(func(o kadm.ListedOffset) {
		input += o.Offset
		if o.Topic == *domains {
			parts++
		}
	})
	app := fmt.Sprintf("kstreams-fk-%d", time.Now().UnixMilli())
	output := app + ".out"
	if _, err := adm.CreateTopic(ctx, int32(parts), -1, nil, output); err != nil {
		return fmt.Errorf("kstreams: create %s: %w", output, err)
	}
	stateDir, err := os.MkdirTemp("", "kstreams-peer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stateDir)
	cp := filepath.Join(*peerDir, "target", "cdcjoin-kstreams-peer.jar") + ":" + filepath.Join(*peerDir, "target", "lib", "*")
	jargs := []string{"-cp", cp, "io.github.cdcjoin.peers.kstreams.FkJoinPeer", "--bootstrap", *brokers,
		"--users", *users, "--domains", *domains, "--output", output, "--app-id", app, "--guarantee", *guarantee, "--state-dir", stateDir}
	if *threads > 0 {
		jargs = append(jargs, "--threads", fmt.Sprint(*threads))
	}
	for _, c := range confs {
		jargs = append(jargs, "--config", c)
	}
	bCPU0 := procCPU(*brokerPid)
	start := time.Now()
	cmd := exec.Command(*javaBin, jargs...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	stop := func() error {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-waited:
			return err
		case <-time.After(2 * time.Minute):
			cmd.Process.Kill()
			return errors.New("did not stop within 2 minutes of SIGTERM")
		}
	}
	if err := waitFor(waited, *timeout, func() { stop() }, func() bool { return ksCaughtUp(ctx, adm, app, *users, *domains) }); err != nil {
		return fmt.Errorf("kstreams: the peer: %w", err)
	}
	wall := time.Since(start).Seconds()
	pCPU := procCPU(cmd.Process.Pid)
	bCPU := procCPU(*brokerPid) - bCPU0
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "kstreams: stopping the peer:", err)
	}
	fmt.Printf("system=kstreams guarantee=%s input_records=%d wall_s=%.2f records_per_s=%.0f peer_cpu_s=%.2f broker_cpu_s=%.2f records_per_cpu_s=%.0f\n",
		*guarantee, input, wall, float64(input)/wall, pCPU, bCPU, float64(input)/pCPU)
	if *expect == "" {
		return nil
	}
	got, err := finalRows(ctx, *brokers, output)
	if err != nil {
		return err
	}
	want, err := expectedRows(*expect)
	if err != nil {
		return err
	}
	printCheck(want, got)
	return nil
}

// defaultPartitioned checks the records at offsets below n of every
// partition of topics (written without transactions, as brokercost load
// writes them): each must be on the partition Kafka's default partitioner
// gives its key. Kafka Streams assumes so of a table's source topic (its
// foreign-key join sends a subscription to the partition murmur2 of the
// foreign key names and looks the parent up in that partition's store
// only): on other partitioning it silently misses rows.
func defaultPartitioned(ctx context.Context, brokers string, n int, topics ...string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	if err != nil || ends.Error() != nil {
		return fmt.Errorf("source topics: %v %v", err, ends.Error())
	}
	type tp struct {
		t string
		p int32
	}
	parts := map[string]int32{}
	left := map[tp]int64{} // partition → the offset reading stops at
	ends.Each(func(o kadm.ListedOffset) {
		parts[o.Topic]++
		if o.Offset > 0 {
			left[tp{o.Topic, o.Partition}] = min(o.Offset, int64(n))
		}
	})
	kafkaPartition := kafkaPartitioner()
	for len(left) > 0 {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if pctx.Err() != nil && fs.Empty() {
			return fmt.Errorf("checking the partitioning: nothing read for 30 s, %d partitions left", len(left))
		}
		if err := fs.Err(); err != nil {
			return fmt.Errorf("checking the partitioning: %w", err)
		}
		var bad error
		fs.EachRecord(func(r *kgo.Record) {
			k := tp{r.Topic, r.Partition}
			if _, ok := left[k]; !ok || bad != nil {
				return
			}
			if r.Key != nil {
				if want := kafkaPartition(r.Key, parts[r.Topic]); want != r.Partition {
					bad = fmt.Errorf("%s partition %d offset %d: key %s is on partition %d, Kafka's default partitioner puts it on %d: "+
						"Kafka Streams would miss joins (load with brokercost load --partitioner kafka)", r.Topic, r.Partition, r.Offset, r.Key, r.Partition, want)
				}
			}
			if r.Offset+1 >= left[k] {
				delete(left, k)
			}
		})
		if bad != nil {
			return bad
		}
	}
	return nil
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// ksCaughtUp reports whether application app committed, for every
// partition of the sources and of its own subscription and repartition
// topics, at least the offset a read_committed consumer ends at.
func ksCaughtUp(ctx context.Context, adm *kadm.Client, app string, sources ...string) bool {
	tds, err := adm.ListTopics(ctx)
	if err != nil {
		return false
	}
	topics := slices.Clone(sources)
	internal := 0
	for _, t := range tds.Names() {
		if strings.HasPrefix(t, app+"-") && strings.HasSuffix(t, "-topic") {
			topics = append(topics, t)
			internal++
		}
	}
	if internal == 0 {
		return false // the application has not set up its topics yet
	}
	ends, err := adm.ListCommittedOffsets(ctx, topics...)
	if err != nil || ends.Error() != nil {
		return false
	}
	com, err := adm.FetchOffsets(ctx, app)
	if err != nil || com.Error() != nil {
		return false
	}
	ok := true
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset == 0 {
			return
		}
		c, found := com.Lookup(o.Topic, o.Partition)
		if !found || c.At < o.Offset {
			ok = false
		}
	})
	return ok
}

// finalRows reads topic to its end (read_committed) and returns the last
// value of every key whose last record is not a tombstone, as canonical
// JSON.
func finalRows(ctx context.Context, brokers, topic string) ([]string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	last := map[string][]byte{}
	// A transactional partition ends with a commit marker, which a
	// read_committed consumer never sees: reading ends at the last
	// record's offset, or when nothing came for 10 s.
	for len(left) > 0 {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if fs.IsClientClosed() || (fs.Empty() && pctx.Err() != nil) {
			break
		}
		if err := fs.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			last[string(r.Key)] = r.Value
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
		})
	}
	var rows []string
	for _, v := range last {
		if v != nil {
			c, err := canonical(v)
			if err != nil {
				return nil, err
			}
			rows = append(rows, c)
		}
	}
	return rows, nil
}

// expectedRows reads a --final file: one JSON object per line.
func expectedRows(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		c, err := canonical(sc.Bytes())
		if err != nil {
			return nil, err
		}
		rows = append(rows, c)
	}
	return rows, sc.Err()
}

// canonical re-encodes a JSON object with sorted keys and exact numbers.
func canonical(b []byte) (string, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return "", fmt.Errorf("row %q: %w", b, err)
	}
	out, err := json.Marshal(m)
	return string(out), err
}

// printCheck prints how got (final rows) differs from want: the rows
// missing, and the extra ones, split into stale (an outdated version of an
// expected row: same domain_id) and rows that should have left the join.
func printCheck(want, got []string) {
	missing, extra := diffRows(want, got)
	stale := staleRows(want, extra, "domain_id")
	fmt.Printf("check: expected %d rows, output %d; missing %d, extra or stale %d (stale: %d, an expected row of the same domain_id has other values; extra: %d, no expected row has its domain_id)\n",
		len(want), len(got), len(missing), len(extra), stale, len(extra)-stale)
	for i, r := range missing {
		if i == 3 {
			break
		}
		fmt.Printf("  missing: %s\n", r)
	}
	for i, r := range extra {
		if i == 3 {
			break
		}
		fmt.Printf("  extra:   %s\n", r)
	}
}

// changesFinal reads a JSON-lines sink's file (sink/jsonl: upserts and
// retractions with versions) and returns, as canonical JSON, the values of
// every row key whose highest-versioned change is an upsert.
func changesFinal(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type latest struct {
		version int64
		op      string
		values  json.RawMessage
	}
	rows := map[string]latest{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var c struct {
			Op        string          `json:"op"`
			Version   int64           `json:"version"`
			ParentKey json.RawMessage `json:"parent_key"`
			ChildKey  json.RawMessage `json:"child_key"`
			Values    json.RawMessage `json:"values"`
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		k := string(c.ParentKey) + "|" + string(c.ChildKey)
		if l, ok := rows[k]; !ok || c.Version > l.version {
			rows[k] = latest{c.Version, c.Op, c.Values}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var out []string
	for _, l := range rows {
		if l.op == "upsert" {
			c, err := canonical(l.values)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// staleRows counts the rows of extra whose column col (a row key) some
// row of want has too: an outdated version of an expected row rather than
// a row that should have left the join.
func staleRows(want, extra []string, col string) int {
	keys := map[string]bool{}
	key := func(r string) string {
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(r), &m) != nil {
			return ""
		}
		return string(m[col])
	}
	for _, r := range want {
		keys[key(r)] = true
	}
	n := 0
	for _, r := range extra {
		if k := key(r); k != "" && keys[k] {
			n++
		}
	}
	return n
}

// diffRows returns the rows of want not in got and of got not in want
// (multisets).
func diffRows(want, got []string) (missing, extra []string) {
	n := map[string]int{}
	for _, r := range want {
		n[r]++
	}
	for _, r := range got {
		if n[r] > 0 {
			n[r]--
		} else {
			extra = append(extra, r)
		}
	}
	for r, c := range n {
		for ; c > 0; c-- {
			missing = append(missing, r)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	return missing, extra
}

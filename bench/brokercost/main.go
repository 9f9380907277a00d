// Command brokercost measures what `cdcjoin run` costs a real Kafka broker
// and how fast an instance with intact state is ready again.
//
//	brokercost load --brokers B --input history.jsonl --prefix P [--partitioner kafka|file]
//	brokercost run  --brokers B --cdcjoin bin/cdcjoin --config job.yaml --prefix P \
//	                --broker-pid PID --log-dir DIR [--restart] [--cpuprofile FILE] [--expect final.jsonl]
//	brokercost kstreams --brokers B --peer-dir bench/peers/kstreams --users P.users --domains P.domains \
//	                --broker-pid PID [--guarantee exactly_once_v2] [--expect final.jsonl]
//
// load writes a replay file (`cdcjoin bench --write-history`) to the
// topics P.users and P.domains (created with the file's partition count),
// each keyed record on the partition Kafka's default partitioner gives its
// key (murmur2), as Debezium's producer would put it: the bench's files put
// their synthetic records (hot parent, renames) on one extra partition,
// which a consumer that relies on the default partitioning (Kafka Streams'
// foreign-key join looks the parent up on the partition murmur2 of the
// foreign key names) would misread; --partitioner file keeps the file's.
// run starts `cdcjoin run` (its config's topics and group must be those of
// the load), waits until both consumer groups have committed the end of
// every partition they read, and prints one line of figures: input
// records, wall seconds, records/s, cdcjoin and broker CPU seconds
// (/proc/PID/stat), and the records and bytes (log segment sizes in the
// broker's log dir, so compressed as stored) of the source topics and of
// what cdcjoin wrote (its internal topics). With --restart it then stops
// cdcjoin (SIGTERM), starts it again on the same state and prints how long
// /readyz took to answer 200. The config's consumer groups must be fresh
// (no committed offsets: a rerun needs a new kafka.group and state.dir).
// With --expect it compares the final rows of the output file (the latest
// version of each row key, not a retraction) with a `cdcjoin replay
// --final` file of the same input.
//
// kstreams first checks that the source topics' first records are where
// Kafka's default partitioner puts their keys (Kafka Streams' assumption;
// --check-partitioning=false skips it), then runs the Kafka Streams peer's
// foreign-key join (FkJoinPeer of bench/peers/kstreams, built there with
// mvn -q package) on the same topics, as a fresh application, waits until it has committed the end of
// every topic it consumes (the sources and its subscription topics; ends
// as read_committed consumers see them), prints the same figures (the
// peer's CPU read from /proc when it caught up), stops it, and with
// --expect compares its output topic's final rows with a `cdcjoin replay
// --final` file of the same input.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/engine"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: brokercost load|run|kstreams [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "load":
		err = load(os.Args[2:])
	case "run":
		err = run(os.Args[2:])
	case "kstreams":
		err = kstreams(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "brokercost:", err)
		os.Exit(1)
	}
}

func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	brokers := fs.String("brokers", "127.0.0.1:19092", "brokers")
	input := fs.String("input", "", "replay file")
	prefix := fs.String("prefix", "", "topic prefix")
	partitioner := fs.String("partitioner", "kafka", "`kafka`: a keyed record goes to murmur2(key) % partitions, as Kafka's default partitioner (Debezium's producer) puts it; file: to the file's partition")
	fs.Parse(args)
	if *partitioner != "kafka" && *partitioner != "file" {
		return fmt.Errorf("load: --partitioner %q: want kafka or file", *partitioner)
	}
	f, err := os.Open(*input)
	if err != nil {
		return err
	}
	defer f.Close()
	// First pass: topics and partitions.
	parts := map[string]int32{}
	if err := engine.ReadJSONL(f, *input, func(r *engine.Record) error {
		parts[r.Topic] = max(parts[r.Topic], r.Partition+1)
		return nil
	}); err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(200000))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx := context.Background()
	adm := kadm.NewClient(cl)
	names := map[string]string{}
	for t, n := range parts {
		name := *prefix + "." + t[strings.LastIndex(t, ".")+1:]
		names[t] = name
		if _, err := adm.CreateTopic(ctx, n, 1, nil, name); err != nil {
			return err
		}
	}
	// A new topic's partitions may have no leader for a moment.
	for wait := time.Now(); ; {
		td, err := adm.ListTopics(ctx, slices.Collect(maps.Values(names))...)
		ready := err == nil
		for _, t := range td {
			for _, p := range t.Partitions {
				ready = ready && t.Err == nil && p.Err == nil && p.Leader >= 0
			}
		}
		if ready || time.Since(wait) > 30*time.Second {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := f.Seek(0, 0); err != nil {
		return err
	}
	var first error
	n, moved := 0, 0
	kafkaPartition := kafkaPartitioner()
	start := time.Now()
	err = engine.ReadJSONL(f, *input, func(r *engine.Record) error {
		n++
		rec := &kgo.Record{Topic: names[r.Topic], Partition: r.Partition,
			Key: append([]byte(nil), r.Key...), Value: append([]byte(nil), r.Value...)}
		if r.Value == nil {
			rec.Value = nil
		}
		if *partitioner == "kafka" && r.Key != nil {
			rec.Partition = kafkaPartition(rec.Key, parts[r.Topic])
			if rec.Partition != r.Partition {
				moved++
			}
		}
		cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil && first == nil {
				first = err
			}
		})
		return nil
	})
	if err != nil {
		return err
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	if first != nil {
		return first
	}
	fmt.Printf("loaded %d records into %v in %v (partitioner %s: %d records on another partition than the file's)\n",
		n, names, time.Since(start).Round(time.Millisecond), *partitioner, moved)
	return nil
}

// kafkaPartitioner returns a function giving the partition Kafka's default partitioner (the
// Java client's, which Debezium's Connect producer uses) gives a record
// with key among n partitions: murmur2(key) & 0x7fffffff % n.
// One partitioner serves every keyed record (its stickiness is for records
// without a key); it is not safe for concurrent use.
func kafkaPartitioner() func(key []byte, n int32) int32 {
	tp := kgo.StickyKeyPartitioner(nil).ForTopic("")
	return func(key []byte, n int32) int32 {
		return int32(tp.Partition(&kgo.Record{Key: key}, int(n)))
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	brokers := fs.String("brokers", "127.0.0.1:19092", "brokers")
	bin := fs.String("cdcjoin", "bin/cdcjoin", "cdcjoin binary")
	cfgPath := fs.String("config", "", "job config")
	brokerPid := fs.Int("broker-pid", 0, "broker process id")
	logDir := fs.String("log-dir", "", "broker log dir")
	restart := fs.Bool("restart", false, "then restart on the same state and time /readyz")
	output := fs.String("output", "", "the JSON-lines output file of cdcjoin run (removed at the end)")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after")
	cpuProfile := fs.String("cpuprofile", "", "pass --cpuprofile `file` to the measured cdcjoin run (not to the restart)")
	expect := fs.String("expect", "", "a `cdcjoin replay --final` file of the same input: compare the final rows of the output (the latest version of every row key) with it")
	fs.Parse(args)
	b, err := os.ReadFile(*cfgPath)
	if err != nil {
		return err
	}
	cfg, err := config.Parse(b, *cfgPath)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	srcEnds, err := adm.ListEndOffsets(ctx, cfg.Parent.Topic, cfg.Child.Topic)
	if err != nil {
		return err
	}
	var input int64
	srcEnds.Each(func(o kadm.ListedOffset) { input += o.Offset })

	for _, g := range []string{cfg.Kafka.KeyingGroup(), cfg.Kafka.JoinGroup()} {
		com, err := adm.FetchOffsets(ctx, g)
		if err != nil {
			return err
		}
		if len(com.Offsets()) > 0 {
			return fmt.Errorf("run: consumer group %s has committed offsets already: give the measured run a fresh kafka.group (and state.dir)", g)
		}
	}
	bCPU0 := procCPU(*brokerPid)
	start := time.Now()
	runArgs := []string{"run", "--config", *cfgPath, "--output", *output, "--log-level", "warn"}
	if *cpuProfile != "" {
		runArgs = append(runArgs, "--cpuprofile", *cpuProfile)
	}
	cmd := exec.Command(*bin, runArgs...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer os.Remove(*output)
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	stop := func() (float64, error) {
		cmd.Process.Signal(syscall.SIGTERM)
		err := <-waited
		u := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		return tv(u.Utime) + tv(u.Stime), err
	}
	if err := waitFor(waited, *timeout, func() { stop() }, func() bool { return caughtUp(ctx, adm, cfg) }); err != nil {
		return fmt.Errorf("cdcjoin run: %w", err)
	}
	wall := time.Since(start).Seconds()
	bCPU := procCPU(*brokerPid) - bCPU0
	cCPU, err := stop()
	if err != nil {
		return fmt.Errorf("cdcjoin run: %w", err)
	}
	internal := []string{cfg.Kafka.KeyedTopic(), cfg.Kafka.ChildIndexTopic(), cfg.Kafka.ParentIndexTopic()}
	ends, err := adm.ListEndOffsets(ctx, internal...)
	if err != nil {
		return err
	}
	var written int64
	ends.Each(func(o kadm.ListedOffset) { written += o.Offset })
	srcBytes := dirBytes(*logDir, cfg.Parent.Topic, cfg.Child.Topic)
	outBytes := dirBytes(*logDir, internal...)
	fmt.Printf("input_records=%d wall_s=%.2f records_per_s=%.0f cdcjoin_cpu_s=%.2f broker_cpu_s=%.2f source_bytes=%d written_records=%d written_bytes=%d records_per_input=%.3f bytes_per_input=%.1f written_over_source_bytes=%.3f\n",
		input, wall, float64(input)/wall, cCPU, bCPU, srcBytes, written, outBytes,
		float64(written)/float64(input), float64(outBytes)/float64(input), float64(outBytes)/float64(srcBytes))
	for _, t := range internal {
		var n int64
		ends.Each(func(o kadm.ListedOffset) {
			if o.Topic == t {
				n += o.Offset
			}
		})
		fmt.Printf("  %s: records=%d bytes=%d\n", t, n, dirBytes(*logDir, t))
	}
	if *expect != "" {
		got, err := changesFinal(*output)
		if err != nil {
			return err
		}
		want, err := expectedRows(*expect)
		if err != nil {
			return err
		}
		printCheck(want, got)
	}
	if !*restart {
		return nil
	}
	start = time.Now()
	cmd = exec.Command(*bin, "run", "--config", *cfgPath, "--output", *output, "--log-level", "info")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	waited = make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	url := "http://" + cfg.Kafka.MetricsAddr + "/readyz"
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Since(start) > 5*time.Minute {
			stop()
			return errors.New("restart: not ready within 5 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ready := time.Since(start)
	stop()
	fmt.Printf("restart_ready_s=%.2f\n", ready.Seconds())
	return nil
}

// caughtUp reports whether the keying and join groups committed the end
// of every partition of their topics.
func caughtUp(ctx context.Context, adm *kadm.Client, cfg *config.Config) bool {
	for _, g := range []struct {
		group  string
		topics []string
	}{{cfg.Kafka.KeyingGroup(), []string{cfg.Parent.Topic, cfg.Child.Topic}}, {cfg.Kafka.JoinGroup(), []string{cfg.Kafka.KeyedTopic()}}} {
		ends, err := adm.ListEndOffsets(ctx, g.topics...)
		if err != nil || ends.Error() != nil {
			return false
		}
		com, err := adm.FetchOffsets(ctx, g.group)
		if err != nil || com.Error() != nil {
			return false
		}
		ok := true
		ends.Each(func(o kadm.ListedOffset) {
			c, found := com.Lookup(o.Topic, o.Partition)
			if !found || c.At < o.Offset {
				ok = false
			}
		})
		if !ok {
			return false
		}
	}
	return true
}

// waitFor polls done every 100 ms until it holds; it fails when the
// process (waited) exits first, or after timeout (then stop stops it).
func waitFor(waited <-chan error, timeout time.Duration, stop func(), done func() bool) error {
	deadline := time.Now().Add(timeout)
	for !done() {
		select {
		case err := <-waited:
			return fmt.Errorf("exited early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return errors.New("timed out")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// procCPU returns the user+system CPU seconds of pid (0 without one).
func procCPU(pid int) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100 // USER_HZ
}

// dirBytes sums the log segments of topics' partition directories.
func dirBytes(logDir string, topics ...string) int64 {
	if logDir == "" {
		return 0
	}
	var n int64
	for _, t := range topics {
		ms, _ := filepath.Glob(filepath.Join(logDir, t+"-*", "*.log"))
		for _, m := range ms {
			if fi, err := os.Stat(m); err == nil {
				n += fi.Size()
			}
		}
	}
	return n
}

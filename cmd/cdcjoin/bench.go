package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cdcjoin/cdcjoin/bench"
)

func benchCommand() command {
	c := command{
		name:    "bench",
		summary: "benchmark the pipeline on generated Debezium traffic; report.json, REPORT.md, charts",
		usage:   "[--rows N | --sweep N,N,…] [--out DIR] [--pipeline engine|kafka] [--brokers H:P,…] [--clickhouse H:P] [--write-jsonl DIR] [--write-history DIR --history-ops N] [--peer flink,dbsp]",
	}
	c.run = func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		fs := newFlags(&c, stderr, `
Generates a seeded users/domains workload (cdcgen: real Debezium JSON) and
drives the real pipeline through four phases: snapshot (op=r initial load),
cdc (flat out), cdc_rate (paced at half the cdc rate, for latency) and
storm (renames of a hot parent with many children). Writes report.json,
REPORT.md and SVG charts into --out, including a terabyte projection.
With --write-jsonl it only writes the workload as replay input files.
With --peer it only compares: the workload (snapshot, cdc and storm records,
without TOAST placeholders) is generated once and replayed by cdcjoin and by
each peer, interleaved for --peer-rounds rounds; the report gives each
system's median records/s and the ratio (see bench/README.md).
With --write-history it only writes a seeded CDC history with every hard case
(the correctness tests' operation mix) as replay input, with the expected
join of its final tables: the replay benchmark's input, for any engine.`)
		rows := fs.String("rows", "1e6", "source rows (users + domains) of the snapshot, e.g. 1e6")
		sweep := fs.String("sweep", "", "comma-separated scale points, e.g. 1e6,1e7,1e8 (bounded by free disk)")
		out := fs.String("out", "bench-out", "output `dir` for report.json, REPORT.md, charts and state")
		pipeline := fs.String("pipeline", "engine", "engine (in-process decode+key+join) or kafka (runtime on in-process kfake or --brokers)")
		brokers := fs.String("brokers", "", "real Kafka brokers `host:port,…` (with --pipeline kafka)")
		producers := fs.Int("producers", 4, "parallel producers (kafka)")
		ch := fs.String("clickhouse", "", "ClickHouse native `host:port`: use the ClickHouse sink instead of the null sink")
		jsonl := fs.String("write-jsonl", "", "write the workload as replay JSONL files into `dir` and exit")
		history := fs.String("write-history", "", "write a seeded CDC history of --history-ops operations (the oracle's mix) and its expected join into `dir` and exit")
		historyOps := fs.String("history-ops", "1e6", "operations of the --write-history history")
		historyUsers := fs.String("history-users", "0", "users in the --write-history snapshot (0: 200)")
		historyDomains := fs.String("history-domains", "0", "domains in the --write-history snapshot (0: 400)")
		historyPeers := fs.Bool("history-peers", false, "a --write-history history the peers can read (--peer-input): no truncates, no TOAST placeholders")
		render := fs.String("render-charts", "", "draw the SVG charts of `dir`/report.json again (this version's drawing) and exit")
		renderReport := fs.String("render-report", "", "recompute the projection of `dir`/report.json with this version and write its REPORT.md and charts again, and exit")
		seed := fs.Int64("seed", 1, "workload seed")
		children := fs.Float64("children", 2, "average children per parent")
		skew := fs.Float64("skew", 0, "Zipf skew (> 1) of children's parents; 0 = uniform")
		hot := fs.Int64("hot-children", -1, "children of the storm's hot parent (-1: min(rows/20, 1e6))")
		upads := fs.Int("user-pads", 20, "unselected pad columns per user row")
		dpads := fs.Int("domain-pads", 10, "unselected pad columns per domain row")
		padBytes := fs.Int("pad-bytes", 16, "bytes per pad column")
		schema := fs.String("schema", "off", "Debezium JSON schemas: off, on or mixed")
		parts := fs.Int("partitions", 8, "partitions per source topic")
		cdc := fs.String("cdc-events", "0", "records in the flat-out cdc phase (0: max(rows/5, 20000))")
		rate := fs.Float64("rate", 0, "target rate of the cdc_rate phase, records/s (0: half the measured cdc rate)")
		rateDur := fs.Duration("rate-duration", 15*time.Second, "length of the cdc_rate phase")
		renames := fs.Int("storm-renames", 10, "renames of the hot parent in the storm phase")
		gap := fs.Int("storm-gap", 5000, "cdc records between two storm renames")
		noToast := fs.Bool("no-toast", false, "no TOAST placeholders in the workload (for systems that would store the placeholder as the value, such as a Kafka Streams peer)")
		stormRate := fs.Float64("storm-rate", 0, "pace the storm phases at this many records/s (0: flat out; -1: the cdc_rate phase's rate)")
		compare := fs.Bool("storm-compare", false, "run the storm once per hot-key variant, side by side (engine: without and with fair fan-out; kafka: also with salting)")
		rounds := fs.Int("storm-rounds", 1, "with --storm-compare: alternate the variants this many times (the report shows medians)")
		instances := fs.Int("instances", 1, "instances of the runtime (kafka), each with its own state and sink")
		cacheMB := fs.Int("cache-mb", 0, "pebble block cache MiB (default: state.cache_mb's, for the engine a sixteenth of the memory, 64 MiB to 4 GiB; 64 on Kafka; for single runs and sweeps alike)")
		batchEv := fs.Int("batch-events", 1000, "events per state commit")
		sync := fs.Bool("sync", true, "fsync every state commit")
		noRebuild := fs.Bool("no-rebuild", false, "skip the rebuild phase (engine: rebuilding a keyed partition's state from the compacted keyed topic)")
		bulkMB := fs.Int("bulk-load-mb", 0, "state.bulk_load_mb: sort memory of the snapshot's bulk load (0: default 256; -1: off, rows go through the memtable)")
		memtableMB := fs.Int("memtable-mb", 0, "state.memtable_mb (0: the default)")
		rowCacheMB := fs.Int("row-cache-mb", 0, "state.row_cache_mb (0: the default; -1: off)")
		linger := fs.Duration("linger", 20*time.Millisecond, "commit a partial batch after this long (engine)")
		probe := fs.Int("probe-every", 200, "one latency probe per this many records")
		keep := fs.Bool("keep-state", false, "keep the pebble state directories")
		note := fs.String("machine-note", "", "free text describing the machine (shared cores, load, disk)")
		quiet := fs.Bool("quiet", false, "no progress lines on stderr")
		cpuProfile := fs.String("cpuprofile", "", "write the CPU profile of the run to `file` (a sweep: one per point, `file`.<rows>)")
		peer := fs.String("peer", "", "compare with peer systems on one workload: flink (needs a JDK 17+ and Maven), dbsp (needs cargo), or both: flink,dbsp")
		peerRounds := fs.Int("peer-rounds", 2, "interleaved rounds of cdcjoin and each peer (--peer)")
		peerCheck := fs.Bool("peer-check", true, "check each peer's final join against cdcjoin's first (--peer)")
		peerCache := fs.String("peer-cache", "", "`dir` of built peers (default: the user cache dir's cdcjoin/peers)")
		flinkConf := fs.String("flink-conf", "", "extra Flink options `KEY=VALUE,…` for the Flink peer")
		dbspStep := fs.Int("dbsp-step", 10000, "input records per DBSP transaction (DBSP peer)")
		peerInput := fs.String("peer-input", "", "compare on these replay `files` (comma-separated: a --write-history --history-peers history.jsonl) instead of a generated workload (--peer)")
		shape := fs.String("shape", "", "benchmark a multi-table plan instead: chain (users ⋈ domains ⋈ dns_records) or star (domains ⋈ users ⋈ registrars), on a cdcgen multi-table history, against the two-table join of users and domains; see bench/README.md")
		shapeRounds := fs.Int("shape-rounds", 3, "interleaved rounds of every system (--shape)")
		dbspMemory := fs.Bool("dbsp-memory", false, "keep the DBSP peer's state in memory (default: DBSP storage on disk)")
		var pi bench.ProjectionInput
		fs.Float64Var(&pi.ParentBytes, "tb-parent-bytes", 4e12, "projection: parent (users) table bytes")
		fs.Float64Var(&pi.ChildBytes, "tb-child-bytes", 2e12, "projection: child (domains) table bytes")
		fs.Float64Var(&pi.ParentRowBytes, "tb-parent-row-bytes", 1000, "projection: average parent row bytes")
		fs.Float64Var(&pi.ChildRowBytes, "tb-child-row-bytes", 250, "projection: average child row bytes")
		fs.Float64Var(&pi.CoresPerInstance, "tb-cores", 8, "projection: cores per instance")
		fs.Float64Var(&pi.DiskPerInstanceGB, "tb-disk-gb", 1900, "projection: usable disk GB per instance")
		fs.Float64Var(&pi.Utilization, "tb-utilization", 0.7, "projection: usable fraction of an instance's cores")
		fs.Float64Var(&pi.TargetSnapshotHours, "tb-snapshot-hours", 24, "projection: target snapshot hours")
		fs.Float64Var(&pi.SinkRowsPerSecond, "tb-sink-rows", 1e6, "projection: ClickHouse ingest rows/s")
		fs.Float64Var(&pi.CDCRate, "tb-cdc-rate", 50000, "projection: steady CDC records/s after the snapshot")
		fs.Float64Var(&pi.CDCPeakFactor, "tb-cdc-peak", 3, "projection: CDC peak-to-average ratio")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		n, err := parseCount(*rows)
		if err != nil {
			return fmt.Errorf("cdcjoin bench: --rows: %v: %w", err, errUsage)
		}
		cdcN, err := parseCount(*cdc)
		if err != nil {
			return fmt.Errorf("cdcjoin bench: --cdc-events: %v: %w", err, errUsage)
		}
		var points []int64
		if *sweep != "" {
			for _, f := range strings.Split(*sweep, ",") {
				v, err := parseCount(strings.TrimSpace(f))
				if err != nil {
					return fmt.Errorf("cdcjoin bench: --sweep: %v: %w", err, errUsage)
				}
				points = append(points, v)
			}
		}
		o := bench.Options{
			Workload: bench.Workload{Seed: *seed, Rows: n, ChildrenPerParent: *children, Skew: *skew, HotChildren: *hot,
				UserPads: *upads, DomainPads: *dpads, PadBytes: *padBytes, Schema: *schema, Partitions: *parts,
				CDCEvents: cdcN, Rate: *rate, RateDuration: *rateDur, StormRenames: *renames, StormGap: *gap, StormRate: *stormRate, NoToast: *noToast},
			Pipeline: *pipeline, Producers: *producers, StormCompare: *compare, StormRounds: *rounds, Instances: *instances, ClickHouse: *ch, Sweep: points, CacheMB: *cacheMB,
			BatchEvents: *batchEv, Sync: *sync, NoRebuild: *noRebuild, BulkLoadMB: *bulkMB, MemTableMB: *memtableMB, RowCacheMB: *rowCacheMB, Linger: *linger, ProbeEvery: *probe, Dir: *out, KeepState: *keep,
			Projection: pi, MachineNote: *note,
		}
		if *brokers != "" {
			o.Brokers = strings.Split(*brokers, ",")
		}
		if !*quiet {
			o.Progress = func(line string) { fmt.Fprintln(stderr, line) }
		}
		if *render != "" {
			return bench.RenderCharts(*render)
		}
		if *renderReport != "" {
			return bench.RenderReport(*renderReport)
		}
		if *history != "" {
			ops, err := parseCount(*historyOps)
			if err != nil {
				return fmt.Errorf("cdcjoin bench: --history-ops: %v: %w", err, errUsage)
			}
			cmd := "cdcjoin bench " + strings.Join(args, " ")
			hu, err := parseCount(*historyUsers)
			if err != nil {
				return fmt.Errorf("cdcjoin bench: --history-users: %v: %w", err, errUsage)
			}
			hd, err := parseCount(*historyDomains)
			if err != nil {
				return fmt.Errorf("cdcjoin bench: --history-domains: %v: %w", err, errUsage)
			}
			info, err := bench.WriteHistory(*history, bench.HistoryOptions{Seed: *seed, Ops: int(ops), Schema: *schema,
				Users: int(hu), Domains: int(hd), Peers: *historyPeers}, cmd)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "wrote %s: %d records, %d bytes, %d truncates; %d inner / %d left join rows expected\n",
				filepath.Join(*history, "history.jsonl"), info.Records, info.Bytes, info.Truncates, info.InnerRows, info.LeftRows)
			return nil
		}
		if *jsonl != "" {
			files, err := bench.WriteJSONL(ctx, o, *jsonl)
			if err != nil {
				return err
			}
			for _, f := range files {
				fmt.Fprintln(stdout, f)
			}
			return nil
		}
		if *shape != "" && *peer == "" {
			// Like --peer: the replay path's default (no fsync) unless --sync was given.
			if !flagGiven(fs, "sync") {
				o.Sync = false
			}
			rep, err := bench.RunPlan(ctx, o, *shape, *shapeRounds, *cpuProfile)
			if rep != nil {
				fmt.Fprintf(stdout, "wrote %s and %s\n", filepath.Join(*out, "report.json"), filepath.Join(*out, "REPORT.md"))
			}
			return err
		}
		if *peer != "" {
			if *cpuProfile != "" {
				stop, err := startCPUProfile(*cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			// The peers keep no durable state here (Flink takes no checkpoints,
			// DBSP none either): compare with cdcjoin's replay default (no
			// fsync) unless --sync was given.
			if !flagGiven(fs, "sync") {
				o.Sync = false
			}
			po := bench.PeerOptions{Peers: strings.Split(*peer, ","), Rounds: *peerRounds, Check: *peerCheck, CacheDir: *peerCache,
				DBSPStep: *dbspStep, DBSPInMemory: *dbspMemory, Shape: *shape}
			if *flinkConf != "" {
				po.FlinkConf = strings.Split(*flinkConf, ",")
			}
			if *peerInput != "" {
				po.Input = strings.Split(*peerInput, ",")
			}
			rep, err := bench.RunPeers(ctx, o, po)
			if rep != nil {
				fmt.Fprintf(stdout, "wrote %s and %s\n", filepath.Join(*out, "report.json"), filepath.Join(*out, "REPORT.md"))
			}
			return err
		}
		// Every point is profiled for the stage figures; the profile is
		// written where --cpuprofile says.
		o.CPUProfile = *cpuProfile
		rep, err := bench.Run(ctx, o)
		if rep != nil && len(rep.Points) > 0 {
			fmt.Fprintf(stdout, "wrote %s and %s\n", filepath.Join(*out, "report.json"), filepath.Join(*out, "REPORT.md"))
		}
		return err
	}
	return c
}

// flagGiven reports whether the flag name was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// parseCount parses 1000000, 1e6 or 2.5e6.
func parseCount(s string) (int64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1e15 {
		return 0, fmt.Errorf("%q is not a count like 1e6", s)
	}
	return int64(f), nil
}

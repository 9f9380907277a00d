package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"

	"github.com/cdcjoin/cdcjoin/bench/peers"
	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/row"
)

// Peer names accepted by PeerOptions.Peers.
const (
	PeerFlink = "flink" // Flink 2.3 SQL regular join (peers.Flink)
	PeerDBSP  = "dbsp"  // a DBSP circuit, Feldera's dbsp crate (peers.DBSP)
)

// PeerOptions configure RunPeers.
type PeerOptions struct {
	// Peers to run next to cdcjoin (PeerFlink).
	Peers []string
	// Rounds of the interleaved runs (cdcjoin, peer, cdcjoin, peer, …;
	// default 2).
	Rounds int
	// Check runs each peer once more with a collecting sink on the same
	// records and compares its final join with cdcjoin's (default in the
	// command: on).
	Check bool
	// CacheDir keeps built peers (default: the user cache dir's cdcjoin/peers).
	CacheDir string
	// FlinkConf holds extra Flink options, KEY=VALUE.
	FlinkConf []string
	// DBSPStep is the DBSP peer's input records per transaction (default
	// 10,000); DBSPInMemory keeps its state in memory instead of enabling
	// DBSP's storage (batches of 10 MiB and more spill to disk).
	DBSPStep     int
	DBSPInMemory bool
	// Input, if set, are replay files to compare on instead of a generated
	// workload (a `--write-history --history-peers` history: without
	// truncates and TOAST placeholders, which the peers cannot read).
	Input []string
	// Shape, if set, is a multi-table plan to compare on instead of the
	// two-table join: ShapeChain (ChainQuery on ChainHistory's history,
	// written as replay files; every peer runs the same three-table query).
	Shape string
}

// PeerComparison is report.json's "peer_comparison": cdcjoin's replay
// path and the peers on one generated workload, run interleaved.
type PeerComparison struct {
	// Records is the number of input Kafka records (snapshot + cdc + storm
	// files; tombstones included, latency probes not generated): the
	// numerator of every records/s figure.
	Records      int64 `json:"records"`
	Rows         int64 `json:"rows"`
	Tombstones   int64 `json:"tombstones"`
	FilledBefore int64 `json:"filled_before"`
	InputBytes   int64 `json:"input_bytes"`
	PeerBytes    int64 `json:"peer_input_bytes"`
	FinalRows    int64 `json:"final_rows,omitempty"`
	// Input names the replay files compared on, when not generated.
	Input []string `json:"input,omitempty"`
	// Shape is PeerOptions.Shape, and History the chain history's counts.
	Shape   string       `json:"shape,omitempty"`
	History string       `json:"history,omitempty"`
	Rounds  int          `json:"rounds"`
	Systems []PeerSystem `json:"systems"`
	Runs    []PeerRun    `json:"runs"`
	Checks  []PeerCheck  `json:"checks,omitempty"`
}

// PeerSystem is one system's summary; Systems[0] is cdcjoin.
type PeerSystem struct {
	Name  string `json:"name"`
	Setup string `json:"setup"`
	// Timed says what the wall time covers.
	Timed                  string  `json:"timed"`
	MedianRecordsPerSecond float64 `json:"median_records_per_second"`
	MinRecordsPerSecond    float64 `json:"min_records_per_second"`
	MaxRecordsPerSecond    float64 `json:"max_records_per_second"`
	// CdcjoinRatio is cdcjoin's median ÷ this system's median (1 for cdcjoin).
	CdcjoinRatio float64 `json:"cdcjoin_ratio"`
	// MedianRecordsPerCPUSecond is the median of runs[].records_per_cpu_second:
	// steadier than wall time on a shared machine, where a process with more
	// runnable threads gets a larger share of the cores.
	MedianRecordsPerCPUSecond float64 `json:"median_records_per_cpu_second"`
}

// PeerRun is one timed run, in the order they ran.
type PeerRun struct {
	System           string  `json:"system"`
	Round            int     `json:"round"`
	Seconds          float64 `json:"seconds"`
	RecordsPerSecond float64 `json:"records_per_second"`
	// CPUSeconds: cdcjoin's process CPU during the run; a peer's whole
	// process (JVM start and planning included).
	CPUSeconds          float64 `json:"cpu_seconds"`
	RecordsPerCPUSecond float64 `json:"records_per_cpu_second"`
	// SubmitSeconds (Flink: see peers.FlinkResult) and ProcessSeconds (a
	// peer's whole process).
	SubmitSeconds  float64 `json:"submit_seconds,omitempty"`
	ProcessSeconds float64 `json:"process_seconds,omitempty"`
	LoadAvg        float64 `json:"loadavg_1m"`
}

// PeerCheck is the comparison of a peer's final join with cdcjoin's.
type PeerCheck struct {
	System string `json:"system"`
	Rows   int    `json:"rows"`
	Equal  bool   `json:"equal"`
	Diff   string `json:"diff"`
}

// peerRunner is one peer: run times one run on fresh state; final writes
// the final join (untimed, collecting sink).
type peerRunner interface {
	name() string
	setup() string
	timed() string
	run(ctx context.Context, stateDir string) (PeerRun, error)
	final(ctx context.Context, stateDir, out string) (int64, error)
}

// RunPeers generates o's workload once (Options.Workload.Rows, without
// TOAST placeholders: a debezium-json reader would store them as values),
// writes it as replay files and as the peers' input, then times cdcjoin's
// replay path (engine.Run on a fresh pebble state, the changes counted and
// dropped) and each peer, interleaved for p.Rounds rounds, and writes
// report.json and REPORT.md into o.Dir with the medians and their ratios.
// With p.Check each peer's final join must equal cdcjoin's, or RunPeers
// returns an error after writing the report. A non-nil Report has been
// written.
func RunPeers(ctx context.Context, o Options, p PeerOptions) (*Report, error) {
	o = o.withDefaults()
	o.Workload.NoToast = true
	if err := o.validate(); err != nil {
		return nil, err
	}
	if p.Rounds == 0 {
		p.Rounds = 2
	}
	if len(p.Peers) == 0 || p.Rounds < 1 {
		return nil, errors.New("cdcjoin: bench: peers: name at least one peer and at least one round")
	}
	if o.Pipeline != PipelineEngine || o.ClickHouse != "" || len(o.Sweep) > 0 {
		return nil, errors.New("cdcjoin: bench: peers: the comparison runs cdcjoin's replay path on one workload (--rows): --pipeline kafka, --clickhouse and --sweep do not apply")
	}
	if p.CacheDir == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("cdcjoin: bench: peers: no cache directory (pass one): %w", err)
		}
		p.CacheDir = filepath.Join(d, "cdcjoin", "peers")
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cdcjoin: bench: %w", err)
	}
	// The workload, the peers' input and the final joins; kept with KeepState.
	work := filepath.Join(o.Dir, "peer-work")
	if !o.KeepState {
		defer os.RemoveAll(work)
	}

	// Build first: a missing toolchain fails before minutes of generation.
	bt, err := buildPeers(ctx, p, o.Progress)
	if err != nil {
		return nil, err
	}
	files := p.Input
	var in peers.Input
	var history, query, recordsTopic string
	switch {
	case p.Shape == ShapeChain && len(files) == 0:
		o.progress(fmt.Sprintf("peers: generating the %s-row chain history", formatRows(o.Workload.Rows)))
		if files, history, err = writeChainJSONL(o, filepath.Join(work, "jsonl")); err != nil {
			return nil, err
		}
		t := ChainTables(10)
		query, recordsTopic = ChainQuery, t[2].Topic()
		in, err = peers.WriteChainInput(files, t[0].Topic(), t[1].Topic(), recordsTopic, filepath.Join(work, "debezium"))
	case p.Shape != "":
		return nil, fmt.Errorf("cdcjoin: bench: peers: shape %q: use %s (on a generated history, without --peer-input)", p.Shape, ShapeChain)
	default:
		if len(files) == 0 {
			o.progress(fmt.Sprintf("peers: generating the %s-row workload", formatRows(o.Workload.Rows)))
			if files, err = WriteJSONL(ctx, o, filepath.Join(work, "jsonl")); err != nil {
				return nil, err
			}
		}
		in, err = peers.WriteInput(files, cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic, filepath.Join(work, "debezium"))
	}
	if err != nil {
		return nil, err
	}
	cmp := &PeerComparison{Records: in.Records, Rows: o.Workload.Rows, Tombstones: in.Tombstones,
		FilledBefore: in.FilledBefore, PeerBytes: in.Bytes, Rounds: p.Rounds, Input: p.Input, Shape: p.Shape, History: history}
	if len(p.Input) > 0 {
		cmp.Rows = 0
	}
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			cmp.InputBytes += st.Size()
		}
	}
	all := []peerRunner{&cdcjoinPeer{o: o, files: files, query: query}}
	for _, name := range p.Peers {
		switch name {
		case PeerFlink:
			all = append(all, &flinkPeer{f: bt.flink, in: in, conf: p.FlinkConf})
		case PeerDBSP:
			all = append(all, &dbspPeer{d: bt.dbsp, files: files, step: p.DBSPStep, inMemory: p.DBSPInMemory, recordsTopic: recordsTopic})
		}
	}
	rep := newReport(o)
	rep.Peers = cmp
	if p.Check {
		if err := checkFinals(ctx, o, work, all, cmp); err != nil {
			return nil, err
		}
	}
	if err := timeRounds(ctx, o, work, all, cmp); err != nil {
		return nil, err
	}
	rep.Machine.LoadAvgEnd = loadAvg()
	if err := rep.WriteFiles(o.Dir); err != nil {
		return rep, err
	}
	for _, c := range cmp.Checks {
		if !c.Equal {
			return rep, fmt.Errorf("cdcjoin: bench: peers: %s's final join differs from cdcjoin's: %s", c.System, c.Diff)
		}
	}
	return rep, nil
}

// builtPeers holds the peers RunPeers was asked for, built.
type builtPeers struct {
	flink *peers.Flink
	dbsp  *peers.DBSP
}

// buildPeers builds (or finds built) every peer named in p.Peers.
func buildPeers(ctx context.Context, p PeerOptions, logf func(string)) (builtPeers, error) {
	var bt builtPeers
	seen := map[string]bool{}
	for _, name := range p.Peers {
		switch {
		case seen[name]:
			return bt, fmt.Errorf("cdcjoin: bench: peer %q named twice", name)
		case name != PeerFlink && name != PeerDBSP:
			return bt, fmt.Errorf("cdcjoin: bench: peer %q: use %s or %s", name, PeerFlink, PeerDBSP)
		}
		seen[name] = true
	}
	for _, name := range p.Peers {
		var err error
		if name == PeerFlink {
			bt.flink, err = peers.BuildFlink(ctx, p.CacheDir, logf)
		} else {
			bt.dbsp, err = peers.BuildDBSP(ctx, p.CacheDir, logf)
		}
		if err != nil {
			return bt, err
		}
	}
	return bt, nil
}

// checkFinals writes the final join of every system (all[0] is cdcjoin)
// and records in cmp whether each peer's equals cdcjoin's.
func checkFinals(ctx context.Context, o Options, work string, all []peerRunner, cmp *PeerComparison) error {
	want := filepath.Join(work, "final-cdcjoin.jsonl")
	o.progress("peers: check: cdcjoin's final join")
	n, err := all[0].final(ctx, filepath.Join(work, "state-check-cdcjoin"), want)
	if err != nil {
		return err
	}
	cmp.FinalRows = n
	for _, r := range all[1:] {
		got := filepath.Join(work, "final-"+r.name()+".jsonl")
		o.progress(fmt.Sprintf("peers: check: %s's final join", r.name()))
		if _, err := r.final(ctx, filepath.Join(work, "state-check-"+r.name()), got); err != nil {
			return err
		}
		d, err := peers.CompareFinal(want, got)
		if err != nil {
			return err
		}
		cmp.Checks = append(cmp.Checks, PeerCheck{System: r.name(), Rows: d.RowsB, Equal: d.Equal(), Diff: d.String()})
		o.progress(fmt.Sprintf("peers: check: %s vs cdcjoin: %s", r.name(), d))
	}
	return nil
}

// timeRounds times every system once per round, in order, each on fresh
// state, and fills cmp's runs and systems.
func timeRounds(ctx context.Context, o Options, work string, all []peerRunner, cmp *PeerComparison) error {
	for round := 1; round <= cmp.Rounds; round++ {
		for _, r := range all {
			stateDir := filepath.Join(work, fmt.Sprintf("state-%s-%d", r.name(), round))
			run, err := r.run(ctx, stateDir)
			os.RemoveAll(stateDir)
			if err != nil {
				return err
			}
			run.System, run.Round, run.LoadAvg = r.name(), round, loadAvg()
			run.RecordsPerSecond = float64(cmp.Records) / run.Seconds
			if run.CPUSeconds > 0 {
				run.RecordsPerCPUSecond = float64(cmp.Records) / run.CPUSeconds
			}
			cmp.Runs = append(cmp.Runs, run)
			o.progress(fmt.Sprintf("peers: round %d/%d: %s: %d records in %.2fs, %.0f records/s",
				round, cmp.Rounds, r.name(), cmp.Records, run.Seconds, run.RecordsPerSecond))
		}
	}
	for _, r := range all {
		cmp.Systems = append(cmp.Systems, summarize(cmp.Runs, r))
	}
	for i := range cmp.Systems {
		if s := cmp.Systems[i].MedianRecordsPerSecond; s > 0 {
			cmp.Systems[i].CdcjoinRatio = cmp.Systems[0].MedianRecordsPerSecond / s
		}
	}
	return nil
}

// summarize is r's median, min and max records/s over its runs.
func summarize(runs []PeerRun, r peerRunner) PeerSystem {
	s := PeerSystem{Name: r.name(), Setup: r.setup(), Timed: r.timed()}
	var xs, cpu []float64
	for _, run := range runs {
		if run.System == r.name() {
			xs = append(xs, run.RecordsPerSecond)
			cpu = append(cpu, run.RecordsPerCPUSecond)
		}
	}
	if len(xs) == 0 {
		return s
	}
	slices.Sort(xs)
	slices.Sort(cpu)
	s.MinRecordsPerSecond, s.MaxRecordsPerSecond = xs[0], xs[len(xs)-1]
	s.MedianRecordsPerSecond = median(xs)
	s.MedianRecordsPerCPUSecond = median(cpu)
	return s
}

// median of sorted xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// cdcjoinPeer is cdcjoin's `replay` path: engine.Open on a fresh state,
// engine.Run over the replay files (decoding on one goroutine, joining on
// another), a final Commit, Close.
type cdcjoinPeer struct {
	o     Options
	files []string
	// query, if set, is the SQL of a multi-table job over ChainTables
	// (ChainJob) instead of the two-table join.
	query string
}

func (c *cdcjoinPeer) name() string { return "cdcjoin" }

func (c *cdcjoinPeer) setup() string {
	return fmt.Sprintf("replay path (engine.Run), pebble on local disk, block cache %d MB, %d records per commit, sync %t; changes counted and dropped",
		c.o.CacheMB, c.o.BatchEvents, c.o.Sync)
}

func (c *cdcjoinPeer) timed() string {
	return "engine.Open on an empty state directory to Close after the last commit, in the bench process"
}

func (c *cdcjoinPeer) run(ctx context.Context, stateDir string) (PeerRun, error) {
	sw := startWatch()
	err := c.replay(ctx, stateDir, nil)
	wall, cpu := sw.elapsed()
	return PeerRun{Seconds: wall, CPUSeconds: cpu}, err
}

func (c *cdcjoinPeer) final(ctx context.Context, stateDir, out string) (int64, error) {
	defer os.RemoveAll(stateDir)
	var n int64
	err := c.replay(ctx, stateDir, func(eng *engine.Engine, names []string) error {
		f, err := os.Create(out)
		if err != nil {
			return fmt.Errorf("cdcjoin: bench: %w", err)
		}
		w := bufio.NewWriterSize(f, 1<<20)
		var buf []byte
		err = eng.Final(func(_, _ []row.Value, vals []row.Value) error {
			n++
			buf = row.AppendJSONObject(buf[:0], names, vals)
			buf = append(buf, '\n')
			_, err := w.Write(buf)
			return err
		})
		if ferr := w.Flush(); err == nil {
			err = ferr
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("cdcjoin: bench: write %s: %w", out, err)
		}
		return nil
	})
	return n, err
}

// replay applies the workload files to a new state in stateDir and, if
// after is set, calls it before closing the engine.
func (c *cdcjoinPeer) replay(ctx context.Context, stateDir string, after func(*engine.Engine, []string) error) (err error) {
	if err := os.RemoveAll(stateDir); err != nil {
		return fmt.Errorf("cdcjoin: bench: %w", err)
	}
	var cfg *config.Config
	if c.query != "" {
		cfg, err = ChainJob(c.o, c.query, stateDir, false)
	} else {
		cfg, err = jobConfig(c.o, stateDir, "")
	}
	if err != nil {
		return err
	}
	eng, err := engine.Open(cfg, engine.Options{Sink: &countSink{}})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := eng.Close(); err == nil {
			err = cerr
		}
	}()
	err = eng.Run(ctx, func(yield func(*engine.Record) error) error {
		for _, name := range c.files {
			f, err := os.Open(name)
			if err != nil {
				return fmt.Errorf("cdcjoin: bench: %w", err)
			}
			err = engine.ReadJSONL(f, name, yield)
			f.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := eng.Commit(ctx); err != nil {
		return err
	}
	if after != nil {
		err = after(eng, cfg.OutputNames())
	}
	return err
}

// countSink counts the changes it is given and drops them: the
// counterpart of Flink's blackhole sink.
type countSink struct{ n uint64 }

func (s *countSink) Write(_ context.Context, cs []row.Change) error {
	s.n += uint64(len(cs))
	return nil
}

func (s *countSink) Flush(context.Context) error { return nil }
func (s *countSink) Close() error                { return nil }

// flinkPeer is the Flink SQL peer (package peers).
type flinkPeer struct {
	f    *peers.Flink
	in   peers.Input
	conf []string
}

func (p *flinkPeer) name() string { return PeerFlink }

func (p *flinkPeer) setup() string {
	s := fmt.Sprintf("Flink 2.3 SQL regular join, in-process MiniCluster, parallelism %d, RocksDB state on local disk (managed memory: Flink's local default), table.exec.source.cdc-events-duplicate=true (ChangelogNormalize), debezium-json files (one per source partition), blackhole sink, no checkpoints",
		goruntime.NumCPU())
	if len(p.conf) > 0 {
		s += "; " + strings.Join(p.conf, ", ")
	}
	return s
}

func (p *flinkPeer) timed() string {
	return "Flink's net runtime of the job (created on the MiniCluster to FINISHED); JVM start, SQL planning and MiniCluster start excluded (runs[].submit_seconds and process_seconds include them)"
}

func (p *flinkPeer) run(ctx context.Context, stateDir string) (PeerRun, error) {
	res, err := p.f.Run(ctx, peers.FlinkRun{Input: p.in, StateDir: stateDir, Parallelism: goruntime.NumCPU(), Conf: p.conf})
	return PeerRun{Seconds: res.JobSeconds, SubmitSeconds: res.SubmitSeconds, ProcessSeconds: res.Process.Seconds, CPUSeconds: res.Process.CPUSeconds}, err
}

func (p *flinkPeer) final(ctx context.Context, stateDir, out string) (int64, error) {
	defer os.RemoveAll(stateDir)
	res, err := p.f.Run(ctx, peers.FlinkRun{Input: p.in, StateDir: stateDir, Parallelism: goruntime.NumCPU(), Final: out, Conf: p.conf})
	return res.Rows, err
}

// dbspPeer is the DBSP peer (package peers), fed the replay files.
type dbspPeer struct {
	d        *peers.DBSP
	files    []string
	step     int
	inMemory bool
	// recordsTopic, if set: the three-table chain (peers.DBSPRun).
	recordsTopic string
}

func (p *dbspPeer) name() string { return PeerDBSP }

func (p *dbspPeer) setup() string {
	step := p.step
	if step == 0 {
		step = 10000
	}
	state := "DBSP storage on local disk (batches of 10 MiB and more spill)"
	if p.inMemory {
		state = "state in memory"
	}
	join := "join on user_id"
	if p.recordsTopic != "" {
		join = "u⋈d joined on user_id, re-indexed by domain id, joined with dns_records on domain_id"
	}
	return fmt.Sprintf("dbsp 0.349 circuit (upsert maps keyed by primary key, %s), %d workers, %d-record steps, %s; reads the replay files (serde_json); output changes counted",
		join, goruntime.NumCPU(), step, state)
}

func (p *dbspPeer) timed() string {
	return "opening the first input file to the end of the last step (parsing, feeding, every step); process start and circuit construction excluded (runs[].process_seconds include them)"
}

func (p *dbspPeer) runOnce(ctx context.Context, stateDir, final string) (peers.DBSPResult, error) {
	r := peers.DBSPRun{Files: p.files, ParentTopic: cdcgen.DefaultParentTopic, ChildTopic: cdcgen.DefaultChildTopic,
		RecordsTopic: p.recordsTopic, Workers: goruntime.NumCPU(), Step: p.step, Final: final}
	if !p.inMemory {
		r.StorageDir = stateDir
	}
	return p.d.Run(ctx, r)
}

func (p *dbspPeer) run(ctx context.Context, stateDir string) (PeerRun, error) {
	res, err := p.runOnce(ctx, stateDir, "")
	return PeerRun{Seconds: res.JobSeconds, ProcessSeconds: res.Process.Seconds, CPUSeconds: res.Process.CPUSeconds}, err
}

func (p *dbspPeer) final(ctx context.Context, stateDir, out string) (int64, error) {
	defer os.RemoveAll(stateDir)
	res, err := p.runOnce(ctx, stateDir, out)
	return res.Rows, err
}

// peerMarkdown renders the peer comparison section of REPORT.md.
func (r *Report) peerMarkdown(b *strings.Builder) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	c := r.Peers
	w := r.Workload
	p("\n\n## cdcjoin and its peers on one workload\n\n")
	if c.Shape == ShapeChain {
		p("The three-table chain (`--shape chain`), every system running\n\n```sql\n%s\n```\n\non one generated history (`--rows %s`, seed %d, %d partitions per topic; %s): **%d Kafka records** (%.1f MB; %d of them tombstones), schemas off, no truncates, TOAST placeholders or snapshot rerun. ",
			ChainQuery, formatRows(c.Rows), w.Seed, w.Partitions, c.History, c.Records, float64(c.InputBytes)/1e6, c.Tombstones)
	} else if len(c.Input) > 0 {
		p("The replay files %s: **%d Kafka records** (%.1f MB; %d of them tombstones). ", strings.Join(c.Input, ", "), c.Records, float64(c.InputBytes)/1e6, c.Tombstones)
	} else {
		p("One generated workload (`--rows %s`, seed %d): the snapshot, cdc and storm phases' records as `cdcjoin replay` files, **%d Kafka records** (%.1f MB; %d of them tombstones), schemas %s, %d partitions per topic, %.1f children per parent, %d/%d unselected pad columns of %d B, TOAST placeholders off (a debezium-json reader would store them as values). ",
			formatRows(c.Rows), w.Seed, c.Records, float64(c.InputBytes)/1e6, c.Tombstones, w.Schema, w.Partitions, w.ChildrenPerParent, w.UserPads, w.DomainPads, w.PadBytes)
	}
	p("Flink reads the same envelopes as debezium-json files, one per source partition (%.1f MB): tombstones dropped, schemas unwrapped, and the %d updates without a before image (REPLICA IDENTITY DEFAULT tables) given the record key as before image; DBSP reads the replay files themselves. ",
		float64(c.PeerBytes)/1e6, c.FilledBefore)
	p("records/s = %d input records ÷ the timed wall seconds, for every system; runs interleaved (cdcjoin, peer, cdcjoin, peer, …), %d round(s), each on fresh state.\n\n", c.Records, c.Rounds)
	p("| system | median records/s | min | max | cdcjoin ÷ system | median records/CPU-s |\n|---|---:|---:|---:|---:|---:|\n")
	for _, s := range c.Systems {
		p("| %s | %.0f | %.0f | %.0f | %.2f | %.0f |\n", s.Name, s.MedianRecordsPerSecond, s.MinRecordsPerSecond, s.MaxRecordsPerSecond, s.CdcjoinRatio, s.MedianRecordsPerCPUSecond)
	}
	p("\n| system | setup | timed |\n|---|---|---|\n")
	for _, s := range c.Systems {
		p("| %s | %s | %s |\n", s.Name, s.Setup, s.Timed)
	}
	p("\n| round | system | seconds | records/s | CPU s | records/CPU-s | submit s | process s | load (1 min) |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, run := range c.Runs {
		p("| %d | %s | %.2f | %.0f | %.1f | %.0f | %s | %s | %.2f |\n", run.Round, run.System, run.Seconds, run.RecordsPerSecond, run.CPUSeconds, run.RecordsPerCPUSecond,
			optSeconds(run.SubmitSeconds), optSeconds(run.ProcessSeconds), run.LoadAvg)
	}
	p("\nCPU s: cdcjoin's process CPU during its run; a peer's whole process (for Flink: JVM start, planning and JIT included), so records/CPU-s understates a peer's steady state. On a loaded machine compare records/CPU-s too: a process with more runnable threads (Flink's tasks, DBSP's workers) gets a larger share of the cores than cdcjoin's two goroutines, which favours the peers' wall-time figures.\n")
	if len(c.Checks) > 0 {
		p("\n**Correctness** (an untimed run with a collecting sink; its final join against cdcjoin's, %d rows):\n\n", c.FinalRows)
		for _, ch := range c.Checks {
			verdict := "equal"
			if !ch.Equal {
				verdict = "DIFFERENT: " + ch.Diff
			}
			p("- %s: %s\n", ch.System, verdict)
		}
	} else {
		p("\nFinal joins were not compared (--peer-check=false).\n")
	}
}

func optSeconds(s float64) string {
	if s == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f", s)
}

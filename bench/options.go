package bench

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/engine"
)

// Pipelines the harness can drive.
const (
	PipelineEngine = "engine" // in-process decode → key → join (package engine)
	PipelineKafka  = "kafka"  // kafkarun.Run on Kafka (in-process kfake, or Brokers)
)

// Workload describes the generated source tables and CDC traffic. Row
// contents come from cdcgen (real Debezium 3.6 JSON); the hot parent, its
// children, the storm's renames and the latency probes are synthetic
// records in the same envelope shape (see synth.go).
type Workload struct {
	// Seed makes the workload deterministic.
	Seed int64
	// Rows is the number of source rows in the snapshot: parents (users)
	// plus children (domains), hot children included.
	Rows int64
	// ChildrenPerParent is the average number of children per parent
	// (default 2): users = Rows/(1+ChildrenPerParent).
	ChildrenPerParent float64
	// Skew > 1 draws children's parents from Zipf(Skew) (low ids hot); 0 is
	// uniform.
	Skew float64
	// HotChildren is the number of children of the dedicated hot parent
	// renamed by the storm phase (-1: default min(Rows/20, 1e6); 0: none).
	HotChildren int64
	// UserPads/DomainPads add never-selected text columns of PadBytes each
	// (wide rows: the decoder must skip them, state must not store them).
	UserPads, DomainPads, PadBytes int
	// Schema is "off" (default), "on" or "mixed".
	Schema string
	// Partitions per source topic (default 8).
	Partitions int
	// CDCEvents is the flat-out CDC phase length in records (default
	// max(Rows/5, 20000)).
	CDCEvents int64
	// Rate is the target rate of the paced CDC phase in records/s (0: half
	// of the flat-out CDC phase's measured rate).
	Rate float64
	// RateDuration is the paced phase's length (default 15s).
	RateDuration time.Duration
	// StormRenames is the number of renames of the hot parent in the storm
	// phase (default 10); StormGap CDC records separate two renames
	// (default 5000).
	StormRenames int
	StormGap     int
	// NoToast turns off TOAST placeholders ("__debezium_unavailable_value"
	// for unchanged text columns of 10% of updates): for peers that would
	// store the placeholder as the value (see RunPeers).
	NoToast bool
	// StormRate paces the storm phases at this many records/s (0: flat
	// out; < 0: the cdc_rate phase's rate). Paced, the storm's latency is
	// the pipeline's, not the queue's.
	StormRate float64
}

// Options configure a benchmark run.
type Options struct {
	Workload Workload
	// Pipeline is PipelineEngine (default) or PipelineKafka.
	Pipeline string
	// Brokers, with PipelineKafka, is a real cluster (empty: in-process kfake).
	Brokers []string
	// Producers is the number of parallel producers for Kafka (default 4).
	Producers int
	// ClickHouse, if set, is the native-protocol address of a ClickHouse
	// server: changes go through sink/clickhouse instead of the null sink.
	ClickHouse string
	// Sweep lists scale points (source rows); empty means one point at
	// Workload.Rows.
	Sweep []int64
	// CacheMB is pebble's block cache (default: state.cache_mb's, the
	// engine's engine.AutoCacheBytes from the machine's memory, 64 per
	// store on Kafka; for one point and for every point of a sweep alike: a
	// sweep point measures what a single run at its size measures).
	CacheMB int
	// BatchEvents is state.batch_events (default 1000).
	BatchEvents int
	// NoRebuild skips the rebuild phase (engine pipeline; see rebuild.go).
	NoRebuild bool
	// BulkLoadMB, MemTableMB and RowCacheMB are state.bulk_load_mb,
	// state.memtable_mb and state.row_cache_mb (0: the configuration's
	// defaults).
	BulkLoadMB, MemTableMB, RowCacheMB int
	// Sync fsyncs every state commit (state.sync).
	Sync bool
	// Linger commits a partial batch this long after the last commit
	// (engine pipeline; default 20ms), bounding latency at low rates.
	Linger time.Duration
	// ProbeEvery injects one latency probe per this many records (default 200).
	ProbeEvery int
	// Dir is the output directory (report.json, REPORT.md, SVGs); state
	// lives in Dir/state-<rows> and is removed after each point unless
	// KeepState.
	Dir       string
	KeepState bool
	// Verify checks each point's output against the join of the tables
	// the generators ended with (the hot parent, probes and fences left
	// out): a difference is an error. It keeps every output row in memory
	// (the smoke test uses it).
	Verify bool
	// Projection parameters for the terabyte projection.
	Projection ProjectionInput
	// Progress receives progress lines (every ProgressEvery; default 2s).
	Progress      func(line string)
	ProgressEvery time.Duration
	// MachineNote describes the machine in the report (cores, load, …).
	MachineNote string
	// StormCompare runs the storm phase once per hot-key variant, side by
	// side (hotkeys.go), StormRounds times (default 1), alternating.
	StormCompare bool
	StormRounds  int
	// CPUProfile, if set, is where each point's CPU profile is written (a
	// sweep's points to CPUProfile.<rows>). Every point is profiled anyway
	// for the stage figures (Phase.Stages); a CPU profile already running
	// in the process turns them off.
	CPUProfile string
	// Instances is the number of kafkarun instances of the Kafka pipeline
	// (default 1), in this process, each with its own state and sink.
	Instances int
}

// withDefaults fills zero fields.
func (o Options) withDefaults() Options {
	w := &o.Workload
	if w.ChildrenPerParent == 0 {
		w.ChildrenPerParent = 2
	}
	if w.Schema == "" {
		w.Schema = "off"
	}
	if w.Partitions == 0 {
		w.Partitions = 8
	}
	if w.RateDuration == 0 {
		w.RateDuration = 15 * time.Second
	}
	if w.StormRenames == 0 {
		w.StormRenames = 10
	}
	if w.StormGap == 0 {
		w.StormGap = 5000
	}
	if w.PadBytes == 0 {
		w.PadBytes = 16
	}
	if o.Pipeline == "" {
		o.Pipeline = PipelineEngine
	}
	if o.Producers == 0 {
		o.Producers = 4
	}
	if o.CacheMB == 0 {
		// state.cache_mb's default: the engine's from the memory, run's 64
		// per store.
		o.CacheMB = 64
		if o.Pipeline == PipelineEngine {
			o.CacheMB = int(engine.AutoCacheBytes() >> 20)
		}
	}
	if o.BatchEvents == 0 {
		o.BatchEvents = 1000
	}
	if o.Linger == 0 {
		o.Linger = 20 * time.Millisecond
	}
	if o.ProbeEvery == 0 {
		o.ProbeEvery = 200
	}
	if o.ProgressEvery == 0 {
		o.ProgressEvery = 2 * time.Second
	}
	o.Projection = o.Projection.withDefaults()
	return o
}

func (o Options) validate() error {
	var errs []string
	w := o.Workload
	if w.Rows < 10 && len(o.Sweep) == 0 {
		errs = append(errs, fmt.Sprintf("rows must be >= 10 (got %d)", w.Rows))
	}
	for _, r := range o.Sweep {
		if r < 10 {
			errs = append(errs, fmt.Sprintf("sweep point %d: must be >= 10", r))
		}
	}
	if w.ChildrenPerParent < 0 {
		errs = append(errs, "children per parent must be >= 0")
	}
	if w.Skew != 0 && w.Skew <= 1 {
		errs = append(errs, fmt.Sprintf("skew must be 0 (uniform) or > 1 (got %g)", w.Skew))
	}
	if _, err := schemaMode(w.Schema); err != nil {
		errs = append(errs, err.Error())
	}
	if w.UserPads > 1000 || w.DomainPads > 1000 || w.UserPads < 0 || w.DomainPads < 0 {
		errs = append(errs, "pads must be in 0..1000")
	}
	if w.Rate < 0 {
		errs = append(errs, "rate must be >= 0")
	}
	if o.Instances < 0 || (o.Instances > 1 && o.Pipeline != PipelineKafka) {
		errs = append(errs, "--instances needs --pipeline kafka")
	}
	switch o.Pipeline {
	case PipelineEngine:
		if len(o.Brokers) > 0 {
			errs = append(errs, "--brokers needs --pipeline kafka")
		}
	case PipelineKafka:
	default:
		errs = append(errs, fmt.Sprintf("pipeline %q: use engine or kafka", o.Pipeline))
	}
	if o.Dir == "" {
		errs = append(errs, "an output directory is required")
	}
	if o.ProbeEvery < 1 || o.BatchEvents < 1 || o.CacheMB < 1 {
		errs = append(errs, "probe-every, batch-events and cache-mb must be >= 1")
	}
	if err := o.Projection.validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return errors.New("cdcjoin: bench: " + strings.Join(errs, "; "))
	}
	return nil
}

func schemaMode(s string) (cdcgen.SchemaMode, error) {
	switch s {
	case "off":
		return cdcgen.SchemaOff, nil
	case "on":
		return cdcgen.SchemaOn, nil
	case "mixed":
		return cdcgen.SchemaMixed, nil
	}
	return 0, fmt.Errorf("schema %q: use off, on or mixed", s)
}

// plan is a scale point's derived sizes.
type plan struct {
	rows, users, domains, hot int64
	cdc                       int64
}

func (w Workload) plan(rows int64) plan {
	p := plan{rows: rows}
	p.hot = w.HotChildren
	if p.hot < 0 {
		p.hot = min(rows/20, 1_000_000)
	}
	p.hot = min(p.hot, rows/2)
	rest := rows - p.hot
	p.users = max(1, int64(float64(rest)/(1+w.ChildrenPerParent)))
	p.domains = max(0, rest-p.users)
	p.cdc = w.CDCEvents
	if p.cdc <= 0 {
		p.cdc = max(rows/5, 20000)
	}
	return p
}

// cdcMix is the streaming mix: mostly inserts and updates, some FK moves,
// deletes and PK changes, no truncates (they would wipe the state being
// measured).
func cdcMix() cdcgen.Mix {
	return cdcgen.Mix{InsertUser: 10, InsertDomain: 25, UpdateUserSelected: 10, UpdateUserUnselected: 10,
		UpdateDomain: 15, MoveDomain: 10, DeleteUser: 2, DeleteDomain: 8, PKChangeUser: 1, PKChangeDomain: 1}
}

// genOptions returns the cdcgen options of generator i of n (parallel
// producers use disjoint id ranges via IDBase).
func (w Workload) genOptions(p plan, i, n int) cdcgen.Options {
	sm, _ := schemaMode(w.Schema)
	toast := 0.1
	if w.NoToast {
		toast = 0
	}
	users, domains := p.users/int64(n), p.domains/int64(n)
	if i == n-1 {
		users, domains = p.users-users*int64(n-1), p.domains-domains*int64(n-1)
	}
	return cdcgen.Options{
		Seed: w.Seed + int64(i)*7919, Users: int(users), Domains: int(domains), Ops: 1 << 50,
		Partitions: w.Partitions, SchemaMode: sm, Mix: cdcMix(), Toast: toast, Tombstones: true,
		MaxRoundOps: 256, MaxTxOps: 1, UserPads: w.UserPads, DomainPads: w.DomainPads,
		PadBytes: w.PadBytes, ParentSkew: w.Skew, IDBase: int64(i) << 40,
		Interleave: cdcgen.InterleaveProduction,
	}
}

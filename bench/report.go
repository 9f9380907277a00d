package bench

import (
	"fmt"
	"os"
	"path/filepath"

	json "github.com/goccy/go-json"
)

// SchemaVersion is report.json's format version; it changes only when a
// field is renamed or removed (new fields may appear at any time).
const SchemaVersion = 1

// Report is report.json. Field names are documented in bench/README.md.
type Report struct {
	SchemaVersion int            `json:"schema_version"`
	Created       string         `json:"created"`
	Command       string         `json:"command"`
	Pipeline      string         `json:"pipeline"`
	Sink          string         `json:"sink"`
	Machine       Machine        `json:"machine"`
	Workload      WorkloadReport `json:"workload"`
	Settings      Settings       `json:"settings"`
	Points        []Point        `json:"points"`
	Projection    *Projection    `json:"projection,omitempty"`
	Stopped       string         `json:"stopped,omitempty"`
	// Peers is set by RunPeers (cdcjoin bench --peer), which writes no points.
	Peers *PeerComparison `json:"peer_comparison,omitempty"`
}

// WorkloadReport is the workload as run.
type WorkloadReport struct {
	Seed              int64   `json:"seed"`
	ChildrenPerParent float64 `json:"children_per_parent"`
	Skew              float64 `json:"skew"`
	HotChildren       int64   `json:"hot_children"`
	UserPads          int     `json:"user_pads"`
	DomainPads        int     `json:"domain_pads"`
	PadBytes          int     `json:"pad_bytes"`
	Schema            string  `json:"schema"`
	Partitions        int     `json:"partitions"`
	StormRenames      int     `json:"storm_renames"`
	StormGap          int     `json:"storm_gap"`
	RateSeconds       float64 `json:"rate_seconds"`
}

// Settings are the pipeline settings of the run.
type Settings struct {
	CacheMB     int `json:"cache_mb"`
	BatchEvents int `json:"batch_events"`
	// BulkLoadMB, MemTableMB and RowCacheMB are the state settings (0:
	// the configuration's defaults, 256, 8 and 64).
	BulkLoadMB int `json:"bulk_load_mb,omitempty"`
	MemTableMB int `json:"memtable_mb,omitempty"`
	RowCacheMB int `json:"row_cache_mb,omitempty"`
	// SnapshotBulk says the snapshot was bulk loaded (its rows reach the
	// sink when the load ends).
	SnapshotBulk bool    `json:"snapshot_bulk,omitempty"`
	Sync         bool    `json:"sync"`
	LingerMs     float64 `json:"linger_ms"`
	ProbeEvery   int     `json:"probe_every"`
	Producers    int     `json:"producers,omitempty"`
	Brokers      string  `json:"brokers,omitempty"`
	Instances    int     `json:"instances,omitempty"`
}

// Point is one scale point: a fresh state loaded with Rows source rows,
// then driven through the phases.
type Point struct {
	Rows        int64 `json:"rows"`
	Users       int64 `json:"users"`
	Domains     int64 `json:"domains"`
	HotChildren int64 `json:"hot_children"`
	// State after the snapshot (memtables flushed).
	StateBytes             uint64  `json:"state_bytes"`
	StateBytesPerRow       float64 `json:"state_bytes_per_row"`
	ParentStateBytesPerRow float64 `json:"parent_state_bytes_per_row"`
	ChildStateBytesPerRow  float64 `json:"child_state_bytes_per_row"`
	// State at the end (after all phases, flushed).
	FinalStateBytes   uint64  `json:"final_state_bytes"`
	WriteAmp          float64 `json:"write_amp"`
	BlockCacheHitRate float64 `json:"block_cache_hit_rate"`
	Phases            []Phase `json:"phases"`
	// StormVariants are the storm phases run side by side
	// (--storm-compare), by phase name; SaltingMoveSeconds is how long the
	// hot parent's move to the salted layout took before the salted one.
	StormVariants      []stormVariant `json:"storm_variants,omitempty"`
	SaltingMoveSeconds []float64      `json:"salting_move_seconds,omitempty"`
}

// Phase is what one phase measured.
type Phase struct {
	Name                 string  `json:"name"`
	Events               int64   `json:"events"`
	Probes               int64   `json:"probes"`
	InputBytes           int64   `json:"input_bytes"`
	WallSeconds          float64 `json:"wall_seconds"`
	CPUSeconds           float64 `json:"cpu_seconds"`
	GenCPUSeconds        float64 `json:"generator_cpu_seconds"`
	EventsPerSecond      float64 `json:"events_per_second"`
	MBPerSecond          float64 `json:"mb_per_second"`
	EventsPerCPUSecond   float64 `json:"events_per_cpu_second"`
	EventsPerSecondCore  float64 `json:"events_per_second_per_core"`
	CPUSecondsPerMillion float64 `json:"cpu_seconds_per_million_events"`
	OutputRows           int64   `json:"output_rows"`
	OutputRowsPerEvent   float64 `json:"output_rows_per_event"`
	TargetRate           float64 `json:"target_rate,omitempty"`
	Latency              Latency `json:"latency"`
	PeakRSSBytes         uint64  `json:"peak_rss_bytes"`
	// Stages splits CPUSecondsPerMillion by pipeline stage, in µs per
	// record (stages.go); nil when the point was not profiled.
	Stages   *StageCPU `json:"cpu_us_per_record_by_stage,omitempty"`
	Timeline []Sample  `json:"timeline,omitempty"`
}

// Sample is one timeline bucket.
type Sample struct {
	T            float64 `json:"t"` // seconds since the phase started
	InPerSecond  float64 `json:"in_per_second"`
	OutPerSecond float64 `json:"out_per_second"`
	MaxLatencyMs float64 `json:"max_latency_ms"`
}

// finish computes the derived rates from the raw counts.
func (p *Phase) finish(gomaxprocs int) {
	if p.WallSeconds > 0 {
		p.EventsPerSecond = float64(p.Events) / p.WallSeconds
		p.MBPerSecond = float64(p.InputBytes) / 1e6 / p.WallSeconds
		p.EventsPerSecondCore = p.EventsPerSecond / float64(max(1, gomaxprocs))
	}
	if p.CPUSeconds > 0 {
		p.EventsPerCPUSecond = float64(p.Events) / p.CPUSeconds
	}
	if p.Events > 0 {
		p.CPUSecondsPerMillion = p.CPUSeconds / float64(p.Events) * 1e6
		p.OutputRowsPerEvent = float64(p.OutputRows) / float64(p.Events)
	}
}

// phase returns the named phase of pt, or nil.
func (pt *Point) phase(name string) *Phase {
	for i := range pt.Phases {
		if pt.Phases[i].Name == name {
			return &pt.Phases[i]
		}
	}
	return nil
}

// measured extracts the projection's inputs from pt.
func (pt *Point) measured() Measured {
	m := Measured{FromRows: pt.Rows, ParentStateBytesPerRow: pt.ParentStateBytesPerRow, ChildStateBytesPerRow: pt.ChildStateBytesPerRow}
	if s := pt.phase("snapshot"); s != nil && s.Events > 0 {
		m.SnapshotCPUPerEvent = s.CPUSeconds / float64(s.Events)
		m.SnapshotBytesPerEvent = float64(s.InputBytes) / float64(s.Events)
	}
	if c := pt.phase("cdc"); c != nil && c.Events > 0 {
		m.CDCCPUPerEvent = c.CPUSeconds / float64(c.Events)
		m.CDCBytesPerEvent = float64(c.InputBytes) / float64(c.Events)
		m.CDCOutputRowsPerEvent = c.OutputRowsPerEvent
	}
	if rb := pt.phase(phaseRebuild); rb != nil && rb.Events > 0 {
		m.RebuildCPUPerRecord = rb.CPUSeconds / float64(rb.Events)
	}
	return m
}

// WriteFiles writes report.json, REPORT.md and the SVG charts into dir.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cdcjoin: bench: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("cdcjoin: bench: encode report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("cdcjoin: bench: %w", err)
	}
	if err := r.writeCharts(dir); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "REPORT.md"), []byte(r.Markdown()), 0o644); err != nil {
		return fmt.Errorf("cdcjoin: bench: %w", err)
	}
	return nil
}

func (r *Report) writeCharts(dir string) error {
	for name, svg := range r.charts() {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(svg), 0o644); err != nil {
			return fmt.Errorf("cdcjoin: bench: %w", err)
		}
	}
	return nil
}

// RenderReport recomputes the projection of dir/report.json from its
// largest point with this version, and writes report.json, REPORT.md and
// the charts again (the measurements are unchanged).
func RenderReport(dir string) error {
	r, err := ReadReport(filepath.Join(dir, "report.json"))
	if err != nil {
		return err
	}
	if len(r.Points) > 0 && r.Projection != nil {
		pr := Project(r.Projection.Input, r.Points[len(r.Points)-1].measured())
		r.Projection = &pr
	}
	return r.WriteFiles(dir)
}

// RenderCharts draws the SVG charts of dir/report.json again into dir (the
// report's numbers, this version's drawing; REPORT.md is left as it is).
func RenderCharts(dir string) error {
	r, err := ReadReport(filepath.Join(dir, "report.json"))
	if err != nil {
		return err
	}
	return r.writeCharts(dir)
}

// ReadReport reads a report.json.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: bench: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("cdcjoin: bench: %s: %w", path, err)
	}
	return &r, nil
}

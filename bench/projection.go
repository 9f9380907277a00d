package bench

import (
	"errors"
	"math"
	"strings"
)

// ProjectionInput are the assumptions of the terabyte projection. Every
// field is reported next to the result. Zero fields take the defaults
// documented on each.
type ProjectionInput struct {
	// ParentBytes / ChildBytes are the source tables' sizes (default 4 TB
	// users, 2 TB domains; 1 TB = 1e12 bytes).
	ParentBytes float64 `json:"parent_bytes"`
	ChildBytes  float64 `json:"child_bytes"`
	// ParentRowBytes / ChildRowBytes are their average row sizes in the
	// database (default 1000 and 250): row counts = bytes / row bytes.
	ParentRowBytes float64 `json:"parent_row_bytes"`
	ChildRowBytes  float64 `json:"child_row_bytes"`
	// JSONFactor and EnvelopeBytes model a Debezium record's size from its
	// row: record bytes = row bytes × JSONFactor + EnvelopeBytes (defaults
	// 1.3: field names and quoting; 450: key, source block, op, ts_ms).
	JSONFactor    float64 `json:"json_factor"`
	EnvelopeBytes float64 `json:"envelope_bytes"`
	// CoresPerInstance, DiskPerInstanceGB (usable local SSD, 1 GB = 1e9)
	// and Utilization (fraction of the cores the join may use, leaving the
	// rest to Kafka clients, GC spikes and compactions) describe one
	// instance (defaults 8, 1900, 0.7).
	CoresPerInstance  float64 `json:"cores_per_instance"`
	DiskPerInstanceGB float64 `json:"disk_per_instance_gb"`
	Utilization       float64 `json:"utilization"`
	// DiskHeadroom multiplies the measured state size for LSM space
	// amplification, compactions in flight and growth (default 2).
	DiskHeadroom float64 `json:"disk_headroom"`
	// TargetSnapshotHours is the wanted initial-load time; instances are
	// added until CPU allows it (default 24).
	TargetSnapshotHours float64 `json:"target_snapshot_hours"`
	// SinkRowsPerSecond is what the ClickHouse cluster ingests (default
	// 1,000,000 rows/s): a floor on the snapshot time.
	SinkRowsPerSecond float64 `json:"sink_rows_per_second"`
	// CDCRate is the steady change rate after the snapshot, records/s
	// (default 50,000), and CDCPeakFactor the peak-to-average ratio to
	// provision for (default 3).
	CDCRate       float64 `json:"cdc_rate"`
	CDCPeakFactor float64 `json:"cdc_peak_factor"`
	// MaxPartitionStateGB bounds one keyed partition's state, which bounds
	// the time to rebuild a moved partition (default 50).
	MaxPartitionStateGB float64 `json:"max_partition_state_gb"`
}

func (p ProjectionInput) withDefaults() ProjectionInput {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&p.ParentBytes, 4e12)
	def(&p.ChildBytes, 2e12)
	def(&p.ParentRowBytes, 1000)
	def(&p.ChildRowBytes, 250)
	def(&p.JSONFactor, 1.3)
	def(&p.EnvelopeBytes, 450)
	def(&p.CoresPerInstance, 8)
	def(&p.DiskPerInstanceGB, 1900)
	def(&p.Utilization, 0.7)
	def(&p.DiskHeadroom, 2)
	def(&p.TargetSnapshotHours, 24)
	def(&p.SinkRowsPerSecond, 1e6)
	def(&p.CDCRate, 50000)
	def(&p.CDCPeakFactor, 3)
	def(&p.MaxPartitionStateGB, 50)
	return p
}

func (p ProjectionInput) validate() error {
	var bad []string
	for name, v := range map[string]float64{
		"parent bytes": p.ParentBytes, "child bytes": p.ChildBytes, "parent row bytes": p.ParentRowBytes,
		"child row bytes": p.ChildRowBytes, "cores per instance": p.CoresPerInstance,
		"disk per instance": p.DiskPerInstanceGB, "target snapshot hours": p.TargetSnapshotHours,
		"sink rows/s": p.SinkRowsPerSecond, "max partition state": p.MaxPartitionStateGB,
	} {
		if v < 0 || math.IsNaN(v) {
			bad = append(bad, "projection "+name+" must be positive")
		}
	}
	if p.Utilization < 0 || p.Utilization > 1 {
		bad = append(bad, "projection utilization must be in (0, 1]")
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// Measured are the per-row and per-event costs the projection scales up,
// taken from one scale point.
type Measured struct {
	FromRows               int64   `json:"from_rows"`
	ParentStateBytesPerRow float64 `json:"parent_state_bytes_per_row"`
	ChildStateBytesPerRow  float64 `json:"child_state_bytes_per_row"`
	SnapshotCPUPerEvent    float64 `json:"snapshot_cpu_seconds_per_event"`
	SnapshotBytesPerEvent  float64 `json:"snapshot_input_bytes_per_event"`
	CDCCPUPerEvent         float64 `json:"cdc_cpu_seconds_per_event"`
	CDCBytesPerEvent       float64 `json:"cdc_input_bytes_per_event"`
	CDCOutputRowsPerEvent  float64 `json:"cdc_output_rows_per_event"`
	// RebuildCPUPerRecord is the rebuild phase's CPU per keyed record (0:
	// not measured).
	RebuildCPUPerRecord float64 `json:"rebuild_cpu_seconds_per_record,omitempty"`
}

// Projection is the terabyte projection's result.
type Projection struct {
	Input    ProjectionInput `json:"input"`
	Measured Measured        `json:"measured"`

	ParentRows         float64 `json:"parent_rows"`
	ChildRows          float64 `json:"child_rows"`
	ParentRecordBytes  float64 `json:"parent_record_bytes"`
	ChildRecordBytes   float64 `json:"child_record_bytes"`
	CPUScaleParent     float64 `json:"cpu_scale_parent"`
	CPUScaleChild      float64 `json:"cpu_scale_child"`
	StateBytes         float64 `json:"state_bytes"`
	DiskBytes          float64 `json:"disk_bytes"`
	SnapshotCPUSeconds float64 `json:"snapshot_cpu_seconds"`
	SnapshotInputBytes float64 `json:"snapshot_input_bytes"`
	InstancesForCPU    int     `json:"instances_for_cpu"`
	InstancesForDisk   int     `json:"instances_for_disk"`
	Instances          int     `json:"instances"`
	Partitions         int     `json:"partitions"`
	SnapshotHoursCPU   float64 `json:"snapshot_hours_cpu"`
	SnapshotHoursSink  float64 `json:"snapshot_hours_sink"`
	SnapshotHours      float64 `json:"snapshot_hours"`
	CDCCoresNeeded     float64 `json:"cdc_cores_needed"`
	CDCInstancesNeeded int     `json:"cdc_instances_needed"`
	CDCOutputRowsPerS  float64 `json:"cdc_output_rows_per_second"`
	KeepsUp            bool    `json:"keeps_up"`
	StatePerInstanceGB float64 `json:"state_per_instance_gb"`
	// RebuildHoursPartition is the time one worker (one core) takes to
	// rebuild a partition of the projected size from the compacted keyed
	// topic; RebuildHoursInstance an instance's whole state on its usable
	// cores (a lost disk). Zero when the rebuild was not measured.
	RebuildHoursPartition float64 `json:"rebuild_hours_partition,omitempty"`
	RebuildHoursInstance  float64 `json:"rebuild_hours_instance,omitempty"`
}

// Project scales measured costs to the tables described by in.
//
// Model (each step is stated in REPORT.md):
//   - rows = table bytes / row bytes;
//   - state = rows × measured state bytes per row of that side (the
//     projected columns are assumed as wide as the benchmark's: state
//     stores only key and selected columns, never the rest of the row);
//   - a Debezium record = row bytes × JSONFactor + EnvelopeBytes; CPU per
//     record scales with record bytes above the benchmark's mean (never
//     below it): conservative, since join and state costs do not grow
//     with unselected columns;
//   - instances = max(CPU for the target snapshot time, disk for state ×
//     headroom), at least 1; snapshot hours = max(CPU-bound time on those
//     instances, sink-bound time);
//   - keep-up: peak CDC rate × CPU per CDC record / utilization in cores;
//   - partitions: a power of two ≥ 2 per core and ≥ state / max
//     partition state;
//   - rebuild: one keyed record per live row, at the measured CPU per
//     record, on one core for a partition and on an instance's usable
//     cores for its whole state.
func Project(in ProjectionInput, m Measured) Projection {
	in = in.withDefaults()
	p := Projection{Input: in, Measured: m}
	p.ParentRows = in.ParentBytes / in.ParentRowBytes
	p.ChildRows = in.ChildBytes / in.ChildRowBytes
	p.ParentRecordBytes = in.ParentRowBytes*in.JSONFactor + in.EnvelopeBytes
	p.ChildRecordBytes = in.ChildRowBytes*in.JSONFactor + in.EnvelopeBytes
	scale := func(rec float64) float64 {
		if m.SnapshotBytesPerEvent <= 0 {
			return 1
		}
		return math.Max(1, rec/m.SnapshotBytesPerEvent)
	}
	p.CPUScaleParent, p.CPUScaleChild = scale(p.ParentRecordBytes), scale(p.ChildRecordBytes)
	p.StateBytes = p.ParentRows*m.ParentStateBytesPerRow + p.ChildRows*m.ChildStateBytesPerRow
	p.DiskBytes = p.StateBytes * in.DiskHeadroom
	p.SnapshotCPUSeconds = m.SnapshotCPUPerEvent * (p.ParentRows*p.CPUScaleParent + p.ChildRows*p.CPUScaleChild)
	p.SnapshotInputBytes = p.ParentRows*p.ParentRecordBytes + p.ChildRows*p.ChildRecordBytes
	usable := in.CoresPerInstance * in.Utilization // core-seconds per second per instance
	p.InstancesForCPU = ceilInt(p.SnapshotCPUSeconds / (in.TargetSnapshotHours * 3600 * usable))
	p.InstancesForDisk = ceilInt(p.DiskBytes / (in.DiskPerInstanceGB * 1e9))
	p.Instances = max(1, p.InstancesForCPU, p.InstancesForDisk)
	p.SnapshotHoursCPU = p.SnapshotCPUSeconds / (float64(p.Instances) * usable * 3600)
	p.SnapshotHoursSink = p.ChildRows / in.SinkRowsPerSecond / 3600
	p.SnapshotHours = math.Max(p.SnapshotHoursCPU, p.SnapshotHoursSink)
	cdcScale := 1.0
	if m.CDCBytesPerEvent > 0 {
		// CDC records carry before/after images of the same rows: scale like
		// the mean of the two tables' snapshot records.
		cdcScale = math.Max(1, (p.ParentRecordBytes+p.ChildRecordBytes)/2/m.CDCBytesPerEvent)
	}
	p.CDCCoresNeeded = in.CDCRate * in.CDCPeakFactor * m.CDCCPUPerEvent * cdcScale / in.Utilization
	p.CDCInstancesNeeded = max(1, ceilInt(p.CDCCoresNeeded/in.CoresPerInstance))
	p.CDCOutputRowsPerS = in.CDCRate * m.CDCOutputRowsPerEvent
	p.KeepsUp = p.CDCInstancesNeeded <= p.Instances
	minParts := int(in.CoresPerInstance) * 2 * p.Instances
	minParts = max(minParts, ceilInt(p.StateBytes/(in.MaxPartitionStateGB*1e9)))
	p.Partitions = nextPow2(minParts)
	p.StatePerInstanceGB = p.StateBytes / float64(p.Instances) / 1e9
	if m.RebuildCPUPerRecord > 0 {
		// One keyed record per live source row.
		rows := p.ParentRows + p.ChildRows
		p.RebuildHoursPartition = rows / float64(p.Partitions) * m.RebuildCPUPerRecord / 3600
		p.RebuildHoursInstance = rows / float64(p.Instances) * m.RebuildCPUPerRecord / usable / 3600
	}
	return p
}

func ceilInt(v float64) int {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return int(math.Ceil(v))
}

func nextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

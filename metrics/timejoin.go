package metrics

import "github.com/prometheus/client_golang/prometheus"

// TimeJoin holds the collectors of a time join's run (package timejoin).
type TimeJoin struct {
	// LateRecords counts records judged late (dead-lettered, or stopping
	// the job under errors.policy stop), by source topic.
	LateRecords *prometheus.CounterVec
	// Watermark is each owned keyed partition's join watermark (seconds
	// since the epoch), WatermarkLag how far it is behind wall time.
	Watermark    *prometheus.GaugeVec
	WatermarkLag *prometheus.GaugeVec
	// SourceWatermark is each owned source partition's watermark as the
	// keying stage sees it (largest event time − out_of_orderness,
	// seconds since the epoch), SourceIdle whether it is idle (1) by
	// idle_timeout of wall time.
	SourceWatermark *prometheus.GaugeVec
	SourceIdle      *prometheus.GaugeVec
	// Rows counts emitted rows, by kind: joined (a pair, or a window's) or
	// padded (an outer row); Retired the rows and versions removed from
	// state once no partner could still arrive.
	Rows    *prometheus.CounterVec
	Retired prometheus.Counter
	// SnapshotBytes is the size of each owned keyed partition's last
	// operator-state snapshot written to "<group>.tsnap" (its chunks'
	// bytes), SnapshotOffset the keyed offset it stands at, and
	// SnapshotLoads counts partitions rebuilt from a snapshot.
	SnapshotBytes  *prometheus.GaugeVec
	SnapshotOffset *prometheus.GaugeVec
	SnapshotLoads  prometheus.Counter
}

// NewTimeJoin creates and registers (with reg, if set) the time join's
// collectors.
func NewTimeJoin(reg prometheus.Registerer) (*TimeJoin, error) {
	t := &TimeJoin{
		LateRecords: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdcjoin_late_records_total", Help: "Records of a time join behind the watermark minus allowed_lateness, by source topic.",
		}, []string{"topic"}),
		Watermark: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cdcjoin_time_watermark_seconds", Help: "The join watermark of each owned keyed partition (seconds since the epoch).",
		}, []string{"partition"}),
		WatermarkLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cdcjoin_time_watermark_lag_seconds", Help: "Wall time minus the join watermark of each owned keyed partition (seconds).",
		}, []string{"partition"}),
		SourceWatermark: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cdcjoin_time_source_watermark_seconds", Help: "Each owned source partition's watermark as the keying stage sees it: largest event time minus out_of_orderness (seconds since the epoch).",
		}, []string{"topic", "partition"}),
		SourceIdle: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cdcjoin_time_source_idle", Help: "1 when an owned source partition is idle (no record for idle_timeout of wall time).",
		}, []string{"topic", "partition"}),
		Rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdcjoin_time_rows_total", Help: "Rows a time join emitted, by kind (joined, padded).",
		}, []string{"kind"}),
		Retired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cdcjoin_time_retired_total", Help: "Rows and versions a time join removed from its state once no partner could still arrive.",
		}),
		SnapshotBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cdcjoin_time_snapshot_bytes", Help: "Size of the last operator-state snapshot each owned keyed partition wrote (bytes).",
		}, []string{"partition"}),
		SnapshotOffset: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cdcjoin_time_snapshot_offset", Help: "The keyed offset of the last operator-state snapshot each owned keyed partition wrote.",
		}, []string{"partition"}),
		SnapshotLoads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cdcjoin_time_snapshot_loads_total", Help: "Keyed partitions rebuilt from an operator-state snapshot.",
		}),
	}
	if err := register(reg, t.LateRecords, t.Watermark, t.WatermarkLag, t.SourceWatermark, t.SourceIdle, t.Rows, t.Retired, t.SnapshotBytes, t.SnapshotOffset, t.SnapshotLoads); err != nil {
		return nil, err
	}
	return t, nil
}

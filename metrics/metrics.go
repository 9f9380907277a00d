// Package metrics holds cdcjoin's Prometheus collectors and the HTTP server
// that exposes them (/metrics) with liveness (/healthz) and readiness
// (/readyz) probes.
package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the runtime's collectors. All are safe for concurrent use.
// Names follow component_event_unit.
type Metrics struct {
	// EventsConsumed counts source records decoded by the keying stage, by
	// topic and Debezium op ("tombstone" for tombstones).
	EventsConsumed *prometheus.CounterVec
	// KeyedRecords counts keyed records produced, by kind.
	KeyedRecords *prometheus.CounterVec
	// ConsumerLag is the join stage's lag per keyed partition (high
	// watermark minus next offset), as of its last fetch.
	ConsumerLag *prometheus.GaugeVec
	// KeyingLag is the keying stage's lag per source topic and partition
	// (high watermark minus the next offset to key, as of the last fetch).
	KeyingLag *prometheus.GaugeVec
	// Changes counts emitted changes by op (upsert, retract).
	Changes *prometheus.CounterVec
	// FanOut observes the changes caused by one keyed input.
	FanOut prometheus.Histogram
	// StateRebuilt counts keyed records applied while rebuilding a moved
	// partition's state (nothing emitted).
	StateRebuilt prometheus.Counter
	// StateRebuiltBulk counts the records of StateRebuilt applied by a
	// bulk rebuild (sorted tables ingested) rather than row by row.
	StateRebuiltBulk prometheus.Counter
	// IndexRestoreRecords counts changelog records read to bring a keying
	// index up to date, by side and mode (rebuild: from the log start;
	// catch-up: after the local index's position; reuse: nothing to read).
	IndexRestoreRecords *prometheus.CounterVec
	// SinkBatchChanges observes the changes per sink flush.
	SinkBatchChanges prometheus.Histogram
	// SinkFlushSeconds observes the sink's Flush latency.
	SinkFlushSeconds prometheus.Histogram
	// Errors counts errors by stage and kind (decode error kinds, key,
	// sink, kafka, …).
	Errors *prometheus.CounterVec
	// DeadLettered counts records sent to the dead-letter topic, by stage.
	DeadLettered *prometheus.CounterVec
	// OwnedPartitions is the number of keyed partitions this instance joins.
	OwnedPartitions prometheus.Gauge
	// CatchUpSeconds observes, once per partition and assignment, how long
	// its state took to catch up to the committed position, by stage
	// (keying: a source partition's index; join: a keyed partition's
	// state) and mode (rebuild: no usable local state; catch-up: local
	// state behind). A partition whose local state was current, or a
	// fresh start with nothing committed, observes nothing.
	CatchUpSeconds *prometheus.HistogramVec
	// CatchUpRecords counts the records applied by those catch-ups, by
	// stage and mode.
	CatchUpRecords *prometheus.CounterVec

	// Per stage of a multi-stage plan (label stage: 1, 2, …): inputs
	// applied, records sent to the next stage's keyed topic, consumer lag
	// per keyed partition, and keyed partitions owned by this instance.
	StageInputs, StageForwarded *prometheus.CounterVec
	StageLag                    *prometheus.GaugeVec
	StageOwned                  *prometheus.GaugeVec
	// StageChunked counts a plan stage's fan-outs too large for one chunk
	// (done in steps between other keys' records), by stage and pacing
	// (steps: input in changelog mode, time in upsert mode); StageWaited
	// the inputs that waited behind one, by stage.
	StageChunked, StageWaited *prometheus.CounterVec
}

// New creates the collectors and registers them with reg (nil: not
// registered, useful in tests). Registering twice in one registry fails.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		EventsConsumed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdcjoin_keying_events_total", Help: "Source records consumed by the keying stage, by topic and op.",
		}, []string{"topic", "op"}),
		KeyedRecords: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdcjoin_keying_records_produced_total", Help: "Keyed records produced, by kind.",
		}, []string{"kind"}),
		ConsumerLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cdcjoin_join_consumer_lag_records", Help: "Join stage lag per keyed partition.",
		}, []string{"partition"}),
		KeyingLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cdcjoin_keying_consumer_lag_records", Help: "Keying stage lag per source topic and partition.",
		}, []string{"topic", "partition"}),
		Changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdcjoin_join_changes_total", Help: "Changes emitted by the join, by op.",
		}, []string{"op"}),
		FanOut: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cdcjoin_join_fanout_changes", Help: "Changes caused by one keyed input.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		StateRebuilt: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cdcjoin_state_rebuild_records_total", Help: "Keyed records applied without emitting while rebuilding moved state.",
		}),
		StateRebuiltBulk: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cdcjoin_state_rebuild_bulk_records_total", Help: "Keyed records of cdcjoin_state_rebuild_records_total applied by a bulk rebuild (sorted tables ingested).",
		}),
		IndexRestoreRecords: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdcjoin_keying_index_restore_records_total", Help: "Index changelog records read to bring a keying index up to date, by side and mode (rebuild, catch-up, reuse).",
		}, []string{"side", "mode"}),
		SinkBatchChanges: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cdcjoin_sink_batch_changes", Help: "Changes per sink flush.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		SinkFlushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cdcjoin_sink_flush_seconds", Help: "Sink flush latency.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdcjoin_errors_total", Help: "Errors by stage and kind.",
		}, []string{"stage", "kind"}),
		DeadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdcjoin_dlq_records_total", Help: "Records written to the dead-letter topic, by stage.",
		}, []string{"stage"}),
		OwnedPartitions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cdcjoin_join_owned_partitions", Help: "Keyed partitions joined by this instance.",
		}),
		CatchUpSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cdcjoin_catchup_seconds", Help: "Time an assigned partition's state took to catch up to the committed position, by stage (keying, join, or a plan stage's number) and mode (rebuild, catch-up, snapshot: a time join's partition loaded from a snapshot).",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
		}, []string{"stage", "mode"}),
		CatchUpRecords: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdcjoin_catchup_records_total", Help: "Records applied by partitions catching up to their committed positions, by stage and mode.",
		}, []string{"stage", "mode"}),
		StageInputs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdcjoin_stage_inputs_total", Help: "Inputs applied by a plan stage's join, by stage.",
		}, []string{"stage"}),
		StageForwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdcjoin_stage_forwarded_total", Help: "Records a plan stage sent to the next stage's keyed topic, by stage.",
		}, []string{"stage"}),
		StageLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cdcjoin_stage_consumer_lag_records", Help: "A plan stage's lag per keyed partition, by stage and partition.",
		}, []string{"stage", "partition"}),
		StageOwned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cdcjoin_stage_owned_partitions", Help: "Keyed partitions of a plan stage joined by this instance, by stage.",
		}, []string{"stage"}),
		StageChunked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdcjoin_stage_chunked_total", Help: "Fan-outs of a plan stage too large for one chunk (skew.chunk_rows), done in steps between other keys' records, by stage and pacing (input: changelog mode; time: upsert mode).",
		}, []string{"stage", "steps"}),
		StageWaited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdcjoin_stage_waited_total", Help: "Inputs of a plan stage that waited behind their join key's fan-out in chunks, by stage.",
		}, []string{"stage"}),
	}
	if err := register(reg, m.EventsConsumed, m.KeyedRecords, m.ConsumerLag, m.KeyingLag, m.Changes,
		m.FanOut, m.StateRebuilt, m.StateRebuiltBulk, m.IndexRestoreRecords, m.SinkBatchChanges, m.SinkFlushSeconds, m.Errors,
		m.DeadLettered, m.OwnedPartitions, m.CatchUpSeconds, m.CatchUpRecords,
		m.StageInputs, m.StageForwarded, m.StageLag, m.StageOwned, m.StageChunked, m.StageWaited); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers cs with reg (nothing when reg is nil), all or none:
// on an error the collectors registered before it are unregistered again,
// so a caller may retry with another registry.
func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, d := range cs[:i] {
				reg.Unregister(d)
			}
			return fmt.Errorf("cdcjoin: metrics: %w", err)
		}
	}
	return nil
}

// Readiness is a flag the runtime sets once it serves traffic, a readiness
// check, and the runtime's liveness check. Ready means the flag is set and
// the readiness check (if any) passes. The zero value is not ready and
// live. Safe for concurrent use.
type Readiness struct {
	ready  atomic.Bool
	check  atomic.Pointer[func() error]
	live   atomic.Pointer[func() error]
	status atomic.Pointer[func() any]
}

// SetStatus sets the snapshot /statusz serves as JSON (nil: none). Like
// the checks it must be cheap and must not block.
func (r *Readiness) SetStatus(f func() any) {
	if f == nil {
		r.status.Store(nil)
		return
	}
	r.status.Store(&f)
}

// Status returns the runtime's status snapshot (nil when none is set).
func (r *Readiness) Status() any {
	if f := r.status.Load(); f != nil {
		return (*f)()
	}
	return nil
}

// SetCheck sets the check Ready runs once the flag is set: nil when ready,
// else why not (nil check: the flag alone decides). The check must be
// cheap and must not block: /readyz runs it on every request.
func (r *Readiness) SetCheck(check func() error) {
	if check == nil {
		r.check.Store(nil)
		return
	}
	r.check.Store(&check)
}

// NotReady returns nil when ready, else the reason.
func (r *Readiness) NotReady() error {
	if !r.ready.Load() {
		return errors.New("not running")
	}
	if f := r.check.Load(); f != nil {
		return (*f)()
	}
	return nil
}

// SetLiveness sets the check /healthz runs (nil: always live).
func (r *Readiness) SetLiveness(check func() error) {
	if check == nil {
		r.live.Store(nil)
		return
	}
	r.live.Store(&check)
}

// Live runs the liveness check: nil when live.
func (r *Readiness) Live() error {
	if f := r.live.Load(); f != nil {
		return (*f)()
	}
	return nil
}

// Set sets the flag.
func (r *Readiness) Set(ready bool) { r.ready.Store(ready) }

// Ready reports whether the flag is set and the check passes.
func (r *Readiness) Ready() bool { return r.NotReady() == nil }

// Server serves /metrics from g, /healthz (200 while running and
// ready.Live(), else 503 with the reason: a wedged process must not look
// alive), /readyz (200 when ready.Ready(), else 503 with the reason) and
// /statusz (ready.Status() as JSON: what each stage and partition is
// doing).
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen binds addr (host:port; port 0 picks one) and returns a server not
// yet serving.
func Listen(addr string, g prometheus.Gatherer, ready *Readiness) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: metrics: listen %s: %w", addr, err)
	}
	// cdcjoin_ready and cdcjoin_live: what /readyz and /healthz answer, as
	// gauges (1 or 0) evaluated at each scrape, for dashboards and alerts.
	probes := prometheus.NewRegistry()
	probes.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cdcjoin_ready", Help: "1 when /readyz answers 200: every owned partition caught up."},
			func() float64 { return boolGauge(ready != nil && ready.NotReady() == nil) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cdcjoin_live", Help: "1 when /healthz answers 200: no join partition stuck in one batch."},
			func() float64 { return boolGauge(ready == nil || ready.Live() == nil) }))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers{g, probes}, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if ready != nil {
			if err := ready.Live(); err != nil {
				http.Error(w, "not live: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/statusz", func(w http.ResponseWriter, _ *http.Request) {
		var st any
		if ready != nil {
			st = ready.Status()
		}
		if st == nil {
			http.Error(w, "no status: not running", http.StatusServiceUnavailable)
			return
		}
		b, err := json.MarshalIndent(st, "", "  ")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(append(b, '\n'))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		err := errors.New("not running")
		if ready != nil {
			err = ready.NotReady()
		}
		if err == nil {
			w.Write([]byte("ready\n"))
			return
		}
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
	})
	return &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln}, nil
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until ctx is done, then shuts down (waiting up to 5s for
// in-flight requests) and returns nil; other errors are returned.
func (s *Server) Serve(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- s.srv.Serve(s.ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("cdcjoin: metrics: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	if serr := <-done; err == nil && !errors.Is(serr, http.ErrServerClosed) {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("cdcjoin: metrics: shutdown: %w", err)
	}
	return nil
}

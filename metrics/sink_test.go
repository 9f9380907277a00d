package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdcjoin/cdcjoin/metrics"
)

// TestSinkCollector: the sinks' counters are served as cdcjoin_sink_*.
func TestSinkCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewSinkCollector(func() metrics.SinkTotals {
		return metrics.SinkTotals{Inserts: 3, Rows: 150000, Retries: 7, Failures: 9}
	}))
	srv, err := metrics.Listen("127.0.0.1:0", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	_, body := get(t, "http://"+srv.Addr()+"/metrics")
	for _, want := range []string{"cdcjoin_sink_inserts_total 3", "cdcjoin_sink_rows_total 150000",
		"cdcjoin_sink_retries_total 7", "cdcjoin_sink_failed_attempts_total 9"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestLiveness: /healthz fails with the reason while the liveness check
// does (a wedged process must not look alive).
func TestLiveness(t *testing.T) {
	var ready metrics.Readiness
	srv, err := metrics.Listen("127.0.0.1:0", prometheus.NewRegistry(), &ready)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	url := "http://" + srv.Addr() + "/healthz"
	if code, _ := get(t, url); code != 200 {
		t.Errorf("healthz without a check: %d", code)
	}
	ready.SetLiveness(func() error { return errors.New("join partition 2 has been in one batch for 11m") })
	if code, body := get(t, url); code != 503 || !strings.Contains(body, "partition 2") {
		t.Errorf("healthz with a failing check: %d %q", code, body)
	}
	ready.SetLiveness(nil)
	if code, _ := get(t, url); code != 200 {
		t.Errorf("healthz after the check was cleared: %d", code)
	}
}

package metrics_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdcjoin/cdcjoin/metrics"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServer(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(reg); err == nil {
		t.Error("registering twice succeeded")
	}
	m.Changes.WithLabelValues("upsert").Add(3)
	m.EventsConsumed.WithLabelValues("users", "c").Inc()
	var ready metrics.Readiness
	srv, err := metrics.Listen("127.0.0.1:0", reg, &ready)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	base := "http://" + srv.Addr()
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	if code, _ := get(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before ready = %d", code)
	}
	ready.SetCheck(func() error { return errors.New("join partition 3 catching up") })
	ready.Set(true)
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "join partition 3 catching up") {
		t.Errorf("/readyz with a failing check = %d %q", code, body)
	}
	ready.SetCheck(func() error { return nil })
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz when ready = %d", code)
	}
	_, body := get(t, base+"/metrics")
	for _, want := range []string{`cdcjoin_join_changes_total{op="upsert"} 3`, `cdcjoin_keying_events_total{op="c",topic="users"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

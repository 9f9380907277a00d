package registry

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
)

// register registers an Avro schema under subject and returns its id.
func register(t *testing.T, compat, subject, schema string) int64 {
	t.Helper()
	c, err := New(&config.SchemaRegistry{URL: compat}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id, err := c.Register(subject, schema)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestEndpoints(t *testing.T) {
	for _, c := range []struct{ url, compat, native string }{
		{"http://h:8080/apis/ccompat/v7", "http://h:8080/apis/ccompat/v7", "http://h:8080/apis/registry/v3"},
		{"http://h:8080/apis/registry/v2/", "http://h:8080/apis/ccompat/v7", "http://h:8080/apis/registry/v2"},
		{"https://sr.example:8081", "https://sr.example:8081", "https://sr.example:8081/apis/registry/v3"},
	} {
		if compat, native := endpoints(c.url); compat != c.compat || native != c.native {
			t.Errorf("%s: %s, %s", c.url, compat, native)
		}
	}
}

// TestRealRegistry fetches schemas from a real registry (Apicurio,
// deploy/local/registry.sh) by Confluent id and by Apicurio global id,
// once each, and reports an unknown id as debezium.ErrNoSuchSchema.
func TestRealRegistry(t *testing.T) {
	url := testenv.Require(t, testenv.RegistryEnv, "schema registry")
	subject := fmt.Sprintf("cdcjoin-test-%d", time.Now().UnixNano())
	schema := `{"type":"record","name":"T` + subject[len(subject)-6:] + `","fields":[{"name":"id","type":"long"}]}`
	id := register(t, url, subject, schema)
	reg := prometheus.NewRegistry()
	c, err := New(&config.SchemaRegistry{URL: url}, Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Schema(debezium.SchemaID{Space: debezium.IDConfluent, ID: id})
	if err != nil || s.Type != "AVRO" || !strings.Contains(s.Text, `"id"`) {
		t.Fatalf("schema %d: %+v, %v", id, s, err)
	}
	for i := 0; i < 3; i++ {
		c.Schema(debezium.SchemaID{Space: debezium.IDConfluent, ID: id})
	}
	if n := testutil.ToFloat64(c.requests.WithLabelValues("ok")); n != 1 {
		t.Errorf("%v requests for one id, want 1 (cached)", n)
	}
	_, err = c.Schema(debezium.SchemaID{Space: debezium.IDConfluent, ID: 987654321})
	if !errors.Is(err, debezium.ErrNoSuchSchema) || !strings.Contains(err.Error(), "987654321") {
		t.Errorf("unknown id: %v", err)
	}
	_, err = c.Schema(debezium.SchemaID{Space: debezium.IDGlobal, ID: 987654321})
	if !errors.Is(err, debezium.ErrNoSuchSchema) {
		t.Errorf("unknown global id: %v", err)
	}
}

// TestRegistryOutage: a registry that does not answer is waited for, with
// NotReady saying why and cdcjoin_registry_up 0; once it answers (a proxy
// to the real registry comes up on the address) the fetch returns.
func TestRegistryOutage(t *testing.T) {
	url := testenv.Require(t, testenv.RegistryEnv, "schema registry")
	subject := fmt.Sprintf("cdcjoin-outage-%d", time.Now().UnixNano())
	id := register(t, url, subject, `{"type":"record","name":"O`+subject[len(subject)-6:]+`","fields":[{"name":"x","type":"string"}]}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	path := url[strings.Index(url, "//")+2:]
	path = path[strings.IndexByte(path, '/'):]
	c, err := New(&config.SchemaRegistry{URL: "http://" + addr + path}, Options{MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	var got debezium.RegisteredSchema
	var gotErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		got, gotErr = c.Schema(debezium.SchemaID{Space: debezium.IDConfluent, ID: id})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for c.NotReady() == nil {
		if time.Now().After(deadline) {
			t.Fatal("NotReady never reported the unreachable registry")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if msg := c.NotReady().Error(); !strings.Contains(msg, "unreachable") || !strings.Contains(msg, fmt.Sprint(id)) {
		t.Errorf("NotReady: %s", msg)
	}
	if v := testutil.ToFloat64(c.up); v != 0 {
		t.Errorf("cdcjoin_registry_up = %v while unreachable", v)
	}
	// The registry comes back on the address.
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	target := url[:strings.Index(url, path)]
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Get(target + r.URL.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	wg.Wait()
	if gotErr != nil || !strings.Contains(got.Text, `"x"`) {
		t.Fatalf("after the outage: %+v, %v", got, gotErr)
	}
	if err := c.NotReady(); err != nil || testutil.ToFloat64(c.up) != 1 {
		t.Errorf("after the outage: NotReady %v, up %v", err, testutil.ToFloat64(c.up))
	}
	if n := testutil.ToFloat64(c.requests.WithLabelValues("error")); n < 1 {
		t.Errorf("no failed request counted")
	}
}

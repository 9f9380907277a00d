// Package registry is cdcjoin's schema registry client: it fetches the
// schemas that Avro and Protobuf records name by id, from a Confluent
// Schema Registry (or any registry with its API: Apicurio's
// /apis/ccompat/v7, Karapace) and from Apicurio Registry's own API (its
// 8-byte global ids and id headers). It implements debezium.SchemaSource.
//
// Each id is fetched once per Client and kept (schemas under an id never
// change). A registry that cannot be reached (connection refused, timeouts,
// 5xx answers) is retried with exponential backoff until it answers or the
// Client is closed; meanwhile NotReady says why (for /readyz) and the
// metrics count the failures. An id the registry does not have (404) is
// debezium.ErrNoSuchSchema; credentials it refuses (401, 403) and other
// 4xx answers fail at once.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/debezium"
)

// Options are a Client's inputs besides the configuration. The zero value
// is usable.
type Options struct {
	// Log receives a line when the registry becomes unreachable and when
	// it answers again (nil: discarded).
	Log *slog.Logger
	// Registerer, if set, gets the client's metrics:
	// cdcjoin_registry_requests_total{result}, cdcjoin_registry_up and
	// cdcjoin_registry_schemas.
	Registerer prometheus.Registerer
	// Backoff bounds the delay between attempts while the registry cannot
	// be reached (defaults 100ms doubling up to 5s).
	InitialBackoff, MaxBackoff time.Duration
	// Timeout bounds one request (default 10s).
	Timeout time.Duration
}

// Client fetches and caches schemas. Safe for concurrent use.
type Client struct {
	sr     *sr.Client
	http   *http.Client
	native string // Apicurio's own API, e.g. http://h:8080/apis/registry/v3
	compat string // the Confluent-compatible API
	opts   Options
	ctx    context.Context
	cancel context.CancelFunc
	auth   *config.RegistryBasicAuth

	mu      sync.Mutex
	cache   map[debezium.SchemaID]*entry
	failing time.Time // when the current run of failed attempts began (zero: none)
	lastErr error
	waitID  debezium.SchemaID

	requests *prometheus.CounterVec
	up       prometheus.Gauge
	schemas  prometheus.Gauge
}

// entry is one id's fetch: done is closed once schema/err are set.
type entry struct {
	done   chan struct{}
	schema debezium.RegisteredSchema
	err    error
}

var _ debezium.SchemaSource = (*Client)(nil)

// New returns a client for cfg. It does not contact the registry.
func New(cfg *config.SchemaRegistry, opts Options) (*Client, error) {
	if opts.InitialBackoff <= 0 {
		opts.InitialBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if t := cfg.TLS; t != (config.RegistryTLS{}) {
		tc, err := t.ClientConfig()
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = tc
	}
	hc := &http.Client{Transport: tr, Timeout: opts.Timeout}
	c := &Client{http: hc, opts: opts, cache: map[debezium.SchemaID]*entry{}, auth: cfg.BasicAuth}
	c.compat, c.native = endpoints(cfg.URL)
	srOpts := []sr.ClientOpt{sr.URLs(c.compat), sr.HTTPClient(hc), sr.UserAgent("cdcjoin")}
	if a := cfg.BasicAuth; a != nil {
		srOpts = append(srOpts, sr.BasicAuth(a.Username, a.Password))
	}
	var err error
	if c.sr, err = sr.NewClient(srOpts...); err != nil {
		return nil, fmt.Errorf("cdcjoin: schema registry: %w", err)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cdcjoin_registry_requests_total", Help: "Schema registry requests by result (ok, unknown, error).",
	}, []string{"result"})
	c.up = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cdcjoin_registry_up", Help: "1 unless the schema registry's last attempt failed (cdcjoin waits for it).",
	})
	c.up.Set(1)
	c.schemas = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cdcjoin_registry_schemas", Help: "Schemas fetched and cached.",
	})
	if opts.Registerer != nil {
		for _, col := range []prometheus.Collector{c.requests, c.up, c.schemas} {
			if err := opts.Registerer.Register(col); err != nil {
				return nil, fmt.Errorf("cdcjoin: schema registry metrics: %w", err)
			}
		}
	}
	return c, nil
}

// endpoints returns the Confluent-compatible API and Apicurio's own API of
// a configured URL (see config.SchemaRegistry.URL).
func endpoints(u string) (compat, native string) {
	u = strings.TrimRight(u, "/")
	if i := strings.Index(u, "/apis/ccompat/"); i >= 0 {
		return u, u[:i] + "/apis/registry/v3"
	}
	if i := strings.Index(u, "/apis/registry/"); i >= 0 {
		return u[:i] + "/apis/ccompat/v7", u
	}
	return u, u + "/apis/registry/v3"
}

// Close ends the client: fetches waiting for the registry return an
// error. Safe to call more than once, and on a nil Client.
func (c *Client) Close() {
	if c != nil {
		c.cancel()
	}
}

// Schema returns the schema registered under id, fetching it the first
// time (concurrent callers of one id share the fetch). It blocks while the
// registry cannot be reached, until it answers or Close.
func (c *Client) Schema(id debezium.SchemaID) (debezium.RegisteredSchema, error) {
	c.mu.Lock()
	e := c.cache[id]
	if e == nil {
		e = &entry{done: make(chan struct{})}
		c.cache[id] = e
		c.mu.Unlock()
		e.schema, e.err = c.fetchRetrying(id)
		c.mu.Lock()
		if e.err != nil && !errors.Is(e.err, debezium.ErrNoSuchSchema) {
			delete(c.cache, id) // not a property of the id: ask again next time
		} else {
			c.schemas.Inc()
		}
		close(e.done)
	}
	c.mu.Unlock()
	<-e.done
	return e.schema, e.err
}

// NotReady returns nil unless the registry is being waited for: then why
// (nil for a nil Client).
func (c *Client) NotReady() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failing.IsZero() {
		return nil
	}
	return fmt.Errorf("schema registry %s unreachable for %s, waiting for it to fetch %s: %v",
		c.compat, time.Since(c.failing).Round(time.Second), c.waitID, c.lastErr)
}

// permanent marks an answer that retrying does not change.
type permanent struct{ err error }

func (p *permanent) Error() string { return p.err.Error() }
func (p *permanent) Unwrap() error { return p.err }

func (c *Client) fetchRetrying(id debezium.SchemaID) (debezium.RegisteredSchema, error) {
	delay := c.opts.InitialBackoff
	for attempt := 1; ; attempt++ {
		s, err := c.fetch(id)
		var perm *permanent
		switch {
		case err == nil:
			c.requests.WithLabelValues("ok").Inc()
			c.recovered(attempt)
			return s, nil
		case errors.As(err, &perm):
			result := "error"
			if errors.Is(err, debezium.ErrNoSuchSchema) {
				result = "unknown"
			}
			c.requests.WithLabelValues(result).Inc()
			c.recovered(attempt)
			return s, perm.err
		}
		c.requests.WithLabelValues("error").Inc()
		c.mu.Lock()
		if c.failing.IsZero() {
			c.failing = time.Now()
			c.opts.Log.Warn("schema registry unreachable; waiting for it", "url", c.compat, "schema", id.String(), "err", err)
		}
		c.lastErr, c.waitID = err, id
		c.up.Set(0)
		c.mu.Unlock()
		jitter := time.Duration(rand.Int64N(int64(delay)/2 + 1))
		select {
		case <-c.ctx.Done():
			return s, fmt.Errorf("client closed while the registry was unreachable (last error: %w)", err)
		case <-time.After(delay/2 + jitter):
		}
		delay = min(2*delay, c.opts.MaxBackoff)
	}
}

// recovered ends a run of failed attempts.
func (c *Client) recovered(attempt int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.failing.IsZero() {
		c.opts.Log.Info("schema registry answers again", "url", c.compat, "after", time.Since(c.failing).Round(time.Millisecond), "attempts", attempt)
		c.failing, c.lastErr = time.Time{}, nil
	}
	c.up.Set(1)
}

// fetch makes one attempt; a *permanent error is an answer.
func (c *Client) fetch(id debezium.SchemaID) (debezium.RegisteredSchema, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.Timeout)
	defer cancel()
	if id.Space == debezium.IDConfluent {
		s, err := c.sr.SchemaByID(ctx, int(id.ID))
		if err != nil {
			return debezium.RegisteredSchema{}, classify(err, id)
		}
		out := debezium.RegisteredSchema{Type: schemaType(s.Type.String()), Text: s.Schema}
		if len(s.References) > 0 {
			out.Refs = map[string]string{}
			if err := c.references(ctx, s.References, out.Refs, 0); err != nil {
				return out, classify(err, id)
			}
		}
		return out, nil
	}
	kind := "globalIds"
	if id.Space == debezium.IDContent {
		kind = "contentIds"
	}
	body, hdr, err := c.get(ctx, c.native+"/ids/"+kind+"/"+strconv.FormatInt(id.ID, 10))
	if err != nil {
		return debezium.RegisteredSchema{}, classify(err, id)
	}
	t := hdr.Get("X-Registry-ArtifactType")
	if t == "" {
		t = sniff(body)
	}
	return debezium.RegisteredSchema{Type: schemaType(t), Text: string(body)}, nil
}

// references resolves a schema's references (and theirs) into refs.
func (c *Client) references(ctx context.Context, rs []sr.SchemaReference, refs map[string]string, depth int) error {
	if depth > 16 {
		return &permanent{fmt.Errorf("schema references nested more than 16 deep")}
	}
	for _, r := range rs {
		if _, ok := refs[r.Name]; ok {
			continue
		}
		s, err := c.sr.SchemaByVersion(ctx, r.Subject, r.Version)
		if err != nil {
			return err
		}
		refs[r.Name] = s.Schema.Schema
		if err := c.references(ctx, s.References, refs, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// httpError is a non-2xx answer of Apicurio's own API.
type httpError struct {
	url    string
	status int
	body   string
}

func (e *httpError) Error() string {
	return fmt.Sprintf("GET %s: HTTP %d: %.200s", e.url, e.status, e.body)
}

func (c *Client) get(ctx context.Context, url string) ([]byte, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, &permanent{err}
	}
	req.Header.Set("User-Agent", "cdcjoin")
	if c.auth != nil {
		req.SetBasicAuth(c.auth.Username, c.auth.Password)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, &httpError{url, resp.StatusCode, strings.TrimSpace(string(body))}
	}
	return body, resp.Header, nil
}

// classify turns a failed request into a retryable error or a *permanent
// one: unknown ids (404), refused credentials, other client errors.
func classify(err error, id debezium.SchemaID) error {
	status := 0
	var re *sr.ResponseError
	var he *httpError
	switch {
	case errors.As(err, &re):
		status = re.StatusCode
	case errors.As(err, &he):
		status = he.status
	}
	switch {
	case status == http.StatusNotFound:
		return &permanent{fmt.Errorf("%s: %w (%v)", id, debezium.ErrNoSuchSchema, err)}
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return &permanent{fmt.Errorf("the registry refused the credentials (set schema_registry.basic_auth): %w", err)}
	case status >= 400 && status < 500 && status != http.StatusTooManyRequests && status != http.StatusRequestTimeout:
		return &permanent{err}
	}
	return err
}

// schemaType normalizes a registry's type name; none means Avro.
func schemaType(t string) string {
	switch strings.ToUpper(t) {
	case "", "AVRO":
		return "AVRO"
	case "PROTOBUF":
		return "PROTOBUF"
	case "JSON":
		return "JSON"
	}
	return strings.ToUpper(t)
}

// sniff guesses the type of a schema served without one: Avro is JSON.
func sniff(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) == nil {
		return "AVRO"
	}
	return "PROTOBUF"
}

// Register registers an Avro schema under subject (the Confluent-
// compatible API) and returns its id: for tools and tests that write Avro
// records as a converter would.
func (c *Client) Register(subject, schema string) (int64, error) {
	return c.register(subject, sr.Schema{Schema: schema, Type: sr.TypeAvro})
}

// RegisterProtobuf registers a .proto file under subject and returns its
// id; imports names the files it imports other than Google's well-known
// types, which are registered first, each under its own name as subject
// and referenced by it (as Confluent's serializers register
// confluent/meta.proto).
func (c *Client) RegisterProtobuf(subject, schema string, imports map[string]string) (int64, error) {
	names := make([]string, 0, len(imports))
	for name := range imports {
		names = append(names, name)
	}
	slices.Sort(names)
	var refs []sr.SchemaReference
	for _, name := range names {
		if _, err := c.register(name, sr.Schema{Schema: imports[name], Type: sr.TypeProtobuf}); err != nil {
			return 0, err
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.Timeout)
		s, err := c.sr.SchemaByVersion(ctx, name, -1)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("cdcjoin: schema registry: %s: %w", name, err)
		}
		refs = append(refs, sr.SchemaReference{Name: name, Subject: name, Version: s.Version})
	}
	return c.register(subject, sr.Schema{Schema: schema, Type: sr.TypeProtobuf, References: refs})
}

func (c *Client) register(subject string, s sr.Schema) (int64, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.Timeout)
	defer cancel()
	got, err := c.sr.CreateSchema(ctx, subject, s)
	if err != nil {
		return 0, fmt.Errorf("cdcjoin: schema registry: register %s: %w", subject, err)
	}
	return int64(got.ID), nil
}

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	json "github.com/goccy/go-json"
)

// Connect is a client of Kafka Connect's REST API.
type Connect struct {
	URL string // e.g. http://127.0.0.1:18083
	hc  http.Client
}

func (c *Connect) do(ctx context.Context, method, path string, body any) ([]byte, int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.URL, "/")+path, rd)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("cdcjoin: e2e: connect %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("cdcjoin: e2e: connect %s %s: %w", method, path, err)
	}
	return out, resp.StatusCode, nil
}

// ConnectorConfig reads file ({"name":…,"config":{…}}, like
// deploy/local/debezium-postgres.json) and applies overrides.
func ConnectorConfig(file string, overrides map[string]string) (map[string]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: e2e: %w", err)
	}
	var f struct {
		Config map[string]string `json:"config"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("cdcjoin: e2e: %s: %w", file, err)
	}
	if f.Config == nil {
		return nil, fmt.Errorf("cdcjoin: e2e: %s has no \"config\" object", file)
	}
	for k, v := range overrides {
		f.Config[k] = v
	}
	return f.Config, nil
}

// Connectors lists the registered connector names.
func (c *Connect) Connectors(ctx context.Context) ([]string, error) {
	b, code, err := c.do(ctx, http.MethodGet, "/connectors", nil)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("cdcjoin: e2e: GET /connectors: HTTP %d: %s", code, b)
	}
	var names []string
	if err := json.Unmarshal(b, &names); err != nil {
		return nil, fmt.Errorf("cdcjoin: e2e: GET /connectors: %w", err)
	}
	return names, nil
}

// Unregister deletes connector name (absent is fine) and waits until it is
// gone, so that its replication slot is released.
func (c *Connect) Unregister(ctx context.Context, name string) error {
	b, code, err := c.do(ctx, http.MethodDelete, "/connectors/"+name, nil)
	if err != nil {
		return err
	}
	if code >= 300 && code != http.StatusNotFound {
		return fmt.Errorf("cdcjoin: e2e: DELETE /connectors/%s: HTTP %d: %s", name, code, b)
	}
	for {
		_, code, err := c.do(ctx, http.MethodGet, "/connectors/"+name, nil)
		if err == nil && code == http.StatusNotFound {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cdcjoin: e2e: connector %s not deleted: %w", name, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Register creates or updates connector name with cfg and waits until it
// and its tasks are RUNNING; a FAILED state returns the trace.
func (c *Connect) Register(ctx context.Context, name string, cfg map[string]string) error {
	b, code, err := c.do(ctx, http.MethodPut, "/connectors/"+name+"/config", cfg)
	if err != nil {
		return err
	}
	if code >= 300 {
		return fmt.Errorf("cdcjoin: e2e: PUT /connectors/%s/config: HTTP %d: %s", name, code, b)
	}
	for {
		b, code, err := c.do(ctx, http.MethodGet, "/connectors/"+name+"/status", nil)
		if err == nil && code == http.StatusOK {
			var st struct {
				Connector struct{ State, Trace string }
				Tasks     []struct{ State, Trace string }
			}
			if json.Unmarshal(b, &st) == nil {
				running := st.Connector.State == "RUNNING" && len(st.Tasks) > 0
				for _, t := range st.Tasks {
					if t.State == "FAILED" {
						return fmt.Errorf("cdcjoin: e2e: connector %s task FAILED: %s", name, firstLines(t.Trace, 15))
					}
					running = running && t.State == "RUNNING"
				}
				if st.Connector.State == "FAILED" {
					return fmt.Errorf("cdcjoin: e2e: connector %s FAILED: %s", name, firstLines(st.Connector.Trace, 15))
				}
				if running {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cdcjoin: e2e: connector %s not RUNNING: %w", name, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// Package compose loads docker-compose.yml with the Compose specification's
// own Go library (compose-spec/compose-go: schema validation, interpolation,
// normalization, the consistency checks `docker compose config` runs) — no
// container engine runs here — and checks what the stack needs: pinned
// images, healthchecks on what others wait for, and the connector's
// registration ordered between Kafka Connect and cdcjoin. (The e2e
// package's TestDockerCompose cross-checks the mounted configs.)
package compose

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

func load(t *testing.T, file string) (*types.Project, error) {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{file},
		cli.WithWorkingDirectory(filepath.Dir(file)),
		cli.WithEnv(nil), // what the file says, not this machine's environment
		cli.WithConsistency(true), cli.WithNormalization(true), cli.WithResolvedPaths(true))
	if err != nil {
		return nil, err
	}
	return opts.LoadProject(context.Background())
}

// versionTag: an image reference with an explicit version (major.minor at
// least), or a digest; never latest or no tag.
var versionTag = regexp.MustCompile(`^[a-z0-9./_-]+(:v?[0-9]+\.[0-9]+[0-9A-Za-z._-]*)?(@sha256:[0-9a-f]{64})?$`)

func pinned(img string) bool {
	return versionTag.MatchString(img) && strings.ContainsAny(img, ":@")
}

func TestComposeFile(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	p, err := load(t, filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatalf("docker-compose.yml does not load with compose-go: %v", err)
	}
	if p.Name != "cdcjoin" {
		t.Errorf("project name %q", p.Name)
	}
	for _, want := range []string{"postgres", "kafka", "kafka-connect", "register-connector", "clickhouse", "cdcjoin", "prometheus"} {
		if _, ok := p.Services[want]; !ok {
			t.Errorf("service %s missing", want)
		}
	}
	for name, s := range p.Services {
		switch {
		case s.Build != nil:
			if _, err := os.Stat(filepath.Join(s.Build.Context, s.Build.Dockerfile)); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		case s.Image == "":
			t.Errorf("%s: neither image nor build", name)
		case !pinned(s.Image):
			t.Errorf("%s: image %q is not pinned to a version (name:MAJOR.MINOR[.PATCH] or a digest)", name, s.Image)
		}
		for dep, d := range s.DependsOn {
			target := p.Services[dep]
			if d.Condition == types.ServiceConditionHealthy && target.HealthCheck == nil {
				t.Errorf("%s waits for %s to be healthy, which has no healthcheck", name, dep)
			}
			if d.Condition == types.ServiceConditionCompletedSuccessfully && target.Restart != "no" {
				t.Errorf("%s waits for one-shot %s, whose restart is %q", name, dep, target.Restart)
			}
		}
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeBind {
				if _, err := os.Stat(v.Source); err != nil {
					t.Errorf("%s: bind mount: %v", name, err)
				}
			}
		}
	}
	// Healthchecks on every server others depend on (cdcjoin's image is
	// distroless, without a client to probe /readyz: Prometheus only needs it
	// started).
	for _, name := range []string{"postgres", "kafka", "kafka-connect", "clickhouse"} {
		if hc := p.Services[name].HealthCheck; hc == nil || len(hc.Test) == 0 || hc.Disable {
			t.Errorf("%s has no healthcheck", name)
		}
	}
	// The connector registration: after Connect is healthy, once, and cdcjoin
	// starts after it succeeded, with the connector file mounted.
	reg := p.Services["register-connector"]
	if d, ok := reg.DependsOn["kafka-connect"]; !ok || d.Condition != types.ServiceConditionHealthy {
		t.Errorf("register-connector must wait for kafka-connect to be healthy: %+v", reg.DependsOn)
	}
	if d, ok := p.Services["cdcjoin"].DependsOn["register-connector"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
		t.Errorf("cdcjoin must start after the connector is registered: %+v", p.Services["cdcjoin"].DependsOn)
	}
	mounted := map[string]string{}
	for _, v := range reg.Volumes {
		mounted[v.Target] = v.Source
	}
	for _, arg := range reg.Entrypoint {
		if strings.HasPrefix(arg, "/") && mounted[arg] == "" {
			t.Errorf("register-connector's entrypoint uses %s, which is not mounted", arg)
		}
	}
	if !strings.HasSuffix(mounted["/debezium-postgres.json"], "deploy/compose/debezium-postgres.json") {
		t.Errorf("connector config mounted from %q", mounted["/debezium-postgres.json"])
	}
}

// TestComposeNegativeControl: the loader refuses what is wrong (an unknown
// service key, a dependency on a missing service), so the test above would
// see it.
func TestComposeNegativeControl(t *testing.T) {
	for _, bad := range []string{
		"services:\n  a:\n    image: x:1.0\n    imagee: y\n",
		"services:\n  a:\n    image: x:1.0\n    depends_on: [missing]\n",
	} {
		f := filepath.Join(t.TempDir(), "compose.yml")
		if err := os.WriteFile(f, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := load(t, f); err == nil {
			t.Errorf("loaded:\n%s", bad)
		}
	}
	for _, img := range []string{"postgres", "postgres:latest", "postgres:15-alpine"} {
		if pinned(img) {
			t.Errorf("%s counts as pinned", img)
		}
	}
}

package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	json "github.com/goccy/go-json"

	"go.yaml.in/yaml/v3"

	"github.com/cdcjoin/cdcjoin/config"
)

// compose is the part of a Compose file the checks read.
type compose struct {
	Services map[string]struct {
		Image       string `yaml:"image"`
		Build       *struct{ Context, Dockerfile string }
		Command     []string          `yaml:"command"`
		Entrypoint  []string          `yaml:"entrypoint"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		Ports       []string          `yaml:"ports"`
		DependsOn   yaml.Node         `yaml:"depends_on"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// TestDockerCompose validates docker-compose.yml without a Docker engine:
// required services, images, ports, depends_on targets and conditions,
// bind-mounted files, and that the mounted cdcjoin config, connector and
// Prometheus target agree with the services (and `docker compose config`
// when a docker CLI exists).
func TestDockerCompose(t *testing.T) {
	const root = ".."
	data, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, name := range []string{"postgres", "kafka", "kafka-connect", "register-connector", "clickhouse", "cdcjoin", "prometheus"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("service %s missing", name)
		}
	}
	wantImage := map[string]string{"postgres": "postgres:", "kafka": "apache/kafka:", "kafka-connect": "quay.io/debezium/connect:3.", "clickhouse": "clickhouse/clickhouse-server:", "prometheus": "prom/prometheus:"}
	for name, prefix := range wantImage {
		if img := c.Services[name].Image; !strings.HasPrefix(img, prefix) {
			t.Errorf("%s: image %q, want %s…", name, img, prefix)
		}
	}
	if b := c.Services["cdcjoin"].Build; b == nil || b.Dockerfile == "" {
		t.Error("cdcjoin: must be built from the Dockerfile")
	} else if _, err := os.Stat(filepath.Join(root, b.Context, b.Dockerfile)); err != nil {
		t.Error(err)
	}
	for name, s := range c.Services {
		// depends_on: every target is a service; short or long syntax.
		var targets []string
		switch s.DependsOn.Kind {
		case yaml.SequenceNode:
			_ = s.DependsOn.Decode(&targets)
		case yaml.MappingNode:
			var m map[string]struct{ Condition string }
			if err := s.DependsOn.Decode(&m); err != nil {
				t.Errorf("%s: depends_on: %v", name, err)
			}
			for dep, cond := range m {
				targets = append(targets, dep)
				switch cond.Condition {
				case "service_started", "service_healthy", "service_completed_successfully":
				default:
					t.Errorf("%s: depends_on %s: condition %q", name, dep, cond.Condition)
				}
				if cond.Condition == "service_healthy" && c.Services[dep].Healthcheck == nil {
					t.Errorf("%s waits for %s to be healthy, which has no healthcheck", name, dep)
				}
			}
		}
		for _, dep := range targets {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("%s: depends_on unknown service %s", name, dep)
			}
		}
		// volumes: bind mounts name existing files; named volumes are declared.
		for _, v := range s.Volumes {
			src := strings.SplitN(v, ":", 2)[0]
			if strings.HasPrefix(src, "./") {
				if _, err := os.Stat(filepath.Join(root, src)); err != nil {
					t.Errorf("%s: volume %s: %v", name, v, err)
				}
			} else if _, ok := c.Volumes[src]; !ok {
				t.Errorf("%s: named volume %s not declared", name, src)
			}
		}
		for _, p := range s.Ports {
			f := strings.Split(p, ":")
			if len(f) != 3 || net.ParseIP(f[0]) == nil {
				t.Errorf("%s: port %q: publish as 127.0.0.1:HOST:CONTAINER", name, p)
			}
		}
	}
	if !strings.Contains(strings.Join(c.Services["postgres"].Command, " "), "wal_level=logical") {
		t.Error("postgres: wal_level=logical missing")
	}

	// The cdcjoin config loads and points at the compose services.
	cfg, err := config.Load(filepath.Join(root, "deploy/compose/cdcjoin.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.ValidateForKafka(); err != nil {
		t.Fatal(err)
	}
	if cfg.Kafka.Brokers[0] != "kafka:9092" || cfg.ClickHouse == nil || cfg.ClickHouse.Addr[0] != "clickhouse:9000" {
		t.Errorf("cdcjoin.yaml: brokers %v, clickhouse %+v", cfg.Kafka.Brokers, cfg.ClickHouse)
	}
	_, metricsPort, _ := net.SplitHostPort(cfg.Kafka.MetricsAddr)
	prom, err := os.ReadFile(filepath.Join(root, "deploy/compose/prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var pc struct {
		ScrapeConfigs []struct {
			StaticConfigs []struct{ Targets []string } `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(prom, &pc); err != nil {
		t.Fatal(err)
	}
	if len(pc.ScrapeConfigs) == 0 || len(pc.ScrapeConfigs[0].StaticConfigs) == 0 || pc.ScrapeConfigs[0].StaticConfigs[0].Targets[0] != "cdcjoin:"+metricsPort {
		t.Errorf("prometheus.yml must scrape cdcjoin:%s: %+v", metricsPort, pc)
	}

	// The connector reads the compose PostgreSQL and writes the topics the
	// config reads; it matches the local stack's connector otherwise.
	cc, err := ConnectorConfig(filepath.Join(root, "deploy/compose/debezium-postgres.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	local, err := ConnectorConfig(filepath.Join(root, "deploy/local/debezium-postgres.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range local {
		switch k {
		case "database.hostname", "database.port":
		default:
			if cc[k] != v {
				t.Errorf("connector %s: compose %q, local stack %q", k, cc[k], v)
			}
		}
	}
	if cc["database.hostname"] != "postgres" || cc["database.port"] != "5432" || cc["database.password"] != c.Services["postgres"].Environment["POSTGRES_PASSWORD"] {
		t.Errorf("connector does not point at the postgres service: %v", cc)
	}
	if want := cc["topic.prefix"] + ".public.users"; cfg.Parent.Topic != want {
		t.Errorf("cdcjoin.yaml parent topic %q, connector writes %q", cfg.Parent.Topic, want)
	}
	var raw map[string]any
	if b, err := os.ReadFile(filepath.Join(root, "deploy/compose/debezium-postgres.json")); err != nil || json.Unmarshal(b, &raw) != nil || raw["name"] == "" {
		t.Error("deploy/compose/debezium-postgres.json: needs a name")
	}

	// `docker compose config` validates against Compose's schema, where
	// the docker CLI and its compose plugin exist (not on this machine).
	if docker, err := exec.LookPath("docker"); err == nil && exec.Command(docker, "compose", "version").Run() == nil {
		out, err := exec.Command(docker, "compose", "-f", filepath.Join(root, "docker-compose.yml"), "config", "--quiet").CombinedOutput()
		if err != nil {
			t.Errorf("docker compose config: %v\n%s", err, out)
		}
	}
}

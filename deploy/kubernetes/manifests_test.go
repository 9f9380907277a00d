// Package kubernetes tests the Helm chart (deploy/helm/cdcjoin) and the
// manifests rendered from it (deploy/kubernetes/cdcjoin.yaml), offline: the
// chart is linted and rendered with Helm's own packages, and every rendered
// document is decoded strictly (unknown or misspelled fields are errors) into
// the Kubernetes API types (k8s.io/api) and the Prometheus Operator's
// ServiceMonitor type, then checked for what a cdcjoin deployment needs.
package kubernetes

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/deploy/internal/cdcjoinbin"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite deploy/kubernetes/cdcjoin.yaml from the chart's defaults")

const chartDir = "../helm/cdcjoin"

// manifests is one rendering, decoded.
type manifests struct {
	sts    *appsv1.StatefulSet
	cm     *corev1.ConfigMap
	svc    *corev1.Service
	pdb    *policyv1.PodDisruptionBudget
	sm     *monitoringv1.ServiceMonitor
	byKind map[string]int
}

// render runs `helm template` (Helm's engine) on the chart with the values
// overrides (YAML) and returns the manifest stream, documents sorted by file.
func render(t *testing.T, overrides string) (string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{}
	if overrides != "" {
		if err := yaml.Unmarshal([]byte(overrides), &vals); err != nil {
			t.Fatal(err)
		}
	}
	return renderChart(ch, vals)
}

func renderChart(ch *chart.Chart, vals map[string]any) (string, error) {
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "user-domains", Namespace: "cdc", IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		return "", err
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		if strings.HasSuffix(n, ".yaml") && strings.TrimSpace(files[n]) != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", strings.TrimPrefix(n, ch.Name()+"/"), strings.TrimSpace(files[n]))
	}
	return b.String(), nil
}

// strict decodes doc into out, refusing unknown fields (what kubectl's
// server-side validation would refuse).
func strict(doc []byte, out any) error {
	return yaml.UnmarshalStrict(doc, out)
}

// decode splits the stream and decodes every document strictly into its
// API type; a kind the chart does not produce is an error.
func decode(t *testing.T, stream string) *manifests {
	t.Helper()
	m := &manifests{byKind: map[string]int{}}
	for _, doc := range regexp.MustCompile(`(?m)^---\n`).Split(stream, -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if head.APIVersion == "" && head.Kind == "" && regexp.MustCompile(`^(\s*(#.*)?\n?)*$`).MatchString(doc) {
			continue // only comments
		}
		var err error
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 StatefulSet":
			m.sts = &appsv1.StatefulSet{}
			err = strict([]byte(doc), m.sts)
		case "v1 ConfigMap":
			m.cm = &corev1.ConfigMap{}
			err = strict([]byte(doc), m.cm)
		case "v1 Service":
			m.svc = &corev1.Service{}
			err = strict([]byte(doc), m.svc)
		case "policy/v1 PodDisruptionBudget":
			m.pdb = &policyv1.PodDisruptionBudget{}
			err = strict([]byte(doc), m.pdb)
		case "monitoring.coreos.com/v1 ServiceMonitor":
			m.sm = &monitoringv1.ServiceMonitor{}
			err = strict([]byte(doc), m.sm)
		default:
			t.Fatalf("unexpected %s %s:\n%s", head.APIVersion, head.Kind, doc)
		}
		if err != nil {
			t.Fatalf("%s does not decode strictly into the API type: %v\n%s", head.Kind, err, doc)
		}
		m.byKind[head.Kind]++
	}
	return m
}

// TestLint: `helm lint --strict` of the chart, with the default values and
// with TLS and SASL on.
func TestLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{"defaults": nil, "tls+sasl": must(t, tlsSASL)} {
		l := lint.All(chartDir, vals, "cdc", true)
		for _, msg := range l.Messages {
			if msg.Severity >= support.WarningSev {
				t.Errorf("%s: helm lint: %s", name, msg)
			}
		}
	}
}

func must(t *testing.T, y string) map[string]any {
	var v map[string]any
	if err := yaml.Unmarshal([]byte(y), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

const tlsSASL = `
replicas: 6
credentials: {secretName: ud-creds, kafkaUsernameKey: kafka-user, kafkaPasswordKey: kafka-password, clickhousePasswordKey: ch-password}
kafka:
  sasl: {mechanism: scram-sha-512}
  tls: {enabled: true, secretName: kafka-ca, caKey: ca.crt, certKey: tls.crt, keyKey: tls.key}
clickhouse:
  tls: {enabled: true, secretName: ch-ca}
resources: {requests: {cpu: "2", memory: 3Gi}, limits: {memory: 4Gi}}
storage: {size: 200Gi, storageClassName: fast-ssd}
serviceMonitor: {labels: {release: prometheus}}
updateStrategy: RollingUpdate
`

// TestRenderedManifests: the checked-in deploy/kubernetes/cdcjoin.yaml is
// the chart rendered with its defaults (-update rewrites it), and every
// document of it and of a TLS+SASL rendering decodes strictly and holds
// what running cdcjoin on Kubernetes needs.
func TestRenderedManifests(t *testing.T) {
	got, err := render(t, "")
	if err != nil {
		t.Fatal(err)
	}
	got = "# Rendered from deploy/helm/cdcjoin with its default values (release user-domains, namespace cdc):\n" +
		"# helm template user-domains deploy/helm/cdcjoin -n cdc. Do not edit: deploy/kubernetes's test\n" +
		"# checks it equals the chart's output (go test ./kubernetes -update in deploy/ rewrites it).\n" + got
	const golden = "cdcjoin.yaml"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Errorf("%s is not the chart's rendering; run go test ./kubernetes -update in deploy/", golden)
	}
	checkManifests(t, "defaults", decode(t, string(want)), defaults{replicas: 3, secrets: 0, tlsVolumes: 0})
	tls, err := render(t, tlsSASL)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, tls)
	checkManifests(t, "tls+sasl", m, defaults{replicas: 6, secrets: 3, tlsVolumes: 2})
	job := m.cm.Data["job.yaml"]
	for _, want := range []string{
		"mechanism: scram-sha-512", "username: ${CDCJOIN_KAFKA_USERNAME}", "password: ${CDCJOIN_KAFKA_PASSWORD}",
		"ca_file: /etc/cdcjoin/kafka-tls/ca.crt", "cert_file: /etc/cdcjoin/kafka-tls/tls.crt", "key_file: /etc/cdcjoin/kafka-tls/tls.key",
		"ca_file: /etc/cdcjoin/clickhouse-tls/ca.crt", "password: ${CDCJOIN_CLICKHOUSE_PASSWORD}",
	} {
		if !strings.Contains(job, want) {
			t.Errorf("tls+sasl job lacks %q:\n%s", want, job)
		}
	}
	if q := m.sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse("200Gi")) != 0 {
		t.Errorf("storage %v", q.String())
	}
	if sc := m.sts.Spec.VolumeClaimTemplates[0].Spec.StorageClassName; sc == nil || *sc != "fast-ssd" {
		t.Errorf("storageClassName %v", sc)
	}
	if m.sm.Labels["release"] != "prometheus" {
		t.Errorf("ServiceMonitor labels %v", m.sm.Labels)
	}
}

type defaults struct{ replicas, secrets, tlsVolumes int }

func checkManifests(t *testing.T, name string, m *manifests, want defaults) {
	t.Helper()
	errorf := func(format string, args ...any) { t.Errorf(name+": "+format, args...) }
	for _, k := range []string{"StatefulSet", "ConfigMap", "Service", "PodDisruptionBudget", "ServiceMonitor"} {
		if m.byKind[k] != 1 {
			errorf("%d %s, want 1", m.byKind[k], k)
		}
	}
	if m.sts == nil || m.cm == nil || m.svc == nil || m.pdb == nil || m.sm == nil {
		t.FailNow()
	}
	sts, pod := m.sts, &m.sts.Spec.Template.Spec
	if *sts.Spec.Replicas != int32(want.replicas) {
		errorf("replicas %d", *sts.Spec.Replicas)
	}
	if sts.Spec.ServiceName != m.svc.Name || m.svc.Spec.ClusterIP != corev1.ClusterIPNone || !m.svc.Spec.PublishNotReadyAddresses {
		errorf("the StatefulSet's service must be the headless metrics Service publishing not-ready pods: %s %q %v", sts.Spec.ServiceName, m.svc.Spec.ClusterIP, m.svc.Spec.PublishNotReadyAddresses)
	}
	sel := sts.Spec.Selector.MatchLabels
	for k, v := range sel {
		if sts.Spec.Template.Labels[k] != v || m.svc.Spec.Selector[k] != v || m.pdb.Spec.Selector.MatchLabels[k] != v || m.sm.Spec.Selector.MatchLabels[k] != v {
			errorf("selector label %s=%s does not select the pods from every object", k, v)
		}
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: %d containers", name, len(pod.Containers))
	}
	c := pod.Containers[0]
	// state.dir on a volume claim per pod.
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		errorf("%d volume claim templates", len(sts.Spec.VolumeClaimTemplates))
	}
	claim := sts.Spec.VolumeClaimTemplates[0].Name
	job := m.cm.Data["job.yaml"]
	var cfg struct {
		State struct{ Dir string }
		Kafka struct {
			InstanceID   string `json:"instance_id"`
			MetricsAddr  string `json:"metrics_addr"`
			DrainTimeout string `json:"drain_timeout"`
		}
	}
	if err := yaml.Unmarshal([]byte(job), &cfg); err != nil {
		t.Fatal(err)
	}
	mounted := false
	for _, vm := range c.VolumeMounts {
		if vm.Name == claim && strings.HasPrefix(cfg.State.Dir, vm.MountPath+"/") {
			mounted = true
		}
	}
	if !mounted {
		errorf("state.dir %s is not on the volume claim %s", cfg.State.Dir, claim)
	}
	// instance_id from the pod name.
	podName := false
	for _, e := range c.Env {
		if e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
			podName = true
		}
	}
	if !podName || cfg.Kafka.InstanceID != "${POD_NAME}" {
		errorf("kafka.instance_id %q must be ${POD_NAME} from the downward API", cfg.Kafka.InstanceID)
	}
	// Probes on the metrics port.
	port := 0
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			port = int(p.ContainerPort)
		}
	}
	if !strings.HasSuffix(cfg.Kafka.MetricsAddr, fmt.Sprintf(":%d", port)) || !strings.HasPrefix(cfg.Kafka.MetricsAddr, "0.0.0.0:") {
		errorf("metrics_addr %q vs container port %d", cfg.Kafka.MetricsAddr, port)
	}
	for probe, path := range map[*corev1.Probe]string{c.ReadinessProbe: "/readyz", c.LivenessProbe: "/healthz", c.StartupProbe: "/healthz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.StrVal != "metrics" {
			errorf("probe for %s: %+v", path, probe)
		}
	}
	// Grace period above the drain timeout.
	var drain int
	if _, err := fmt.Sscanf(cfg.Kafka.DrainTimeout, "%ds", &drain); err != nil {
		errorf("drain_timeout %q", cfg.Kafka.DrainTimeout)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || int(*g) <= drain {
		errorf("terminationGracePeriodSeconds %v <= drain_timeout %ds", g, drain)
	}
	// Resources: requests for CPU and memory, a memory limit.
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		errorf("resources %+v", c.Resources)
	}
	if m.pdb.Spec.MaxUnavailable == nil || m.pdb.Spec.MaxUnavailable.IntValue() != 1 {
		errorf("PodDisruptionBudget %+v", m.pdb.Spec)
	}
	if len(m.sm.Spec.Endpoints) != 1 || m.sm.Spec.Endpoints[0].Port != "metrics" || m.sm.Spec.Endpoints[0].Path != "/metrics" {
		errorf("ServiceMonitor endpoints %+v", m.sm.Spec.Endpoints)
	}
	// Credentials only from Secrets: no password or secret-looking value in the
	// ConfigMap but ${ENV} references, every such reference an env var from a Secret.
	secrets := 0
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secrets++
			if !strings.Contains(job, "${"+e.Name+"}") {
				errorf("env %s from a Secret is not used by the job", e.Name)
			}
		} else if e.Value != "" {
			errorf("env %s has a literal value", e.Name)
		}
	}
	if secrets != want.secrets {
		errorf("%d env vars from Secrets, want %d", secrets, want.secrets)
	}
	for _, l := range strings.Split(job, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && (strings.Contains(k, "password") || strings.Contains(k, "username")) {
			if v = strings.TrimSpace(v); !regexp.MustCompile(`^\$\{[A-Z_]+\}$`).MatchString(v) {
				errorf("ConfigMap holds %s: %s (credentials come from Secrets)", k, v)
			}
		}
	}
	for _, ref := range regexp.MustCompile(`\$\{([A-Z_]+)\}`).FindAllStringSubmatch(job, -1) {
		found := false
		for _, e := range c.Env {
			found = found || e.Name == ref[1]
		}
		if !found {
			errorf("the job references ${%s}, which the pod does not set", ref[1])
		}
	}
	tlsVolumes := 0
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			tlsVolumes++
		}
	}
	if tlsVolumes != want.tlsVolumes {
		errorf("%d Secret volumes, want %d", tlsVolumes, want.tlsVolumes)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || pod.SecurityContext.FSGroup == nil {
		errorf("container must run with a read-only root and an fsGroup for the volume")
	}
}

// TestChartRefuses: what the chart must not render.
func TestChartRefuses(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		{"terminationGracePeriodSeconds: 15", "must exceed drainTimeoutSeconds"},
		{"job: {clickhouse: {addr: [ch:9000], password: hunter2}}", "job.clickhouse.password is set by the chart"},
		{"job: {kafka: {brokers: [k:9092], sasl: {mechanism: plain, password: x}}}", "job.kafka.sasl is set by the chart"},
		{"job: {state: {dir: /tmp}}", "job.state.dir is set by the chart"},
		{"kafka: {sasl: {mechanism: plain}}", "needs credentials.kafkaUsernameKey"},
		{"kafka: {tls: {enabled: true}}", "kafka.tls.enabled needs kafka.tls.secretName"},
		{"kafka: {tls: {enabled: true, secretName: s, certKey: tls.crt}}", "go together"},
	} {
		_, err := render(t, tc.values)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.values, err, tc.want)
		}
	}
}

// TestJobIsValidConfig: the rendered job is a configuration cdcjoin
// accepts (`cdcjoin ddl` parses and validates it), with the environment
// the pod gives it.
func TestJobIsValidConfig(t *testing.T) {
	for name, vals := range map[string]string{"defaults": "", "tls+sasl": tlsSASL} {
		out, err := render(t, vals)
		if err != nil {
			t.Fatal(err)
		}
		m := decode(t, out)
		dir := t.TempDir()
		job := m.cm.Data["job.yaml"]
		// The TLS files the pod mounts, here empty files at the same paths' names.
		job = strings.ReplaceAll(job, "/etc/cdcjoin/", dir+"/")
		for _, sub := range []string{"kafka-tls", "clickhouse-tls"} {
			if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"ca.crt", "tls.crt", "tls.key"} {
				if err := os.WriteFile(filepath.Join(dir, sub, f), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		job = strings.ReplaceAll(job, "/var/lib/cdcjoin/state", filepath.Join(dir, "state"))
		path := filepath.Join(dir, "job.yaml")
		if err := os.WriteFile(path, []byte(job), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := cdcjoinCmd(t, "ddl", "--config", path)
		cmd.Env = append(os.Environ(), "POD_NAME=user-domains-cdcjoin-0", "CDCJOIN_KAFKA_USERNAME=u", "CDCJOIN_KAFKA_PASSWORD=p", "CDCJOIN_CLICKHOUSE_PASSWORD=p")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		ddl, err := cmd.Output()
		if err != nil {
			t.Errorf("%s: cdcjoin ddl refuses the rendered job: %v\n%s\n%s", name, err, stderr.String(), job)
		} else if !bytes.Contains(ddl, []byte("CREATE TABLE IF NOT EXISTS `analytics`.`user_domains`")) {
			t.Errorf("%s: ddl:\n%s", name, ddl)
		}
	}
}

var bin cdcjoinbin.Builder

func cdcjoinCmd(t *testing.T, args ...string) *exec.Cmd {
	return exec.Command(bin.Path(t), args...)
}

// TestStrictCatchesTypos is the negative control of the strict decoding: a
// misspelled field of the rendered StatefulSet is an error, not ignored.
func TestStrictCatchesTypos(t *testing.T) {
	out, err := render(t, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(out, "\n---\n") {
		if !strings.Contains(doc, "kind: StatefulSet") {
			continue
		}
		if err := strict([]byte(doc), &appsv1.StatefulSet{}); err != nil {
			t.Fatal(err)
		}
		bad := strings.Replace(doc, "terminationGracePeriodSeconds:", "terminationGracePeriodSecond:", 1)
		if err := strict([]byte(bad), &appsv1.StatefulSet{}); err == nil || !strings.Contains(err.Error(), "terminationGracePeriodSecond") {
			t.Errorf("a misspelled field decoded: %v", err)
		}
		return
	}
	t.Fatal("no StatefulSet rendered")
}

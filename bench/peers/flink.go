package peers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// flinkProject is the Maven project of the Flink peer (flink/README.md).
//
//go:embed flink/pom.xml flink/jvm.options flink/src
var flinkProject embed.FS

// flinkMain is the peer's entry point (flink/src/…/JoinPeer.java).
const flinkMain = "io.github.cdcjoin.peers.flink.JoinPeer"

// Flink runs the Flink SQL peer: Flink 2.3's regular join of users and
// domains on an in-process MiniCluster, RocksDB state on local disk, reading
// an Input's debezium-json files. Build it with BuildFlink.
type Flink struct {
	java, classpath, jvmOptions string
	// Dir is the built project (target/ holds the jar and its dependencies).
	Dir string
}

// ErrToolchain is the error BuildFlink returns when Java or Maven is missing
// or too old; its message says what to install.
var ErrToolchain = errors.New("the Flink peer needs a JDK 17+ (java, javac) and Maven (mvn) on PATH; on Debian/Ubuntu: apt-get install -y openjdk-17-jdk-headless maven")

// BuildFlink returns the Flink peer built in cacheDir/flink-<hash of the
// embedded project>, running `mvn -q package` there first unless an
// earlier build of the same sources is complete (Maven fetches Flink's jars
// into ~/.m2 on the first build: about 220 MB). logf, if set, receives
// progress lines. Without a JDK 17+ or Maven it returns an error wrapping
// ErrToolchain.
func BuildFlink(ctx context.Context, cacheDir string, logf func(string)) (*Flink, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: peers: java not found: %w", ErrToolchain)
	}
	if err := checkJava(ctx, java); err != nil {
		return nil, err
	}
	sum, err := projectHash()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cacheDir, "flink-"+sum[:12])
	f := &Flink{java: java, Dir: dir, jvmOptions: filepath.Join(dir, "jvm.options"),
		classpath: filepath.Join(dir, "target", "cdcjoin-flink-peer.jar") + string(os.PathListSeparator) + filepath.Join(dir, "target", "lib", "*")}
	if _, err := os.Stat(filepath.Join(dir, "built")); err == nil {
		return f, nil
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: peers: mvn not found: %w", ErrToolchain)
	}
	if _, err := exec.LookPath("javac"); err != nil {
		return nil, fmt.Errorf("cdcjoin: peers: javac not found (a JRE without a JDK): %w", ErrToolchain)
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("cdcjoin: peers: %w", err)
	}
	// Build in a directory of our own and rename it into place: a concurrent
	// or interrupted build never leaves a half-built peer behind.
	tmp, err := os.MkdirTemp(cacheDir, "flink-build-")
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: peers: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := writeProject(tmp); err != nil {
		return nil, err
	}
	if logf != nil {
		logf(fmt.Sprintf("peers: building the Flink peer with Maven into %s (the first build downloads Flink's jars, ~220 MB)", dir))
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, mvn, "-B", "-q", "--no-transfer-progress", "-f", filepath.Join(tmp, "pom.xml"), "package")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("cdcjoin: peers: mvn package of the Flink peer failed: %w\n%s", err, tail(out.Bytes(), 40))
	}
	if err := os.WriteFile(filepath.Join(tmp, "built"), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("cdcjoin: peers: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "built")); serr != nil {
			return nil, fmt.Errorf("cdcjoin: peers: %w", err)
		}
		// Another build of the same sources finished first: use it.
	}
	if logf != nil {
		logf(fmt.Sprintf("peers: Flink peer built in %.0fs", time.Since(start).Seconds()))
	}
	return f, nil
}

var javaVersion = regexp.MustCompile(`version "(\d+)`)

// checkJava fails unless java reports a major version of 17 or more.
func checkJava(ctx context.Context, java string) error {
	out, err := exec.CommandContext(ctx, java, "-version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("cdcjoin: peers: java -version: %v: %w", err, ErrToolchain)
	}
	m := javaVersion.FindSubmatch(out)
	if m == nil {
		return fmt.Errorf("cdcjoin: peers: java -version printed no version (%q): %w", tail(out, 3), ErrToolchain)
	}
	if v, _ := strconv.Atoi(string(m[1])); v < 17 {
		return fmt.Errorf("cdcjoin: peers: java is version %d: %w", v, ErrToolchain)
	}
	return nil
}

// projectHash is the SHA-256 of the embedded project's paths and contents.
func projectHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(flinkProject, "flink", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := flinkProject.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("cdcjoin: peers: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeProject writes the embedded project into dir.
func writeProject(dir string) error {
	err := fs.WalkDir(flinkProject, "flink", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(path, "flink")))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := flinkProject.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		return fmt.Errorf("cdcjoin: peers: write the Flink project: %w", err)
	}
	return nil
}

// FlinkRun is one run of the Flink peer.
type FlinkRun struct {
	Input Input
	// StateDir is RocksDB's local directory; it should be empty.
	StateDir string
	// Parallelism of every operator (0: the number of cores, as the JVM
	// sees them).
	Parallelism int
	// Final, if set, replaces the blackhole sink by a collecting one and
	// receives the final join: one JSON object per row keyed by the select
	// names, the shape of `cdcjoin replay --final`.
	Final string
	// Conf holds extra Flink options as KEY=VALUE.
	Conf []string
}

// FlinkResult is what one run measured.
type FlinkResult struct {
	// JobSeconds is Flink's net runtime of the job: from its creation on the
	// MiniCluster to FINISHED (task deployment, RocksDB set-up, reading,
	// joining, the sink). It excludes the JVM start and SQL planning.
	JobSeconds float64 `json:"job_seconds"`
	// SubmitSeconds adds SQL planning and the MiniCluster's start: from
	// submitting the statement until the job finished.
	SubmitSeconds float64 `json:"submit_seconds"`
	// ProcessSeconds is the whole java process, JVM start to exit, and
	// CPUSeconds its user + system CPU time.
	ProcessSeconds float64 `json:"process_seconds"`
	CPUSeconds     float64 `json:"cpu_seconds"`
	Parallelism    int     `json:"parallelism"`
	// Rows and Changes (with Final): rows of the final join and changelog
	// rows the collecting sink folded.
	Rows    int64 `json:"rows,omitempty"`
	Changes int64 `json:"changes,omitempty"`
}

// Run runs the peer once to completion.
func (f *Flink) Run(ctx context.Context, r FlinkRun) (FlinkResult, error) {
	args := []string{"@" + f.jvmOptions, "-cp", f.classpath, flinkMain,
		"--users", r.Input.ParentDir, "--domains", r.Input.ChildDir, "--state-dir", r.StateDir}
	if r.Parallelism > 0 {
		args = append(args, "--parallelism", strconv.Itoa(r.Parallelism))
	}
	if r.Final != "" {
		args = append(args, "--sink", "collect", "--out", r.Final)
	}
	for _, c := range r.Conf {
		args = append(args, "--conf", c)
	}
	cmd := exec.CommandContext(ctx, f.java, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	var res FlinkResult
	if err != nil {
		return res, fmt.Errorf("cdcjoin: peers: Flink peer: %w\n%s", err, tail(stderr.Bytes(), 30))
	}
	res.ProcessSeconds = time.Since(start).Seconds()
	res.CPUSeconds = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	line := bytes.TrimSpace(stdout.Bytes())
	if i := bytes.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	ps, cpu := res.ProcessSeconds, res.CPUSeconds
	if err := json.Unmarshal(line, &res); err != nil || res.JobSeconds <= 0 {
		return res, fmt.Errorf("cdcjoin: peers: Flink peer printed no result (%q): %v", line, err)
	}
	res.ProcessSeconds, res.CPUSeconds = ps, cpu
	return res, nil
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

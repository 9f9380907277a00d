package peers

import (
	"context"
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
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

// flinkTools says what the Flink peer needs.
const flinkTools = "the Flink peer needs a JDK 17+ (java, javac) and Maven (mvn) on PATH; on Debian/Ubuntu: apt-get install -y openjdk-17-jdk-headless maven"

// BuildFlink returns the Flink peer built in cacheDir/flink-<hash of the
// embedded project>, running `mvn -q package` there first unless an
// earlier build of the same sources is complete (Maven fetches Flink's jars
// into ~/.m2 on the first build: about 220 MB). logf, if set, receives
// progress lines. Without a JDK 17+ or Maven it returns an error wrapping
// ErrToolchain that says what to install.
func BuildFlink(ctx context.Context, cacheDir string, logf func(string)) (*Flink, error) {
	p := project{fsys: flinkProject, root: "flink"}
	java, dir, classpath, err := buildMaven(ctx, p, cacheDir, "cdcjoin-flink-peer.jar",
		"the Flink peer with Maven (the first build downloads Flink's jars, ~220 MB)", logf)
	if err != nil {
		return nil, err
	}
	return &Flink{java: java, Dir: dir, jvmOptions: filepath.Join(dir, "jvm.options"), classpath: classpath}, nil
}

// buildMaven builds the Maven project p in cacheDir (unless an earlier
// build of the same sources is complete) and returns java, the project's
// directory and the classpath of its jar and dependencies.
func buildMaven(ctx context.Context, p project, cacheDir, jar, what string, logf func(string)) (java, dir, classpath string, err error) {
	if java, err = exec.LookPath("java"); err != nil {
		return "", "", "", fmt.Errorf("cdcjoin: peers: java not found: %s: %w", flinkTools, ErrToolchain)
	}
	if err := checkJava(ctx, java); err != nil {
		return "", "", "", err
	}
	if dir, err = p.dir(cacheDir); err != nil {
		return "", "", "", err
	}
	classpath = filepath.Join(dir, "target", jar) + string(os.PathListSeparator) + filepath.Join(dir, "target", "lib", "*")
	if built(dir) {
		return java, dir, classpath, nil
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return "", "", "", fmt.Errorf("cdcjoin: peers: mvn not found: %s: %w", flinkTools, ErrToolchain)
	}
	if _, err := exec.LookPath("javac"); err != nil {
		return "", "", "", fmt.Errorf("cdcjoin: peers: javac not found (a JRE without a JDK): %s: %w", flinkTools, ErrToolchain)
	}
	cmd := exec.CommandContext(ctx, mvn, "-B", "-q", "--no-transfer-progress", "package")
	if err := p.build(dir, what, logf, cmd, nil); err != nil {
		return "", "", "", err
	}
	return java, dir, classpath, nil
}

var javaVersion = regexp.MustCompile(`version "(\d+)`)

// checkJava fails unless java reports a major version of 17 or more.
func checkJava(ctx context.Context, java string) error {
	out, err := exec.CommandContext(ctx, java, "-version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("cdcjoin: peers: java -version: %v: %s: %w", err, flinkTools, ErrToolchain)
	}
	m := javaVersion.FindSubmatch(out)
	if m == nil {
		return fmt.Errorf("cdcjoin: peers: java -version printed no version (%q): %s: %w", tail(out, 3), flinkTools, ErrToolchain)
	}
	if v, _ := strconv.Atoi(string(m[1])); v < 17 {
		return fmt.Errorf("cdcjoin: peers: java is version %d: %s: %w", v, flinkTools, ErrToolchain)
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
	// Job.JobSeconds is Flink's net runtime of the job: from its creation on
	// the MiniCluster to FINISHED (task deployment, RocksDB set-up, reading,
	// joining, the sink). It excludes the JVM start and SQL planning.
	Job
	// SubmitSeconds adds SQL planning and the MiniCluster's start: from
	// submitting the statement until the job finished.
	SubmitSeconds float64 `json:"submit_seconds"`
	Parallelism   int     `json:"parallelism"`
	// Rows and Changes (with Final): rows of the final join and changelog
	// rows the collecting sink folded.
	Rows    int64 `json:"rows"`
	Changes int64 `json:"changes"`
}

// Run runs the peer once to completion.
func (f *Flink) Run(ctx context.Context, r FlinkRun) (FlinkResult, error) {
	args := []string{"@" + f.jvmOptions, "-cp", f.classpath, flinkMain,
		"--users", r.Input.ParentDir, "--domains", r.Input.ChildDir, "--state-dir", r.StateDir}
	if r.Input.RecordsDir != "" {
		args = append(args, "--dns-records", r.Input.RecordsDir)
	}
	if r.Parallelism > 0 {
		args = append(args, "--parallelism", strconv.Itoa(r.Parallelism))
	}
	if r.Final != "" {
		args = append(args, "--sink", "collect", "--out", r.Final)
	}
	for _, c := range r.Conf {
		args = append(args, "--conf", c)
	}
	var res FlinkResult
	err := runJSON(exec.CommandContext(ctx, f.java, args...), "the Flink peer", &res, &res.Job)
	return res, err
}

package peers

import (
	"context"
	"embed"
	"os/exec"
	"strconv"
)

// The time-join peers (stream timejoin, issue 19): Flink SQL's interval
// join (IntervalJoinPeer in the Flink project) and Kafka Streams'
// JoinWindows join (JoinWindowsPeer in bench/peers/kstreams), both read
// the same event history as JSON lines (bench/timebench writes them).

const flinkIntervalMain = "io.github.cdcjoin.peers.flink.IntervalJoinPeer"

// IntervalRun is one run of the Flink interval join peer.
type IntervalRun struct {
	// Left and Right are files of JSON lines {"id","k","t" (epoch ms),"v"}.
	Left, Right string
	// LowerMs, UpperMs bound the join: l.t + lower <= r.t <= l.t + upper.
	LowerMs, UpperMs, OutOfOrdernessMs int64
	// LeftJoin: LEFT JOIN (else INNER).
	LeftJoin    bool
	StateDir    string
	Parallelism int
	// Out, if set, collects the rows ({"lv","rv"} lines) instead of the
	// blackhole sink.
	Out string
}

// IntervalResult is what one run measured.
type IntervalResult struct {
	Job
	SubmitSeconds float64 `json:"submit_seconds"`
	Parallelism   int     `json:"parallelism"`
	Rows          int64   `json:"rows"`
}

// RunInterval runs the Flink interval join peer once.
func (f *Flink) RunInterval(ctx context.Context, r IntervalRun) (IntervalResult, error) {
	join := "inner"
	if r.LeftJoin {
		join = "left"
	}
	args := []string{"@" + f.jvmOptions, "-cp", f.classpath, flinkIntervalMain,
		"--left", r.Left, "--right", r.Right, "--state-dir", r.StateDir, "--join", join,
		"--lower-ms", strconv.FormatInt(r.LowerMs, 10), "--upper-ms", strconv.FormatInt(r.UpperMs, 10),
		"--ooo-ms", strconv.FormatInt(r.OutOfOrdernessMs, 10)}
	if r.Parallelism > 0 {
		args = append(args, "--parallelism", strconv.Itoa(r.Parallelism))
	}
	if r.Out != "" {
		args = append(args, "--sink", "collect", "--out", r.Out)
	}
	var res IntervalResult
	err := runJSON(exec.CommandContext(ctx, f.java, args...), "the Flink interval join peer", &res, &res.Job)
	return res, err
}

// kstreamsProject is the Maven project of the Kafka Streams peers.
//
//go:embed kstreams/pom.xml kstreams/src
var kstreamsProject embed.FS

// KStreams runs the Kafka Streams peers built with BuildKStreams.
type KStreams struct {
	java, classpath string
	Dir             string
}

// BuildKStreams returns the Kafka Streams peer built in
// cacheDir/kstreams-<hash> (mvn -q package there unless built before).
func BuildKStreams(ctx context.Context, cacheDir string, logf func(string)) (*KStreams, error) {
	java, dir, classpath, err := buildMaven(ctx, project{fsys: kstreamsProject, root: "kstreams"}, cacheDir,
		"cdcjoin-kstreams-peer.jar", "the Kafka Streams peer with Maven", logf)
	if err != nil {
		return nil, err
	}
	return &KStreams{java: java, Dir: dir, classpath: classpath}, nil
}

// JoinWindowsRun is one run of the Kafka Streams JoinWindows peer.
type JoinWindowsRun struct {
	// Input is a file of JSON lines {"side":"l"|"r","id","k","t" (ms),"v"}
	// in consumption order.
	Input string
	// DifferenceMs and GraceMs: JoinWindows.ofTimeDifferenceAndGrace.
	DifferenceMs, GraceMs int64
	StateDir              string
	// Out receives the joined rows ({"lv","rv"} lines).
	Out string
}

// JoinWindowsResult is what one run measured (JobSeconds: piping every
// record through the TopologyTestDriver, the output read as it goes).
type JoinWindowsResult struct {
	Job
	Records int64 `json:"records"`
	Rows    int64 `json:"rows"`
}

// RunJoinWindows runs the JoinWindows peer once.
func (k *KStreams) RunJoinWindows(ctx context.Context, r JoinWindowsRun) (JoinWindowsResult, error) {
	args := []string{"-cp", k.classpath, "io.github.cdcjoin.peers.kstreams.JoinWindowsPeer",
		"--input", r.Input, "--difference-ms", strconv.FormatInt(r.DifferenceMs, 10),
		"--grace-ms", strconv.FormatInt(r.GraceMs, 10), "--state-dir", r.StateDir, "--out", r.Out}
	var res JoinWindowsResult
	err := runJSON(exec.CommandContext(ctx, k.java, args...), "the Kafka Streams JoinWindows peer", &res, &res.Job)
	return res, err
}

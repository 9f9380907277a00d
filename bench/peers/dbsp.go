package peers

import (
	"context"
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// dbspProject is the Cargo project of the DBSP peer (dbsp/README.md).
//
//go:embed dbsp/Cargo.toml dbsp/Cargo.lock dbsp/src
var dbspProject embed.FS

// dbspBin is the peer's binary, in the built project's directory.
const dbspBin = "cdcjoin-dbsp-peer"

// dbspTools says what the DBSP peer needs.
const dbspTools = "the DBSP peer needs Rust 1.93+ with cargo on PATH (rustup.rs); its dependencies come from crates.io"

// DBSP runs the DBSP peer: the benchmark's join as a circuit of Feldera's
// dbsp crate (both tables upsert maps keyed by their primary keys, the
// domains re-indexed by user_id and joined), fed the replay files
// themselves in steps. Build it with BuildDBSP.
type DBSP struct {
	bin string
	// Dir is the built project (target/release holds the binary).
	Dir string
}

// BuildDBSP returns the DBSP peer built in cacheDir/dbsp-<hash of the
// embedded project>, running `cargo build --release --locked` there first
// unless an earlier build of the same sources is complete. Compiled
// dependencies are kept in cacheDir/dbsp-target for the next version of the
// sources: the first build compiles dbsp and a few hundred crates, many
// minutes on 2 cores. Without cargo it returns an error wrapping
// ErrToolchain that says what to install.
func BuildDBSP(ctx context.Context, cacheDir string, logf func(string)) (*DBSP, error) {
	p := project{fsys: dbspProject, root: "dbsp"}
	dir, err := p.dir(cacheDir)
	if err != nil {
		return nil, err
	}
	d := &DBSP{Dir: dir, bin: filepath.Join(dir, dbspBin)}
	if built(dir) {
		return d, nil
	}
	cargo, err := exec.LookPath("cargo")
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: peers: cargo not found: %s: %w", dbspTools, ErrToolchain)
	}
	target := filepath.Join(cacheDir, "dbsp-target")
	cmd := exec.CommandContext(ctx, cargo, "build", "--release", "--locked", "--quiet")
	cmd.Env = append(os.Environ(), "CARGO_TARGET_DIR="+target)
	copyBin := func(tmp string) error {
		b, err := os.ReadFile(filepath.Join(target, "release", dbspBin))
		if err == nil {
			err = os.WriteFile(filepath.Join(tmp, dbspBin), b, 0o755)
		}
		if err != nil {
			return fmt.Errorf("cdcjoin: peers: %w", err)
		}
		return nil
	}
	if err := p.build(dir, "the DBSP peer with cargo (the first build compiles dbsp and its dependencies: many minutes)", logf, cmd, copyBin); err != nil {
		return nil, err
	}
	return d, nil
}

// DBSPRun is one run of the DBSP peer.
type DBSPRun struct {
	// Files are the replay files (what cdcjoin replays), in order, and the
	// topics of the two tables.
	Files                   []string
	ParentTopic, ChildTopic string
	// RecordsTopic, if set, makes it the three-table chain (bench's
	// ShapeChain): dns_records joined to the domains on domain_id.
	RecordsTopic string
	// Workers is the number of DBSP worker threads (0: the number of cores).
	Workers int
	// Step is the number of input records per DBSP transaction (0: 10,000).
	Step int
	// StorageDir, if set, enables DBSP's storage there (batches spill to
	// disk); otherwise state stays in memory.
	StorageDir string
	// Final, if set, receives the final join (folded from the changes; in
	// the shape of `cdcjoin replay --final`).
	Final string
}

// DBSPResult is what one run measured.
type DBSPResult struct {
	// Job.JobSeconds is the wall time from opening the first input file to
	// the end of the last step: parsing, feeding and every step; the
	// circuit is built before.
	Job
	Records int64 `json:"records"`
	Changes int64 `json:"changes"`
	Workers int   `json:"workers"`
	Rows    int64 `json:"rows"`
}

// Run runs the peer once to completion.
func (d *DBSP) Run(ctx context.Context, r DBSPRun) (DBSPResult, error) {
	args := []string{"--parent-topic", r.ParentTopic, "--child-topic", r.ChildTopic}
	if r.RecordsTopic != "" {
		args = append(args, "--records-topic", r.RecordsTopic)
	}
	for _, f := range r.Files {
		args = append(args, "--input", f)
	}
	if r.Workers > 0 {
		args = append(args, "--workers", strconv.Itoa(r.Workers))
	}
	if r.Step > 0 {
		args = append(args, "--step", strconv.Itoa(r.Step))
	}
	if r.StorageDir != "" {
		args = append(args, "--storage", r.StorageDir)
	}
	if r.Final != "" {
		args = append(args, "--out", r.Final)
	}
	var res DBSPResult
	err := runJSON(exec.CommandContext(ctx, d.bin, args...), "the DBSP peer", &res, &res.Job)
	return res, err
}

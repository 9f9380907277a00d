package peers

import (
	"bytes"
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
	"strings"
	"time"
)

// ErrToolchain is wrapped by the errors of BuildFlink and BuildDBSP when a
// peer's toolchain is missing or too old; their messages say what to
// install.
var ErrToolchain = errors.New("peer toolchain missing")

// project is a peer's source tree, embedded in the binary under root.
type project struct {
	fsys embed.FS
	root string // "flink", "dbsp": the tree's directory in fsys and the cache directory's prefix
}

// hash is the SHA-256 of the tree's paths and contents.
func (p project) hash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(p.fsys, p.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := p.fsys.ReadFile(path)
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

// write copies the tree into dir.
func (p project) write(dir string) error {
	err := fs.WalkDir(p.fsys, p.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(path, p.root)))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := p.fsys.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		return fmt.Errorf("cdcjoin: peers: write the %s project: %w", p.root, err)
	}
	return nil
}

// dir is where the tree's current sources are built: cacheDir/<root>-<hash>.
func (p project) dir(cacheDir string) (string, error) {
	sum, err := p.hash()
	if err != nil {
		return "", err
	}
	return filepath.Join(cacheDir, p.root+"-"+sum[:12]), nil
}

// built reports whether dir holds a complete build.
func built(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "built"))
	return err == nil
}

// build writes the tree into a fresh directory beside dir, runs cmd there
// (its Dir set to it), then after (if set) on that directory, and renames
// it to dir once both succeeded, so an interrupted or concurrent build
// never leaves a half-built peer behind. what names the build in progress
// lines and errors.
func (p project) build(dir, what string, logf func(string), cmd *exec.Cmd, after func(tmp string) error) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("cdcjoin: peers: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, p.root+"-build-")
	if err != nil {
		return fmt.Errorf("cdcjoin: peers: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := p.write(tmp); err != nil {
		return err
	}
	if logf != nil {
		logf(fmt.Sprintf("peers: building %s into %s", what, dir))
	}
	start := time.Now()
	cmd.Dir = tmp
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cdcjoin: peers: building %s failed: %w\n%s", what, err, tail(out.Bytes(), 40))
	}
	if after != nil {
		if err := after(tmp); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, "built"), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return fmt.Errorf("cdcjoin: peers: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil && !built(dir) {
		return fmt.Errorf("cdcjoin: peers: %w", err)
	} // else another build of the same sources finished first: use it.
	if logf != nil {
		logf(fmt.Sprintf("peers: built %s in %.0fs", what, time.Since(start).Seconds()))
	}
	return nil
}

// Process is what every peer run reports about its process.
type Process struct {
	// Seconds is the whole process, start to exit, and CPUSeconds its user +
	// system CPU time.
	Seconds    float64
	CPUSeconds float64
}

// Job is the part of a peer's result every peer reports.
type Job struct {
	// JobSeconds is the peer's own measure of the work (see each peer's
	// result type for what it covers).
	JobSeconds float64 `json:"job_seconds"`
	// Process is the whole peer process.
	Process Process `json:"-"`
}

// runJSON runs cmd to completion and decodes the last line it printed on
// stdout (the peer's result object) into res, whose Job is job; it fails
// unless the peer reported a job time. what names the peer in errors,
// which carry the tail of its stderr.
func runJSON(cmd *exec.Cmd, what string, res any, job *Job) error {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cdcjoin: peers: %s: %w\n%s", what, err, tail(stderr.Bytes(), 30))
	}
	p := Process{Seconds: time.Since(start).Seconds(),
		CPUSeconds: (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()}
	line := bytes.TrimSpace(stdout.Bytes())
	if i := bytes.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if err := json.Unmarshal(line, res); err != nil {
		return fmt.Errorf("cdcjoin: peers: %s printed no result (%q): %w", what, line, err)
	}
	job.Process = p
	if job.JobSeconds <= 0 {
		return fmt.Errorf("cdcjoin: peers: %s reported no job time (%q)", what, line)
	}
	return nil
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

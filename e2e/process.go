package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is one `cdcjoin run --config F` child process, its output
// appended to a log file. Start and Stop/Kill are called by one goroutine.
type Process struct {
	Bin, Config, Log string

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, valid after done
}

// Start starts the process (it must not be running).
func (p *Process) Start() error {
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("cdcjoin: e2e: %w", err)
	}
	fmt.Fprintf(f, "\n=== e2e: start %s run --config %s at %s\n", p.Bin, p.Config, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.Bin, "run", "--config", p.Config)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("cdcjoin: e2e: start %s: %w", p.Bin, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() { // owned by p: Kill/Stop wait for it
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return nil
}

// Exited reports whether a started process has exited, with its status.
func (p *Process) Exited() (bool, error) {
	if p.done == nil {
		return false, nil
	}
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Kill sends SIGKILL (kill -9) and waits for the process to exit.
func (p *Process) Kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM, waits up to grace for a clean exit, then kills.
// It returns the exit error of a process that did not exit cleanly.
func (p *Process) Stop(grace time.Duration) error {
	if p.cmd == nil {
		return nil
	}
	if exited, err := p.Exited(); exited {
		return err
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("cdcjoin: e2e: %s did not stop within %v of SIGTERM", p.Config, grace)
	}
}

// ScrapeGauge fetches http://addr/metrics and returns the sum of the
// samples of metric name (0, false when absent).
func ScrapeGauge(ctx context.Context, addr, name string) (float64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, fmt.Errorf("cdcjoin: e2e: scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
			found = true
		}
	}
	return sum, found, sc.Err()
}

// Probe GETs path of cdcjoin's metrics server at addr (e.g. /readyz) and
// returns the status code and body.
func Probe(ctx context.Context, addr, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("cdcjoin: e2e: GET %s%s: %w", addr, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b), err
}

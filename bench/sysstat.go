package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// rusageThread is Linux's RUSAGE_THREAD (CPU time of the calling thread).
const rusageThread = 1

// cpuSeconds returns the user+system CPU time of the process (who =
// syscall.RUSAGE_SELF) or of the calling OS thread (rusageThread).
func cpuSeconds(who int) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// peakRSS returns the process's peak resident set (VmHWM) in bytes, 0 when
// unknown (not Linux).
func peakRSS() uint64 { return procStatusKB("VmHWM:") * 1024 }

// resetPeakRSS resets VmHWM to the current RSS (Linux: clear_refs 5), so the
// next peakRSS covers one phase. Errors are ignored: the peak then covers
// the process's whole life, which is still an upper bound.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

func procStatusKB(field string) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if bytes.HasPrefix(line, []byte(field)) {
			f := strings.Fields(string(line[len(field):]))
			if len(f) > 0 {
				n, _ := strconv.ParseUint(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// freeDiskBytes returns the bytes available to unprivileged users on the
// filesystem holding dir.
func freeDiskBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("cdcjoin: bench: statfs %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// Machine describes where a report was measured.
type Machine struct {
	Hostname     string  `json:"hostname"`
	CPUModel     string  `json:"cpu_model"`
	CPUs         int     `json:"cpus"`
	GOMAXPROCS   int     `json:"gomaxprocs"`
	MemTotalB    uint64  `json:"mem_total_bytes"`
	GoVersion    string  `json:"go_version"`
	OS           string  `json:"os"`
	Kernel       string  `json:"kernel"`
	LoadAvgStart float64 `json:"loadavg_1m_start"`
	LoadAvgEnd   float64 `json:"loadavg_1m_end"`
	Note         string  `json:"note,omitempty"`
}

func describeMachine() Machine {
	m := Machine{CPUs: goruntime.NumCPU(), GOMAXPROCS: goruntime.GOMAXPROCS(0),
		GoVersion: goruntime.Version(), OS: goruntime.GOOS + "/" + goruntime.GOARCH}
	m.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseUint(f[1], 10, 64)
				m.MemTotalB = kb * 1024
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.LoadAvgStart = loadAvg()
	return m
}

func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// stopwatch measures wall and process CPU time of a phase.
type stopwatch struct {
	wall time.Time
	cpu  float64
}

func startWatch() stopwatch { return stopwatch{wall: time.Now(), cpu: cpuSeconds(syscall.RUSAGE_SELF)} }

func (s stopwatch) elapsed() (wall, cpu float64) {
	return time.Since(s.wall).Seconds(), cpuSeconds(syscall.RUSAGE_SELF) - s.cpu
}

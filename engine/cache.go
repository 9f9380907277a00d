package engine

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Bounds of the block cache an engine sizes itself (state.cache_mb unset).
const (
	autoCacheMin = 64 << 20
	autoCacheMax = 4 << 30
)

// AutoCacheBytes is the block cache of an engine whose state.cache_mb is
// unset: a sixteenth of the memory the process may use (the cgroup's limit
// when one is set and lower, else the machine's; 64 MiB when neither can be
// read), between 64 MiB and 4 GiB. The engine has one state store; pebble
// allocates a cache block by block as it reads them, so a state smaller
// than this holds only the blocks it has read (about its uncompressed
// size), never the whole capacity.
func AutoCacheBytes() int64 { return autoCache(memoryLimit()) }

// autoCache is AutoCacheBytes for a process allowed mem bytes (0: unknown).
func autoCache(mem int64) int64 { return min(max(mem/16, autoCacheMin), autoCacheMax) }

// memoryLimit returns the memory the process may use: the smaller of the
// machine's (/proc/meminfo MemTotal) and its cgroup's limit (v2
// memory.max, v1 memory.limit_in_bytes), or 0 when none can be read.
func memoryLimit() int64 {
	var total int64
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		total = memTotal(b)
	}
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && (total == 0 || n < total) {
			total = n // ("max" and v1's huge "no limit" values leave the machine's)
		}
	}
	return total
}

// memTotal parses /proc/meminfo's MemTotal line (kB) into bytes, or 0.
func memTotal(meminfo []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil && kb > 0 {
				return kb << 10
			}
		}
	}
	return 0
}

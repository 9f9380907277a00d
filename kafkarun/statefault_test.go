package kafkarun_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/internal/testenv"
)

// TestStateDiskFull: run's state.dir is on a tmpfs with 1 MiB free. The
// join's first commit fails with a disk-full error naming the state
// directory and what to do, and Run returns it (non-zero exit) instead of
// hanging or panicking.
func TestStateDiskFull(t *testing.T) {
	fs := testenv.Tmpfs(t, "8m")
	if err := os.WriteFile(filepath.Join(fs, "ballast"), make([]byte, 7<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	h := smallHistory(t, 71, 500)
	c := newCluster(t, 3)
	produce(t, c.ListenAddrs(), h.Records)
	cfg := jobConfig(t, jobOpts{brokers: brokersOf(c), stateDir: filepath.Join(fs, "state")})
	in := start(t, cfg, newModel().sink())
	select {
	case <-in.done:
	case <-time.After(60 * time.Second):
		in.stop(t)
		t.Fatal("Run did not stop within 60 s on a full state disk")
	}
	if in.err == nil || !strings.Contains(in.err.Error(), "no space left") || !strings.Contains(in.err.Error(), "free space") {
		t.Fatalf("Run: %v; want a disk-full error saying what to do", in.err)
	}
	t.Logf("Run: %v", in.err)
}

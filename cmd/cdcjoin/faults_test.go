package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
)

// runWithin is run with a deadline: the bugs these tests look for are
// hangs.
func runWithin(t *testing.T, d time.Duration, args ...string) (int, string, string) {
	t.Helper()
	type result struct {
		code      int
		out, errs string
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.code, r.out, r.errs = run(t, args...)
		done <- r
	}()
	select {
	case r := <-done:
		return r.code, r.out, r.errs
	case <-time.After(d):
		t.Fatalf("cdcjoin %s did not return within %v (hang)", strings.Join(args, " "), d)
		return 0, "", ""
	}
}

// history writes a generated Debezium history of ops operations to a file.
func history(t *testing.T, dir string, ops int) string {
	t.Helper()
	p := filepath.Join(dir, "history.jsonl")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	o := cdcgen.DefaultOptions(3)
	o.Ops = ops
	if _, err := cdcgen.StreamJSONL(f, o); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReplayDiskFull: replay into a state on a small tmpfs that is all
// but full (a ballast file leaves 1 MiB free, less than the state needs).
// Replay exits 1 within seconds with a message saying so and what to do
// (before: pebble panicked holding its lock, the deferred Close blocked,
// and replay sat at 0% CPU until this test's deadline).
func TestReplayDiskFull(t *testing.T) {
	dir := t.TempDir()
	in := history(t, dir, 20000)
	fs := testenv.Tmpfs(t, "8m")
	if err := os.WriteFile(filepath.Join(fs, "ballast"), make([]byte, 7<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, dir, "job.yaml", fmt.Sprintf(`name: full
parent: {topic: %s, key: id}
child: {topic: %s, key: id, parent_key: user_id}
select: parent.id AS user_id, parent.firstname, parent.lastname, child.id AS domain_id, child.domain_name
state: {dir: %s, memtable_mb: 1}
`, cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic, filepath.Join(fs, "state")))
	code, _, errs := runWithin(t, time.Minute, "replay", "--config", cfg, "--input", in, "--quiet")
	if code != 1 || !strings.Contains(errs, "no space left") || !strings.Contains(errs, "free space") {
		t.Fatalf("want exit 1 with a disk-full message and what to do; got %d:\n%s", code, errs)
	}
	t.Logf("exit %d: %s", code, strings.TrimSpace(errs))
}

// TestReplayCorruptWAL: a byte flipped in the newest WAL of a replay's
// state. Resuming, or reading the final join from the state, fails with a
// message naming the damage and what to do (before: the state opened at an
// older position and --final printed a stale join without a word).
func TestReplayCorruptWAL(t *testing.T) {
	dir := t.TempDir()
	cfg := exampleConfig(t, dir, "")
	// Row by row through the WAL: a bulk-loaded snapshot is ingested as
	// tables and leaves nothing in the WAL to corrupt.
	data, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	withState := strings.Replace(string(data), "state: {dir: ", "state: {bulk_load_mb: -1, dir: ", 1)
	if withState == string(data) {
		t.Fatal("the example config has no state section to change")
	}
	cfg = writeFile(t, dir, "job.yaml", withState)
	code, _, errs := run(t, "replay", "--config", cfg, "--input", "../../testdata/example/snapshot.jsonl", "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	state := filepath.Join(dir, "state")
	var logs []string
	ents, err := os.ReadDir(state)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			logs = append(logs, filepath.Join(state, e.Name()))
		}
	}
	sort.Strings(logs)
	if len(logs) == 0 {
		t.Fatal("no WAL in the state")
	}
	b, err := os.ReadFile(logs[len(logs)-1])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x5a
	if err := os.WriteFile(logs[len(logs)-1], b, 0o600); err != nil {
		t.Fatal(err)
	}
	empty := writeFile(t, dir, "empty.jsonl", "")
	code, out, errs := run(t, "replay", "--config", cfg, "--input", empty, "--resume", "--final", "-", "--quiet")
	if code != 1 || !strings.Contains(errs, "rebuild") || out != "" {
		t.Fatalf("want exit 1 saying to rebuild and no output; got %d, out %q:\n%s", code, out, errs)
	}
	t.Logf("exit %d: %s", code, strings.TrimSpace(errs))
}

package joinstate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// within fails the test if f does not return within d (a hang is the bug
// these tests look for).
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v (hang)", what, d)
	}
}

// commitRows commits n transactions of 100 meta keys each, starting at key
// from, with the position set to the next key; it returns the first error.
func commitRows(s *Store, from, n int) error {
	for i := from; i < from+n*100; i += 100 {
		t := s.Begin()
		for j := i; j < i+100; j++ {
			if err := t.SetMeta(fmt.Sprintf("k%08d", j), []byte(fmt.Sprintf("value %d %s", j, strings.Repeat("x", 40)))); err != nil {
				t.Abort()
				return err
			}
		}
		if err := t.SetPosition("t", 0, int64(i+100)); err != nil {
			t.Abort()
			return err
		}
		if err := t.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// enospc fails matching write operations with ENOSPC while on.
func enospc(on *atomic.Bool, match func(errorfs.Op) bool) errorfs.Injector {
	return errorfs.InjectorFunc(func(op errorfs.Op) error {
		if on.Load() && match(op) {
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	})
}

// isWrite matches pebble's own writes (not the commit file's: these tests
// are about pebble's failure paths).
func isWrite(op errorfs.Op) bool {
	return op.Kind.ReadOrWrite() == errorfs.OpIsWrite && !strings.HasSuffix(op.Path, commitFile)
}

func wantFault(t *testing.T, err error, kind FaultKind) *Fault {
	t.Helper()
	var f *Fault
	if !errors.As(err, &f) {
		t.Fatalf("error %v (%T), want a *Fault (%s)", err, err, kind)
	}
	if f.Kind != kind {
		t.Fatalf("fault %v: kind %s, want %s", f, f.Kind, kind)
	}
	return f
}

// TestDiskHeadroom: a volume with less free space than the state needs to
// write safely (2 memtables + 16 MiB) fails the next commit with a
// disk-full Fault before pebble writes anything, later operations return
// it too, and Close returns at once. (A WAL write or rotation that hits a
// full disk panics inside pebble, some of it with its mutex released: a
// fatal runtime error no recover catches, which is why the store stops
// before. Before: pebble panicked holding its commit lock and the deferred
// Close blocked forever, see TestReplayDiskFull.)
func TestDiskHeadroom(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open(Options{Dir: "/state", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if err := commitRows(s, 0, 10); err != nil {
		t.Fatal(err)
	}
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 20 << 20, TotalBytes: 1 << 30})
	f := wantFault(t, commitRows(s, 1000, 1), FaultDiskFull)
	if !strings.Contains(f.Error(), "no space left") || !strings.Contains(f.Error(), "free space") {
		t.Errorf("message %q does not say what happened and what to do", f)
	}
	if err := commitRows(s, 100000, 1); !errors.Is(err, f) {
		t.Errorf("commit after the fault: %v, want the fault", err)
	}
	within(t, 10*time.Second, "Close", func() { err = s.Close() })
	if !errors.Is(err, f) {
		t.Errorf("Close: %v, want the fault", err)
	}
	t.Logf("reported: %v", f)
}

// TestDiskFullFlush: only the memtable flush (new sstables) fails; commits
// go on until the memtables fill, when pebble would stall writes for good
// while it retries the flush. The store fails with a disk-full Fault
// instead.
func TestDiskFullFlush(t *testing.T) {
	var full atomic.Bool
	fs := errorfs.Wrap(vfs.NewMem(), enospc(&full, func(op errorfs.Op) bool {
		return isWrite(op) && strings.HasSuffix(op.Path, ".sst")
	}))
	s, err := Open(Options{Dir: "/state", FS: fs, MemTableBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	full.Store(true)
	within(t, 30*time.Second, "commits with failing flushes", func() { err = commitRows(s, 0, 2000) })
	wantFault(t, err, FaultDiskFull)
	within(t, 10*time.Second, "Close", func() { s.Close() })
	if _, ok := s.Stats(); ok {
		t.Error("Stats of a failed store reported ok")
	}
}

// TestIOErrorRead: a read of an sstable fails with EIO: the read returns an
// I/O Fault.
func TestIOErrorRead(t *testing.T) {
	var bad atomic.Bool
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if bad.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsRead && strings.HasSuffix(op.Path, ".sst") {
			return &os.PathError{Op: "read", Path: op.Path, Err: syscall.EIO}
		}
		return nil
	}))
	s, err := Open(Options{Dir: "/state", FS: fs, DisableRowCache: true, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := commitRows(s, 0, 50); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(Options{Dir: "/state", FS: fs, DisableRowCache: true, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	bad.Store(true)
	var rerr error
	for i := 0; i < 5000 && rerr == nil; i += 37 {
		_, rerr = s.Meta(fmt.Sprintf("k%08d", i))
	}
	wantFault(t, rerr, FaultIO)
	within(t, 10*time.Second, "Close", func() { s.Close() })
}

func filesWith(t *testing.T, dir, ext string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ext {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out
}

func flipByte(t *testing.T, path string, at func(size int) int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[at(len(b))] ^= 0x5a
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptSST: a flipped byte in an sstable. Reading it, and the
// compaction that rewrites it, end in a corruption Fault naming the file
// (before: a Go panic on a compaction goroutine, via pebble's default
// corruption handler).
func TestCorruptSST(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, MemTableBytes: 1 << 20, DisableRowCache: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := commitRows(s, 0, 200); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ssts := filesWith(t, dir, ".sst")
	if len(ssts) == 0 {
		t.Fatal("no sstables")
	}
	for _, p := range ssts {
		flipByte(t, p, func(n int) int { return n / 3 })
	}
	s, err = Open(Options{Dir: dir, MemTableBytes: 1 << 20, DisableRowCache: true})
	if err != nil {
		f := wantFault(t, err, FaultCorrupt)
		t.Logf("open reported: %v", f)
		return
	}
	// Reads of the damaged blocks, or a compaction reading them, report it;
	// more writes make pebble compact.
	var ferr error
	within(t, 60*time.Second, "reads and writes over a corrupt sstable", func() {
		for i := 0; i < 20000 && ferr == nil; i += 13 {
			_, ferr = s.Meta(fmt.Sprintf("k%08d", i))
		}
		for i := 0; i < 100 && ferr == nil; i++ {
			ferr = commitRows(s, 50000+i*1000, 10)
		}
	})
	f := wantFault(t, ferr, FaultCorrupt)
	if !strings.Contains(f.Error(), ".sst") || !strings.Contains(f.Error(), "rebuild") {
		t.Errorf("message %q does not name the file and what to do", f)
	}
	within(t, 10*time.Second, "Close", func() { s.Close() })
	t.Logf("reported: %v", f)
}

// TestCorruptWAL: a flipped byte in the newest WAL makes pebble stop its
// replay there, as after a torn write, and open an older state. Without an
// OS restart in between that is a rollback: Open fails with a Fault
// instead of silently dropping committed batches (before: the state opened
// at an older position without a word).
func TestCorruptWAL(t *testing.T) {
	for _, at := range []struct {
		name string
		f    func(int) int
	}{{"middle", func(n int) int { return n * 2 / 3 }}, {"tail", func(n int) int { return n - 20 }}} {
		t.Run(at.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(Options{Dir: dir, MemTableBytes: 8 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if err := commitRows(s, 0, 50); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			logs := filesWith(t, dir, ".log")
			if len(logs) == 0 {
				t.Fatal("no WAL")
			}
			flipByte(t, logs[len(logs)-1], at.f)
			s, err = Open(Options{Dir: dir})
			if err == nil {
				pos, _, _ := s.Position("t", 0)
				s.Close()
				t.Fatalf("opened a corrupt state silently at position %d (committed: 5000)", pos)
			}
			var f *Fault
			if !errors.As(err, &f) || (f.Kind != FaultRolledBack && f.Kind != FaultCorrupt) {
				t.Fatalf("open: %v, want a rollback or corruption Fault", err)
			}
			if !strings.Contains(err.Error(), "rebuild") {
				t.Errorf("message %q does not say what to do", err)
			}
			t.Logf("reported: %v", err)
		})
	}
}

// TestCheckRollback: a state holding fewer commits than were durable is a
// rollback; one holding more (unsynced commits since) is not.
func TestCheckRollback(t *testing.T) {
	for _, c := range []struct {
		committed, durable uint64
		fault              bool
	}{{10, 10, false}, {11, 10, false}, {9, 10, true}, {0, 0, false}} {
		if err := checkRollback("d", c.committed, c.durable); (err != nil) != c.fault {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// TestCrashKeepsCommits: a simulated OS crash that keeps only synced data
// opens cleanly with state.sync on (the commit file is not ahead of the
// synced WAL), at the last commit.
func TestCrashKeepsCommits(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s, err := Open(Options{Dir: "/state", FS: fs, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := commitRows(s, 0, 20); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	s.Close()
	s, err = Open(Options{Dir: "/state", FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if pos, _, err := s.Position("t", 0); err != nil || pos != 2000 {
		t.Fatalf("position %d, %v; want 2000", pos, err)
	}
}

// TestPrivatePermissions: the state directory is 0700 and its files 0600
// whatever the umask (before: 0755 and 0644).
func TestPrivatePermissions(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "state", "partition-0")
	s, err := Open(Options{Dir: dir, MemTableBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := commitRows(s, 0, 100); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(dir), dir} {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o700 {
			t.Errorf("%s has mode %v, want 0700", d, st.Mode().Perm())
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if e.IsDir() {
			continue
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", e.Name(), info.Mode().Perm())
		}
	}
	if len(ents) < 4 {
		t.Errorf("only %d files in the state: nothing was checked", len(ents))
	}
}

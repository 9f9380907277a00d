package joinstate

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
)

// FaultKind classifies a Fault.
type FaultKind int

// Fault kinds.
const (
	// FaultIO is an I/O error of the state's disk.
	FaultIO FaultKind = iota
	// FaultDiskFull is a write that failed for lack of space.
	FaultDiskFull
	// FaultCorrupt is a state file whose content does not check out (a
	// checksum mismatch, an invalid WAL or MANIFEST record).
	FaultCorrupt
	// FaultRolledBack is a state that opened older than its last commit
	// without an OS restart in between: the newest WAL lost committed
	// batches, which only corruption explains.
	FaultRolledBack
)

func (k FaultKind) String() string {
	switch k {
	case FaultDiskFull:
		return "disk full"
	case FaultCorrupt:
		return "corrupt"
	case FaultRolledBack:
		return "rolled back"
	}
	return "I/O error"
}

// Fault is a failure of a store's disk or files. Once a store has one,
// every later operation returns it (wrapped in nothing else), and Close
// returns it without closing pebble, whose goroutines may hold its locks:
// the process is expected to exit. A Fault never means lost committed work
// on its own: what was committed before a disk-full or I/O fault stays
// committed; a corrupt or rolled-back state must be rebuilt.
type Fault struct {
	Dir  string // the store's directory
	File string // the file involved, when known
	Kind FaultKind
	Err  error // the underlying error
}

func (f *Fault) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cdcjoin: state %s: ", f.Dir)
	switch f.Kind {
	case FaultDiskFull:
		b.WriteString("no space left on the state disk")
	case FaultCorrupt:
		b.WriteString("corrupt state")
	case FaultRolledBack:
		b.WriteString("the state rolled back")
	default:
		b.WriteString("I/O error on the state disk")
	}
	if f.File != "" {
		fmt.Fprintf(&b, " (file %s)", f.File)
	}
	if f.Err != nil {
		fmt.Fprintf(&b, ": %v", firstLine(f.Err.Error()))
	}
	switch f.Kind {
	case FaultDiskFull:
		b.WriteString("; free space on the volume of state.dir (or move it to a larger one) and restart: committed work is kept")
	case FaultCorrupt, FaultRolledBack:
		fmt.Fprintf(&b, "; the state cannot be trusted: remove %s and rebuild it (cdcjoin run rebuilds a keyed partition from the keyed topic on restart; for cdcjoin replay, re-run the replay without --resume)", f.Dir)
	default:
		b.WriteString("; check the disk (dmesg, SMART), then restart: committed work is kept")
	}
	return b.String()
}

func (f *Fault) Unwrap() error { return f.Err }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// classify turns an error of pebble or of the file system into a Fault of
// dir, or returns nil when err is not a disk or corruption failure (a
// closed store, a caller's mistake).
func classify(dir string, err error) *Fault {
	if err == nil {
		return nil
	}
	var f *Fault
	if errors.As(err, &f) {
		return f
	}
	switch {
	case errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || strings.Contains(err.Error(), "no space left on device"):
		return &Fault{Dir: dir, Kind: FaultDiskFull, Err: err}
	case errors.Is(err, pebble.ErrCorruption):
		return &Fault{Dir: dir, Kind: FaultCorrupt, Err: err}
	case errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EROFS):
		return &Fault{Dir: dir, Kind: FaultIO, Err: err}
	}
	return nil
}

// health records the first Fault of a store. Pebble reports some failures
// where nobody can return them (background flushes and compactions, its
// fatal-error logger); health turns them into a Fault that the store's
// operations return, and a channel that wakes operations waiting on pebble.
type health struct {
	dir    string
	failed chan struct{} // closed at the first fault
	once   sync.Once
	fault  atomic.Pointer[Fault]
}

func newHealth(dir string) *health {
	return &health{dir: dir, failed: make(chan struct{})}
}

// fail records f unless a fault is recorded already, and returns the
// recorded one.
func (h *health) fail(f *Fault) *Fault {
	h.once.Do(func() {
		h.fault.Store(f)
		close(h.failed)
	})
	return h.fault.Load()
}

// err returns the recorded fault, or nil.
func (h *health) err() error {
	if f := h.fault.Load(); f != nil {
		return f
	}
	return nil
}

// check returns err, or the store's Fault when err is a disk or corruption
// failure (recording it).
func (h *health) check(err error) error {
	if err == nil {
		return nil
	}
	if f := classify(h.dir, err); f != nil {
		return h.fail(f)
	}
	if f := h.fault.Load(); f != nil {
		return f // a failure elsewhere explains this one
	}
	return err
}

// listener reports pebble's background errors and data corruption to h.
// A failing background flush or compaction is retried by pebble forever
// while writes stall once the memtables are full; failing the store instead
// ends in an error.
func (h *health) listener() pebble.EventListener {
	return pebble.EventListener{
		BackgroundError: func(err error) {
			f := classify(h.dir, err)
			if f == nil {
				f = &Fault{Dir: h.dir, Kind: FaultIO, Err: err}
			}
			h.fail(f)
		},
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			h.fail(&Fault{Dir: h.dir, File: info.Path, Kind: FaultCorrupt, Err: info.Details})
		},
	}
}

// faultLogger is pebble's logger for a store. Pebble calls Fatalf when it
// cannot go on (a failed WAL or MANIFEST write, an inconsistent version); it
// must not return. faultLogger records the fault and blocks the calling
// goroutine for good, so that no pebble lock it holds is ever released into
// a half-updated state; the store's operations that may reach Fatalf run on
// a goroutine of their own and return the fault instead (see Store.guard).
type faultLogger struct {
	h     *health
	inner pebble.Logger // may be nil: informational messages are dropped
}

func (l faultLogger) Infof(format string, args ...interface{}) {
	if l.inner != nil {
		l.inner.Infof(format, args...)
	}
}

func (l faultLogger) Errorf(format string, args ...interface{}) {
	if l.inner != nil {
		l.inner.Errorf(format, args...)
	}
}

func (l faultLogger) Fatalf(format string, args ...interface{}) {
	err := fmt.Errorf(format, args...)
	for _, a := range args { // keep the cause's identity (ENOSPC, corruption)
		if e, ok := a.(error); ok {
			err = fmt.Errorf("%s: %w", firstLine(fmt.Sprintf(format, args...)), e)
			break
		}
	}
	f := classify(l.h.dir, err)
	if f == nil {
		f = &Fault{Dir: l.h.dir, Kind: FaultIO, Err: err}
	}
	l.h.fail(f)
	select {} // Fatalf must not return
}

// guard runs op, which calls into pebble in a way that can panic, reach
// Fatalf or stall for good on a failed disk (a commit, a flush, Close), on
// a goroutine of its own, and returns its result or, as soon as the store
// has a Fault, the Fault. A goroutine stuck in pebble then stays behind
// (it cannot be stopped; the process is expected to exit).
func (s *Store) guard(op func() error) error {
	if err := s.h.err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				err, ok := r.(error)
				if !ok {
					err = fmt.Errorf("%v", r)
				}
				f := classify(s.h.dir, err)
				if f == nil {
					f = &Fault{Dir: s.h.dir, Kind: FaultIO, Err: fmt.Errorf("pebble panicked: %w", err)}
				}
				done <- s.h.fail(f)
			}
		}()
		done <- op()
	}()
	select {
	case err := <-done:
		return s.h.check(err)
	case <-s.h.failed:
		select {
		case err := <-done: // finished meanwhile: its outcome stands
			return s.h.check(err)
		default:
			return s.h.err()
		}
	}
}

// Err returns the store's Fault, or nil while it is healthy. Safe for
// concurrent use.
func (s *Store) Err() error { return s.h.err() }

// headroom is the free space a store needs before it commits: pebble
// writes its WAL up to a memtable's size, then rotates to a new WAL file,
// and flushes the memtable to an sstable. A WAL write or rotation that hits
// a full disk panics inside pebble, some of it with its mutex released
// (a fatal runtime error, not recoverable); compactions that run out of
// space are background errors (see health.listener). So a store refuses
// to commit with less than two memtables and a margin free, with a
// disk-full Fault, before pebble gets there.
func headroom(memTable uint64) uint64 { return 2*memTable + 16<<20 }

// checkSpace fails the store with a disk-full Fault when the volume of its
// directory has less than its headroom free (file systems that cannot tell
// are not checked).
func (s *Store) checkSpace() error {
	if s.fs == nil {
		return nil
	}
	du, err := s.fs.GetDiskUsage(s.h.dir)
	if err != nil || du.AvailBytes >= s.headroom {
		return nil
	}
	return s.h.fail(&Fault{Dir: s.h.dir, Kind: FaultDiskFull,
		Err: fmt.Errorf("%d KiB free on its volume, less than the %d KiB the state needs to write safely (2 × state.memtable_mb + 16 MiB)", du.AvailBytes>>10, s.headroom>>10)})
}

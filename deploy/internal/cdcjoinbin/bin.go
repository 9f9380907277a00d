// Package cdcjoinbin builds the cdcjoin binary of this repository for the
// deploy module's tests (which live in a module of their own and so cannot
// import cdcjoin's packages without pulling its go.mod into theirs).
package cdcjoinbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Builder builds the binary once per test process.
type Builder struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// Root is the repository root (the parent of the deploy module).
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// Path returns the built binary, building it on first use into a directory
// that lives as long as the process (under os.TempDir).
func (b *Builder) Path(t testing.TB) string {
	t.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "cdcjoin-deploy-test-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "cdcjoin")
		cmd := exec.Command("go", "build", "-o", b.path, "./cmd/cdcjoin")
		cmd.Dir = Root()
		b.out, b.err = cmd.CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("building cdcjoin: %v\n%s", b.err, b.out)
	}
	return b.path
}

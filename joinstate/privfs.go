package joinstate

import (
	"fmt"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// State holds row data: its directories are created 0700 and its files
// 0600, whatever the umask (pebble itself asks for 0755 and 0666).
const (
	dirMode  os.FileMode = 0o700
	fileMode os.FileMode = 0o600
)

// privateFS is the OS file system with owner-only permissions for what it
// creates. Files are created by pebble with 0666 &^ umask and tightened
// right after; the directory they live in is 0700 from the start, so no
// other user can open them in between.
type privateFS struct{ vfs.FS }

func (fs privateFS) tighten(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	if cerr := os.Chmod(name, fileMode); cerr != nil {
		f.Close()
		return nil, cerr
	}
	return f, nil
}

func (fs privateFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	return fs.tighten(name, f, err)
}

func (fs privateFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, category, opts...)
	return fs.tighten(name, f, err)
}

func (fs privateFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	return fs.tighten(newname, f, err)
}

func (fs privateFS) MkdirAll(dir string, _ os.FileMode) error {
	return fs.FS.MkdirAll(dir, dirMode)
}

func (fs privateFS) Lock(name string) (io.Closer, error) {
	c, err := fs.FS.Lock(name)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(name, fileMode); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// makePrivateDir creates dir (and missing parents) 0700 and makes dir
// itself 0700 if it exists with wider permissions.
func makePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return fmt.Errorf("cdcjoin: state: create %s: %w", dir, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("cdcjoin: state: %w", err)
	}
	if st.Mode().Perm()&^dirMode != 0 {
		if err := os.Chmod(dir, dirMode); err != nil {
			return fmt.Errorf("cdcjoin: state: restrict %s to its owner: %w", dir, err)
		}
	}
	return nil
}

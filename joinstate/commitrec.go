package joinstate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A store counts its commits (metaCommits, written in every commit's batch)
// and, after each commit, writes the count and the machine's boot id to a
// small file beside pebble's (commitFile, not synced). Pebble replays its
// newest WAL up to the first record that does not check out and treats the
// rest as a torn tail, which after an OS crash is what a WAL written without
// fsync looks like, but after a flipped byte is a silent rollback to an
// older state. On open the two counts are compared: a state older than the
// commit file without an OS restart since it was written (same boot id), or
// with state.sync on (commits were synced before the file was written), lost
// committed batches to corruption and is a FaultRolledBack.
const (
	commitFile  = "CDCJOIN-COMMITS"
	metaCommits = "commits"
	commitMagic = "CJC1"
	commitSize  = 4 + 8 + 1 + 1 + 64 + 4 // magic, count, synced, boot id length, boot id (padded), crc
)

// bootIDPath names the kernel's id of the current boot (Linux).
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// commitRecord is the open commit file of a store.
type commitRecord struct {
	f      vfs.File
	boot   string
	synced bool // commits are synced (state.sync) before the file is written
	buf    [commitSize]byte
}

func bootID() string {
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

func encodeCommit(dst *[commitSize]byte, n uint64, synced bool, boot string) {
	b := dst[:0]
	b = append(b, commitMagic...)
	b = binary.BigEndian.AppendUint64(b, n)
	if synced {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = append(b, byte(len(boot)))
	b = append(b, boot...)
	for len(b) < commitSize-4 {
		b = append(b, 0)
	}
	binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

func decodeCommit(b []byte) (n uint64, synced bool, boot string, ok bool) {
	if len(b) < commitSize || !bytes.Equal(b[:4], []byte(commitMagic)) ||
		crc32.ChecksumIEEE(b[:commitSize-4]) != binary.BigEndian.Uint32(b[commitSize-4:commitSize]) {
		return 0, false, "", false
	}
	l := int(b[13])
	if l > 64 {
		return 0, false, "", false
	}
	return binary.BigEndian.Uint64(b[4:12]), b[12] == 1, string(b[14 : 14+l]), true
}

// openCommitRecord checks the state's commit count (committed) against
// dir's commit file and opens the file for the store's later commits.
func openCommitRecord(fs vfs.FS, dir string, committed uint64, synced bool) (*commitRecord, error) {
	path := fs.PathJoin(dir, commitFile)
	boot := bootID()
	if f, err := fs.Open(path); err == nil {
		var b [commitSize]byte
		_, rerr := io.ReadFull(f, b[:])
		f.Close()
		if n, fileSynced, fileBoot, ok := decodeCommit(b[:]); rerr == nil && ok {
			if err := checkRollback(dir, committed, n, fileSynced, fileBoot, boot); err != nil {
				return nil, err
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, err
	}
	r := &commitRecord{f: f, boot: boot, synced: synced}
	if err := r.write(committed); err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

// checkRollback decides whether a state holding committed commits, whose
// commit file recorded made commits (synced ones, and the boot id then),
// lost committed work to corruption: only an OS restart (another boot id)
// with unsynced commits explains a shorter state.
func checkRollback(dir string, committed, made uint64, synced bool, fileBoot, boot string) error {
	if made <= committed {
		return nil
	}
	if synced {
		return &Fault{Dir: dir, File: "the newest WAL (*.log)", Kind: FaultRolledBack,
			Err: fmt.Errorf("it holds %d commits, but %d were made and synced (recorded in %s)", committed, made, commitFile)}
	}
	if fileBoot == boot || boot == "" {
		return &Fault{Dir: dir, File: "the newest WAL (*.log)", Kind: FaultRolledBack,
			Err: fmt.Errorf("it holds %d commits, but %d were made (recorded in %s) and the machine has not restarted since", committed, made, commitFile)}
	}
	// An OS crash with state.sync off: the unsynced tail is legitimately
	// lost; state and positions rolled back together.
	return nil
}

// write records that n commits were made.
func (r *commitRecord) write(n uint64) error {
	encodeCommit(&r.buf, n, r.synced, r.boot)
	_, err := r.f.WriteAt(r.buf[:], 0)
	return err
}

func (r *commitRecord) close() error { return r.f.Close() }

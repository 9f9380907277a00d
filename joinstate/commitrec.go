package joinstate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A store counts its commits (metaCommits, written in every commit's
// batch) and records in a small file beside pebble's (commitFile) how many
// of them are durable: after a synced commit (state.sync), at most every
// checkpointEvery after an unsynced one (the WAL is synced first), and at
// Close (pebble syncs its WAL when closing). Pebble replays its newest WAL
// up to the first record that does not check out and treats the rest as a
// torn tail: after a crash that is what an unsynced WAL looks like, but
// after a flipped byte it is a silent rollback to an older state. On open
// the two counts are compared: a state holding fewer commits than were
// durable lost them to corruption and is a FaultRolledBack. Unsynced
// commits a crash loses (kill -9 included: pebble buffers its WAL) are
// not counted as durable, so losing them is not reported; state and
// positions roll back together.
const (
	commitFile      = "CDCJOIN-COMMITS"
	metaCommits     = "commits"
	commitMagic     = "CJC2"
	commitSize      = 4 + 8 + 4 // magic, durable commits, crc
	checkpointEvery = 10 * time.Second
)

// commitRecord is the open commit file of a store.
type commitRecord struct {
	f       vfs.File
	durable uint64    // the count in the file
	at      time.Time // when it was written
	buf     [commitSize]byte
}

func encodeCommit(dst *[commitSize]byte, n uint64) {
	b := append(dst[:0], commitMagic...)
	b = binary.BigEndian.AppendUint64(b, n)
	binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

func decodeCommit(b []byte) (n uint64, ok bool) {
	if len(b) < commitSize || !bytes.Equal(b[:4], []byte(commitMagic)) ||
		crc32.ChecksumIEEE(b[:commitSize-4]) != binary.BigEndian.Uint32(b[commitSize-4:commitSize]) {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[4:12]), true
}

// checkRollback reports a state holding committed commits of which durable
// were durable when it was last written.
func checkRollback(dir string, committed, durable uint64) error {
	if durable <= committed {
		return nil
	}
	return &Fault{Dir: dir, File: "the newest WAL (*.log)", Kind: FaultRolledBack,
		Err: fmt.Errorf("it holds %d commits, but %d had been made durable (recorded in %s)", committed, durable, commitFile)}
}

// openCommitRecord checks the state's commit count (committed) against
// dir's commit file and opens the file for the store's later commits.
func openCommitRecord(fs vfs.FS, dir string, committed uint64) (*commitRecord, error) {
	path := fs.PathJoin(dir, commitFile)
	if f, err := fs.Open(path); err == nil {
		var b [commitSize]byte
		_, rerr := io.ReadFull(f, b[:])
		f.Close()
		if n, ok := decodeCommit(b[:]); rerr == nil && ok {
			if err := checkRollback(dir, committed, n); err != nil {
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
	r := &commitRecord{f: f}
	if err := r.write(committed); err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

// write records that n commits are durable.
func (r *commitRecord) write(n uint64) error {
	encodeCommit(&r.buf, n)
	if _, err := r.f.WriteAt(r.buf[:], 0); err != nil {
		return err
	}
	r.durable, r.at = n, time.Now()
	return nil
}

func (r *commitRecord) close() error { return r.f.Close() }

// recordDurable updates the commit file after a commit: at once when the
// commit was synced, else at most every checkpointEvery, after syncing the
// WAL. A failure is the store's Fault (the batch is committed, but a later
// open could no longer tell a rollback).
func (s *Store) recordDurable() error {
	r := s.rec
	if r == nil {
		return nil
	}
	if !s.sync {
		if time.Since(r.at) < checkpointEvery {
			return nil
		}
		if err := s.guard(func() error { return s.db.LogData(nil, pebble.Sync) }); err != nil {
			return err
		}
	}
	if err := r.write(s.commits); err != nil {
		f := classify(s.h.dir, err)
		if f == nil {
			f = &Fault{Dir: s.h.dir, File: commitFile, Kind: FaultIO, Err: err}
		}
		return s.h.fail(f)
	}
	return nil
}

package kafkarun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cdcjoin/cdcjoin/config"
)

// lockFile is the file in state.dir that a running instance holds an
// exclusive lock on.
const lockFile = "cdcjoin.lock"

// lockStateDir takes an exclusive, non-blocking lock on dir (created 0700
// if absent) for the life of Run, and writes the process id into the lock
// file. Two processes sharing a state directory would also share the
// default kafka.instance_id and fence each other: the second one is
// refused up front instead. The returned function releases the lock.
func lockStateDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cdcjoin: state.dir: %w", err)
	}
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: state.dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := ""
		if b, rerr := os.ReadFile(path); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			holder = " (pid " + strings.TrimSpace(string(b)) + ")"
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("cdcjoin: state.dir %s is in use by another running cdcjoin process%s: every instance needs its own state.dir (and kafka.instance_id)", dir, holder)
		}
		return nil, fmt.Errorf("cdcjoin: lock state.dir %s: %w", dir, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// fenced explains an error of the keying stage's transactions that means
// another live producer took over its transactional id: the other process
// uses the same kafka.instance_id. INVALID_TXN_STATE is what a broker may
// answer instead when the takeover lands in the middle of a transaction.
func fenced(err error, k *config.Kafka, txnID string) error {
	if err == nil {
		return nil
	}
	const advice = "give every running instance its own instance_id (or leave it unset: the default is derived from the host name and state.dir)"
	switch {
	case errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch):
		return fmt.Errorf("cdcjoin: keying: another live process uses kafka.instance_id %q (transactional id %q) and fenced this one: %s: %w",
			k.InstanceID, txnID, advice, err)
	case errors.Is(err, kerr.InvalidTxnState):
		return fmt.Errorf("cdcjoin: keying: the transaction was taken over, most likely because another live process uses kafka.instance_id %q (transactional id %q) and fenced this one: %s: %w",
			k.InstanceID, txnID, advice, err)
	}
	return err
}

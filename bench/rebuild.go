package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cdcjoin/cdcjoin/bulkload"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/version"
)

// The rebuild phase measures what a join stage does when a keyed
// partition moves to an instance without its state: rebuilding it from the
// compacted keyed topic, in bulk (kafkarun's path: bulkload.KeyedRebuild,
// joinstate.Load). The engine state after the other phases is first
// written, untimed, as the compacted topic holds it (one keyed record per
// live row, parents then children, in key order) to a file that stands in
// for the topic; then, timed, a new state is rebuilt from that file:
// records decoded, folded, sorted, written as tables and ingested with the
// position. Fetching from Kafka is not measured.

const phaseRebuild = "rebuild"

// rebuildPhase runs the rebuild phase on the engine driver's state.
func (d *engineDriver) rebuildPhase(ctx context.Context, dir string) (Phase, error) {
	cfg := d.cfg
	ph := Phase{Name: phaseRebuild}
	topicFile := filepath.Join(dir, "keyed-topic")
	defer os.Remove(topicFile)
	n, bytes, err := dumpKeyed(d.eng.Store(), d.eng.Spec(), topicFile)
	if err != nil {
		return ph, err
	}
	stateDir := filepath.Join(dir, "rebuilt-state")
	defer os.RemoveAll(stateDir)
	m := beginPhase(d.smp, phaseRebuild, n, d.genCPU)
	if err := rebuildFrom(ctx, cfg, d.eng.Spec(), topicFile, stateDir); err != nil {
		return ph, err
	}
	ph.Events, ph.InputBytes = n, bytes
	m.end(&ph, d.smp, d.pr, -1, d.genCPU)
	return ph, nil
}

// dumpKeyed writes every stored parent and child of st as keyed-topic
// records (uvarint key length, key, uvarint value length, value) to path.
func dumpKeyed(st *joinstate.Store, spec *keyed.Spec, path string) (n, bytes int64, err error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, 0, fmt.Errorf("cdcjoin: bench: %w", err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	var key, val []byte
	var p keyed.ParentRecord
	var c keyed.ChildRecord
	var scratch []row.Value
	put := func(in *keyed.Input) error {
		key = keyedlog.AppendInputKey(key[:0], in)
		val = keyedlog.AppendInputValue(val[:0], in)
		w.Write(binary.AppendUvarint(nil, uint64(len(key))))
		w.Write(key)
		w.Write(binary.AppendUvarint(nil, uint64(len(val))))
		_, err := w.Write(val)
		n++
		bytes += int64(len(key) + len(val))
		return err
	}
	t := st.Begin()
	defer t.Abort()
	err = t.Records(func(parent bool, k, v []byte) error {
		if parent {
			if err := keyed.DecodeParent(v, &p); err != nil {
				return err
			}
			return put(&keyed.Input{Kind: keyed.ParentUpsert, Side: row.Parent, JoinKey: k, Row: p.Row})
		}
		if err := keyed.DecodeChild(v, &c); err != nil {
			return err
		}
		var jn int
		var err error
		if scratch, jn, err = row.DecodeKey(scratch[:0], k, len(spec.ParentKey)); err != nil {
			return err
		}
		return put(&keyed.Input{Kind: keyed.ChildUpsert, Side: row.Child, JoinKey: k[:jn], ChildKey: k[jn:], Row: c.Row})
	})
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return n, bytes, fmt.Errorf("cdcjoin: bench: write keyed records: %w", err)
	}
	return n, bytes, nil
}

// rebuildFrom rebuilds a new state in stateDir from the keyed records in
// path, the way a join stage worker does.
func rebuildFrom(ctx context.Context, cfg *config.Config, spec *keyed.Spec, path, stateDir string) error {
	st, err := joinstate.Open(job.StateOptions(cfg, stateDir))
	if err != nil {
		return err
	}
	defer st.Close()
	mem := cfg.State.BulkLoadMB
	if mem <= 0 {
		mem = 256
	}
	l, err := bulkload.New(spec, bulkload.Options{Mode: bulkload.Rebuild, Dir: filepath.Join(stateDir, "bulk-load", "runs"), MemoryBytes: mem << 20})
	if err != nil {
		return err
	}
	defer l.Close()
	rb := bulkload.NewKeyedRebuild(l, spec, version.Start(1, 0))
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("cdcjoin: bench: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var key, val []byte
	read := func(b []byte) ([]byte, error) {
		n, err := binary.ReadUvarint(r)
		if err != nil {
			return b, err
		}
		if uint64(cap(b)) < n {
			b = make([]byte, n)
		}
		b = b[:n]
		_, err = io.ReadFull(r, b)
		return b, err
	}
	for off := int64(0); ; off++ {
		if off&0xffff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if key, err = read(key); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("cdcjoin: bench: read keyed records: %w", err)
		}
		if val, err = read(val); err != nil {
			return fmt.Errorf("cdcjoin: bench: read keyed records: %w", err)
		}
		if err := rb.Add(off, key, val); err != nil {
			return err
		}
	}
	return driver.FinishRebuild(ctx, st, rb, filepath.Join(stateDir, "bulk-load", "tables"), cfg.Kafka.KeyedTopic(), 0)
}

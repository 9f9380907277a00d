package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cdcjoin/cdcjoin/cdcgen"
)

// WriteJSONL writes the workload of one point (Workload.Rows) as `cdcjoin
// replay` input files in dir: snapshot.jsonl, cdc.jsonl and storm.jsonl,
// in consumption order (concatenate them to replay all phases). Latency
// probes are not included; synthetic records (hot parent, its children,
// renames) use partition Workload.Partitions. It returns the file paths.
func WriteJSONL(ctx context.Context, o Options, dir string) ([]string, error) {
	o = o.withDefaults()
	o.Dir = dir
	if err := o.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cdcjoin: bench: %w", err)
	}
	p := o.Workload.plan(o.Workload.Rows)
	src, err := newSource(o.Workload.genOptions(p, 0, 1), p, o.Workload, int32(o.Workload.Partitions), true)
	if err != nil {
		return nil, err
	}
	src.start(ctx)
	defer src.close()
	var files []string
	for _, ph := range []struct {
		name string
		req  phaseReq
	}{
		{"snapshot.jsonl", phaseReq{kind: phaseSnapshot}},
		{"cdc.jsonl", phaseReq{kind: phaseCDC, n: p.cdc}},
		{"storm.jsonl", phaseReq{kind: phaseStorm}},
	} {
		path := filepath.Join(dir, ph.name)
		if err := writePhaseJSONL(ctx, src, ph.req, path); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

func writePhaseJSONL(ctx context.Context, src *source, req phaseReq, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("cdcjoin: bench: %w", err)
	}
	w := cdcgen.NewJSONLWriter(f)
	err = func() error {
		select {
		case src.reqs <- req:
		case <-ctx.Done():
			return ctx.Err()
		}
		for {
			var b *batch
			select {
			case b = <-src.out:
			case <-ctx.Done():
				return ctx.Err()
			}
			for i := range b.recs {
				r := &b.recs[i]
				cr := cdcgen.Record{Topic: r.topic, Partition: r.partition, Offset: r.offset, Key: r.key, Value: r.val}
				if err := w.Write(&cr); err != nil {
					return err
				}
			}
			last := b.last
			src.recycle(b)
			if last {
				return w.Flush()
			}
		}
	}()
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("cdcjoin: bench: %w", cerr)
	}
	return err
}

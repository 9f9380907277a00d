// Package peers runs other stream processors ("peers") on the benchmark's
// workload, so `cdcjoin bench --peer` can put their throughput next to
// cdcjoin's on the same records: the input conversion they need
// (WriteInput), the Flink SQL peer (Flink, a Maven project embedded from
// flink/), and the comparison of final joins (CompareFinal).
package peers

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/row"
)

// Input is a workload converted into one directory of Debezium JSON files
// per table (schemas off), one file per source partition: the layout a
// file-reading peer needs to keep each Kafka partition's order (every
// record of a row is on one partition, as Kafka's default partitioner puts
// it), the only order Kafka promises.
type Input struct {
	// ParentDir and ChildDir hold part-<partition>.json files; RecordsDir
	// too, for the three-table chain (WriteChainInput), else it is empty.
	ParentDir, ChildDir, RecordsDir string
	// Records is the number of input Kafka records read, tombstones included:
	// the numerator of every records/s figure.
	Records int64
	// Tombstones were dropped: Debezium's tombstones (null value) only serve
	// Kafka's log compaction, and a debezium-json reader cannot take them.
	Tombstones int64
	// FilledBefore counts updates whose missing before image (REPLICA
	// IDENTITY DEFAULT) was replaced by the record key (the primary key
	// columns): Flink's debezium-json rejects an update without one.
	FilledBefore int64
	// Bytes is the size of the written files.
	Bytes int64
}

// ErrUnsupported marks a record a debezium-json reader cannot take
// faithfully (a truncate, a TOAST placeholder).
var ErrUnsupported = errors.New("record not representable for the peer")

// unavailable is Debezium's placeholder for an unchanged TOASTed column.
var unavailable = []byte(`"__debezium_unavailable_value"`)

// WriteInput reads the replay input files (JSON lines of Kafka records, in
// consumption order) and writes their envelopes into dir/<table>/, where
// table is "users" for parentTopic and "domains" for childTopic. Each value
// is copied as it is (source block and unselected columns included, so the
// peer parses as much as cdcjoin does) except that a schemas-on value is
// unwrapped to its payload and a null `before` of an update becomes the
// record's key (and so does that of a delete, should one lack it). Tombstones are dropped. A truncate (op=t), a TOAST
// placeholder or a record of another topic is an error wrapping
// ErrUnsupported (or naming the topic): debezium-json has no truncate, and
// it would store the placeholder as the column's value.
func WriteInput(files []string, parentTopic, childTopic, dir string) (Input, error) {
	in := Input{ParentDir: filepath.Join(dir, "users"), ChildDir: filepath.Join(dir, "domains")}
	err := writeInput(files, map[string]string{parentTopic: in.ParentDir, childTopic: in.ChildDir}, &in)
	return in, err
}

// WriteChainInput is WriteInput for the three-table chain (bench's
// ShapeChain): the records of usersTopic, domainsTopic and recordsTopic go
// into dir/users/, dir/domains/ and dir/dns_records/.
func WriteChainInput(files []string, usersTopic, domainsTopic, recordsTopic, dir string) (Input, error) {
	in := Input{ParentDir: filepath.Join(dir, "users"), ChildDir: filepath.Join(dir, "domains"), RecordsDir: filepath.Join(dir, "dns_records")}
	err := writeInput(files, map[string]string{usersTopic: in.ParentDir, domainsTopic: in.ChildDir, recordsTopic: in.RecordsDir}, &in)
	return in, err
}

// writeInput converts files into dirs (topic → directory), counting into in.
func writeInput(files []string, dirs map[string]string, in *Input) error {
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("cdcjoin: peers: %w", err)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("cdcjoin: peers: %w", err)
		}
	}
	w := &partWriter{files: map[partKey]*partFile{}}
	err := func() error {
		for _, name := range files {
			if err := convertFile(name, dirs, in, w); err != nil {
				return err
			}
		}
		return nil
	}()
	n, cerr := w.close()
	if err == nil {
		err = cerr
	}
	in.Bytes = n
	return err
}

func convertFile(name string, dirs map[string]string, in *Input, w *partWriter) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("cdcjoin: peers: %w", err)
	}
	defer f.Close()
	var line []byte
	return engine.ReadJSONL(f, name, func(r *engine.Record) error {
		in.Records++
		dir, ok := dirs[r.Topic]
		if !ok {
			want := make([]string, 0, len(dirs))
			for t := range dirs {
				want = append(want, strconv.Quote(t))
			}
			slices.Sort(want)
			return fmt.Errorf("cdcjoin: peers: %s: %s partition %d offset %d: record of topic %q, want one of %s", name, r.Topic, r.Partition, r.Offset, r.Topic, strings.Join(want, ", "))
		}
		if r.Value == nil {
			in.Tombstones++
			return nil
		}
		var filled bool
		line, filled, err = appendEnvelope(line[:0], r.Key, r.Value)
		if err != nil {
			return fmt.Errorf("%s: %s partition %d offset %d: %w", name, r.Topic, r.Partition, r.Offset, err)
		}
		if filled {
			in.FilledBefore++
		}
		line = append(line, '\n')
		return w.write(dir, r.Partition, line)
	})
}

// appendEnvelope appends the schemaless envelope of value to dst, with a
// null before of an update replaced by key's payload; filled says whether it
// was.
func appendEnvelope(dst, key, value []byte) (out []byte, filled bool, err error) {
	value, err = payload(value)
	if err != nil {
		return dst, false, err
	}
	if bytes.Contains(value, unavailable) {
		return dst, false, fmt.Errorf("cdcjoin: peers: a TOAST placeholder (__debezium_unavailable_value): Flink's debezium-json would store it as the value; generate the workload without TOAST placeholders: %w", ErrUnsupported)
	}
	var op, before []byte
	err = debezium.Members(value, func(name, raw []byte) error {
		switch string(name) {
		case "op":
			op, _ = debezium.PlainString(raw)
		case "before":
			before = raw
		}
		return nil
	})
	if err != nil {
		return dst, false, fmt.Errorf("cdcjoin: peers: envelope: %w", err)
	}
	switch string(op) {
	case "c", "r":
		return append(dst, value...), false, nil
	case "u", "d":
		if !bytes.Equal(before, []byte("null")) {
			return append(dst, value...), false, nil
		}
	case "t":
		return dst, false, fmt.Errorf("cdcjoin: peers: a truncate (op=t): debezium-json cannot represent it: %w", ErrUnsupported)
	default:
		return dst, false, fmt.Errorf("cdcjoin: peers: envelope op %q: want c, r, u or d", op)
	}
	// An update or delete without its before image: the primary key is all
	// that a keyed (ChangelogNormalize) reader needs from it.
	k, err := payload(key)
	if err != nil {
		return dst, false, fmt.Errorf("cdcjoin: peers: key: %w", err)
	}
	dst = append(dst, '{')
	first := true
	err = debezium.Members(value, func(name, raw []byte) error {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = row.AppendJSONString(dst, string(name))
		dst = append(dst, ':')
		if string(name) == "before" {
			raw = k
		}
		dst = append(dst, raw...)
		return nil
	})
	return append(dst, '}'), true, err
}

// payload returns the payload of a schemas-on {"schema":…,"payload":…}
// value, or b itself.
func payload(b []byte) ([]byte, error) {
	var p []byte
	var schema bool
	n := 0
	err := debezium.Members(b, func(name, raw []byte) error {
		n++
		switch string(name) {
		case "schema":
			schema = true
		case "payload":
			p = raw
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: peers: %w", err)
	}
	if schema && p != nil && n == 2 {
		return p, nil
	}
	return b, nil
}

type partKey struct {
	dir  string
	part int32
}

type partFile struct {
	f *os.File
	w *bufio.Writer
	n int64
}

// partWriter writes lines into one file per (directory, partition).
type partWriter struct {
	files map[partKey]*partFile
}

func (w *partWriter) write(dir string, part int32, line []byte) error {
	k := partKey{dir, part}
	pf := w.files[k]
	if pf == nil {
		f, err := os.Create(filepath.Join(dir, "part-"+strconv.Itoa(int(part))+".json"))
		if err != nil {
			return fmt.Errorf("cdcjoin: peers: %w", err)
		}
		pf = &partFile{f: f, w: bufio.NewWriterSize(f, 256<<10)}
		w.files[k] = pf
	}
	pf.n += int64(len(line))
	if _, err := pf.w.Write(line); err != nil {
		return fmt.Errorf("cdcjoin: peers: %w", err)
	}
	return nil
}

// close flushes and closes every file and returns the bytes written.
func (w *partWriter) close() (int64, error) {
	var n int64
	var errs []error
	for _, pf := range w.files {
		n += pf.n
		if err := pf.w.Flush(); err != nil {
			errs = append(errs, err)
		}
		if err := pf.f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return n, fmt.Errorf("cdcjoin: peers: %w", err)
	}
	return n, nil
}

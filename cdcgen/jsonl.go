package cdcgen

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
)

// JSONLWriter writes records in the `cdcjoin replay` input format, one per
// line:
//
//	{"topic":"…","partition":N,"offset":N,"key":<JSON or null>,"value":<JSON or null>}
//
// Key and value are embedded as raw JSON (they are JSON already), not as
// strings. It buffers; call Flush at the end. Not safe for concurrent use.
type JSONLWriter struct {
	w   *bufio.Writer
	buf []byte
}

// NewJSONLWriter returns a writer buffering into w.
func NewJSONLWriter(w io.Writer) *JSONLWriter {
	return &JSONLWriter{w: bufio.NewWriterSize(w, 1<<20)}
}

// AppendJSONL appends rec's JSONL line (with the trailing newline) to b.
func AppendJSONL(b []byte, rec *Record) []byte {
	b = append(b, `{"topic":`...)
	b = appendJSONString(b, rec.Topic)
	b = append(b, `,"partition":`...)
	b = strconv.AppendInt(b, int64(rec.Partition), 10)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, rec.Offset, 10)
	b = append(b, `,"key":`...)
	if rec.Key == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, rec.Key...)
	}
	b = append(b, `,"value":`...)
	if rec.Value == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, rec.Value...)
	}
	return append(b, "}\n"...)
}

// Write writes one record. Errors are the underlying writer's, wrapped.
func (j *JSONLWriter) Write(rec *Record) error {
	j.buf = AppendJSONL(j.buf[:0], rec)
	if _, err := j.w.Write(j.buf); err != nil {
		return fmt.Errorf("cdcjoin: cdcgen: write jsonl: %w", err)
	}
	return nil
}

// Flush writes buffered data to the underlying writer.
func (j *JSONLWriter) Flush() error {
	if err := j.w.Flush(); err != nil {
		return fmt.Errorf("cdcjoin: cdcgen: flush jsonl: %w", err)
	}
	return nil
}

// WriteJSONL writes recs to w in the replay input format.
func WriteJSONL(w io.Writer, recs []Record) error {
	j := NewJSONLWriter(w)
	for i := range recs {
		if err := j.Write(&recs[i]); err != nil {
			return err
		}
	}
	return j.Flush()
}

// StreamJSONL generates the history of opts straight into w without keeping
// it in memory, and returns its Stats.
func StreamJSONL(w io.Writer, opts Options) (Stats, error) {
	g, err := NewGenerator(opts)
	if err != nil {
		return Stats{}, err
	}
	j := NewJSONLWriter(w)
	for {
		rec, ok := g.Next()
		if !ok {
			break
		}
		if err := j.Write(&rec); err != nil {
			return g.Stats(), err
		}
	}
	return g.Stats(), j.Flush()
}

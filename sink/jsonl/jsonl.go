// Package jsonl is a sink that writes every join change as one JSON object
// per line:
//
//	{"op":"upsert","version":N,"prev_version":N,"parent_key":[…],"child_key":[…]|null,"values":{"name":value,…}}
//
// Integers, floats and booleans are JSON numbers and booleans; text,
// decimals, dates, timestamps and times are strings (row.Value.Text);
// SQL NULL is null. op is "upsert" or "retract"; prev_version is 0 when the
// row had no previous version; child_key is null for a LEFT join's padded
// row.
package jsonl

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/cdcjoin/cdcjoin/row"
)

// Sink writes changes as JSON lines. It is safe for concurrent use: each
// Write appends its changes as a unit, and Flush flushes everything written
// by any goroutine.
type Sink struct {
	mu    sync.Mutex
	w     *bufio.Writer
	file  *os.File // non-nil when the sink owns (and syncs) a file
	names []string
	line  []byte
	err   error // sticky write error
}

// New returns a sink writing to w (not closed by Close). names are the
// output column names, in select order.
func New(w io.Writer, names []string) *Sink {
	return &Sink{w: bufio.NewWriterSize(w, 64<<10), names: names}
}

// Create opens (appending, creating if absent) the file at path; Flush
// fsyncs it and Close closes it.
func Create(path string, names []string) (*Sink, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: jsonl sink: %w", err)
	}
	s := New(f, names)
	s.file = f
	return s, nil
}

// Write formats and buffers changes. It fails only after an earlier write
// error (which it returns again).
func (s *Sink) Write(_ context.Context, changes []row.Change) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	for i := range changes {
		s.line = AppendChange(s.line[:0], &changes[i], s.names)
		s.line = append(s.line, '\n')
		if _, err := s.w.Write(s.line); err != nil {
			s.err = fmt.Errorf("cdcjoin: jsonl sink: write: %w", err)
			return s.err
		}
	}
	return nil
}

// Flush writes buffered lines to the underlying writer (and fsyncs a file
// opened by Create).
func (s *Sink) Flush(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if err := s.w.Flush(); err != nil {
		s.err = fmt.Errorf("cdcjoin: jsonl sink: flush: %w", err)
		return s.err
	}
	if s.file != nil {
		if err := s.file.Sync(); err != nil {
			s.err = fmt.Errorf("cdcjoin: jsonl sink: sync: %w", err)
			return s.err
		}
	}
	return nil
}

// Close closes a file opened by Create; unflushed lines are discarded.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file != nil {
		if err := s.file.Close(); err != nil {
			return fmt.Errorf("cdcjoin: jsonl sink: close: %w", err)
		}
		s.file = nil
	}
	return nil
}

// AppendChange appends c as one JSON object (without a newline) to dst,
// in the format of row.Change.AppendJSON; names label c.Values in order.
func AppendChange(dst []byte, c *row.Change, names []string) []byte {
	return c.AppendJSON(dst, names)
}

// Package jsonl is a sink that writes every join change as one JSON object
// per line:
//
//	{"op":"upsert","version":N,"prev_version":N,"parent_key":[…],"child_key":[…]|null,"values":{"name":value,…}}
//
// Integers, floats and booleans are JSON numbers and booleans; text,
// decimals, dates, timestamps and times are strings (debezium.Value.Text);
// SQL NULL is null. op is "upsert" or "retract"; prev_version is 0 when the
// row had no previous version; child_key is null for a LEFT join's padded
// row.
package jsonl

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/keyed"
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
func (s *Sink) Write(_ context.Context, changes []keyed.Change) error {
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

// AppendChange appends c as one JSON object (without a newline) to dst.
// names label c.Values in order.
func AppendChange(dst []byte, c *keyed.Change, names []string) []byte {
	dst = append(dst, `{"op":"`...)
	dst = append(dst, c.Op.String()...)
	dst = append(dst, `","version":`...)
	dst = strconv.AppendUint(dst, c.Version, 10)
	dst = append(dst, `,"prev_version":`...)
	dst = strconv.AppendUint(dst, c.PrevVersion, 10)
	dst = append(dst, `,"parent_key":`...)
	dst = appendArray(dst, c.ParentKey)
	dst = append(dst, `,"child_key":`...)
	if c.ChildKey == nil {
		dst = append(dst, "null"...)
	} else {
		dst = appendArray(dst, c.ChildKey)
	}
	dst = append(dst, `,"values":{`...)
	for i, v := range c.Values {
		if i > 0 {
			dst = append(dst, ',')
		}
		name := "col" + strconv.Itoa(i)
		if i < len(names) {
			name = names[i]
		}
		dst = AppendString(dst, name)
		dst = append(dst, ':')
		dst = AppendValue(dst, v)
	}
	return append(dst, "}}"...)
}

func appendArray(dst []byte, vals []debezium.Value) []byte {
	dst = append(dst, '[')
	for i, v := range vals {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendValue(dst, v)
	}
	return append(dst, ']')
}

// AppendValue appends v as JSON: null, a number (ints; finite floats), a
// boolean, or a string (everything else, via Value.Text).
func AppendValue(dst []byte, v debezium.Value) []byte {
	switch v.Kind {
	case debezium.KindNull:
		return append(dst, "null"...)
	case debezium.KindInt:
		return strconv.AppendInt(dst, v.Int, 10)
	case debezium.KindBool:
		return strconv.AppendBool(dst, v.Int != 0)
	case debezium.KindFloat:
		if !math.IsNaN(v.Float) && !math.IsInf(v.Float, 0) {
			return strconv.AppendFloat(dst, v.Float, 'g', -1, 64)
		}
	}
	return AppendString(dst, v.Text())
}

const hex = "0123456789abcdef"

// AppendString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, "\ufffd"...)
		} else {
			dst = append(dst, s[i:i+n]...)
		}
		i += n
	}
	return append(dst, '"')
}

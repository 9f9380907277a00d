package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cdcjoin/cdcjoin/cdcgen"
)

// HistoryOptions select a CDC history for WriteHistory: the correctness
// tests' mix (cdcgen.DefaultOptions: every hard case of NOTES §3, 200 users
// and 400 domains snapshotted, 3 partitions per topic) with Ops operations.
type HistoryOptions struct {
	// Seed and Ops are cdcgen's (Ops > 0).
	Seed int64
	Ops  int
	// Schema is "off" (default), "on" or "mixed".
	Schema string
	// Users and Domains are the snapshot's sizes (0: cdcgen's defaults,
	// 200 and 400).
	Users, Domains int
	// Peers leaves out what the peer systems cannot read (see RunPeers):
	// truncates and TOAST placeholders.
	Peers bool
}

// HistoryInfo describes a written history (also written as history.json).
type HistoryInfo struct {
	Command   string       `json:"command"`
	Seed      int64        `json:"seed"`
	Ops       int          `json:"ops"`
	Schema    string       `json:"schema"`
	Users     int          `json:"users,omitempty"`
	Domains   int          `json:"domains,omitempty"`
	Peers     bool         `json:"peers,omitempty"`
	Records   int          `json:"records"`
	Bytes     int64        `json:"bytes"`
	Truncates int          `json:"truncates"`
	InnerRows int          `json:"inner_rows"`
	LeftRows  int          `json:"left_rows"`
	Stats     cdcgen.Stats `json:"stats"`
}

// WriteHistory writes a seeded CDC history into dir: history.jsonl (the
// `cdcjoin replay` input, one Kafka record per line in consumption order),
// expected_inner.tsv and expected_left.tsv (the SQL join of the final
// tables for the default select list, one row per line, tab-separated,
// sorted by row key, escaped like ClickHouse's TabSeparated, \N for NULL) and history.json (what was written). The
// same options give the same bytes, so any engine can be checked on it.
// command is recorded in history.json. Memory: the final tables (not the
// history) are held to compute the expected rows.
func WriteHistory(dir string, o HistoryOptions, command string) (HistoryInfo, error) {
	info := HistoryInfo{Command: command, Seed: o.Seed, Ops: o.Ops, Schema: o.Schema, Users: o.Users, Domains: o.Domains, Peers: o.Peers}
	if o.Ops <= 0 {
		return info, fmt.Errorf("cdcjoin: bench: history needs a positive number of operations (got %d)", o.Ops)
	}
	if info.Schema == "" {
		info.Schema = "off"
	}
	mode, err := schemaMode(info.Schema)
	if err != nil {
		return info, fmt.Errorf("cdcjoin: bench: %w", err)
	}
	opts := cdcgen.DefaultOptions(o.Seed)
	opts.Ops, opts.SchemaMode = o.Ops, mode
	if o.Users > 0 {
		opts.Users = o.Users
	}
	if o.Domains > 0 {
		opts.Domains = o.Domains
	}
	if o.Peers {
		opts.Mix.TruncateUsers, opts.Mix.TruncateDomains, opts.Toast = 0, 0, 0
	}
	g, err := cdcgen.NewGenerator(opts)
	if err != nil {
		return info, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return info, fmt.Errorf("cdcjoin: bench: %w", err)
	}
	path := filepath.Join(dir, "history.jsonl")
	if err := writeFile(path, func(w *bufio.Writer) error {
		j := cdcgen.NewJSONLWriter(w)
		for {
			rec, ok := g.Next()
			if !ok {
				return j.Flush()
			}
			if err := j.Write(&rec); err != nil {
				return err
			}
		}
	}); err != nil {
		return info, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return info, fmt.Errorf("cdcjoin: bench: %w", err)
	}
	info.Stats = g.Stats()
	info.Records, info.Bytes, info.Truncates = info.Stats.Records, st.Size(), info.Stats.Truncates
	final := g.Tables()
	for _, left := range []bool{false, true} {
		rows := cdcgen.Join(final.Users, final.Domains, left)
		name := "expected_inner.tsv"
		if left {
			name, info.LeftRows = "expected_left.tsv", len(rows)
		} else {
			info.InnerRows = len(rows)
		}
		if err := writeFile(filepath.Join(dir, name), func(w *bufio.Writer) error {
			for _, r := range rows {
				for i, v := range r.Values {
					if i > 0 {
						w.WriteByte('\t')
					}
					if v != cdcgen.Null {
						v = tsvEscaper.Replace(v)
					}
					w.WriteString(v)
				}
				if err := w.WriteByte('\n'); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return info, err
		}
	}
	b, _ := json.MarshalIndent(info, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "history.json"), append(b, '\n'), 0o644); err != nil {
		return info, fmt.Errorf("cdcjoin: bench: %w", err)
	}
	return info, nil
}

// tsvEscaper escapes values like ClickHouse's TabSeparated format.
var tsvEscaper = strings.NewReplacer("\\", "\\\\", "\t", "\\t", "\n", "\\n", "\r", "\\r")

// writeFile creates path and writes it through a buffer with fn.
func writeFile(path string, fn func(*bufio.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("cdcjoin: bench: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = fn(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cdcjoin: bench: write %s: %w", path, err)
	}
	return nil
}

package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteHistory: the same options write the same bytes, and the expected
// join files have one row per expected row.
func TestWriteHistory(t *testing.T) {
	var first []byte
	for i := 0; i < 2; i++ {
		dir := t.TempDir()
		info, err := WriteHistory(dir, HistoryOptions{Seed: 7, Ops: 2000}, "test")
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "history.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) != info.Bytes || bytes.Count(b, []byte("\n")) != info.Records {
			t.Fatalf("history.jsonl: %d bytes, %d lines; info says %d, %d", len(b), bytes.Count(b, []byte("\n")), info.Bytes, info.Records)
		}
		if i == 0 {
			first = b
		} else if !bytes.Equal(first, b) {
			t.Fatal("the same options wrote different histories")
		}
		for name, want := range map[string]int{"expected_inner.tsv": info.InnerRows, "expected_left.tsv": info.LeftRows} {
			e, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Count(string(e), "\n"); got != want || want == 0 {
				t.Fatalf("%s: %d rows, info says %d", name, got, want)
			}
		}
	}
	if _, err := WriteHistory(t.TempDir(), HistoryOptions{Seed: 1, Ops: 0}, ""); err == nil {
		t.Fatal("0 operations accepted")
	}
}

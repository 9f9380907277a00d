package peers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/row"
)

// TestFlinkOracle runs the Flink peer on a cdcgen history with the hard
// cases debezium-json can represent (at-least-once redelivery, a snapshot
// rerun, REPLICA IDENTITY DEFAULT, FK moves, PK changes, re-created
// parents, orphans; mixed schemas; no truncates, no TOAST placeholders) and
// compares its final join with cdcgen's SQL oracle. The negative control
// turns table.exec.source.cdc-events-duplicate off: Flink must then fail or
// differ. It needs a JDK 17+ and Maven (and builds the peer on first use);
// set CDCJOIN_PEER_FLINK=1 to run it (make peer-flink-test; CI via
// bench/smoke.sh).
func TestFlinkOracle(t *testing.T) {
	if os.Getenv("CDCJOIN_PEER_FLINK") == "" {
		t.Skip("set CDCJOIN_PEER_FLINK=1 to run the Flink peer (needs a JDK 17+ and Maven)")
	}
	ctx := context.Background()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	f, err := BuildFlink(ctx, filepath.Join(cache, "cdcjoin", "peers"), func(s string) { t.Log(s) })
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	h, _, in, want := oracleHistory(t, dir)

	run := func(name string, conf ...string) (Diff, error) {
		got := filepath.Join(dir, "final-"+name+".jsonl")
		res, err := f.Run(ctx, FlinkRun{Input: in, StateDir: filepath.Join(dir, "state-"+name), Final: got, Conf: conf})
		if err != nil {
			return Diff{}, err
		}
		t.Logf("%s: %d rows from %d changes, job %.1fs, process %.1fs", name, res.Rows, res.Changes, res.JobSeconds, res.Process.Seconds)
		return CompareFinal(want, got)
	}
	d, err := run("flink")
	if err != nil {
		t.Fatal(err)
	}
	if !d.Equal() || d.RowsA == 0 {
		t.Fatalf("Flink's final join differs from the oracle's: %v", d)
	}
	t.Logf("oracle: %v (%d records, %d redelivered, %d tombstones dropped)", d, in.Records, dupCount(h), in.Tombstones)
	d, err = run("no-dedup", "table.exec.source.cdc-events-duplicate=false")
	if err == nil && d.Equal() {
		t.Fatal("negative control: without cdc-events-duplicate Flink matched the oracle; the test cannot tell")
	}
	if err != nil {
		t.Logf("negative control (cdc-events-duplicate=false) failed as it should: %s", peerError(err))
	} else {
		t.Logf("negative control (cdc-events-duplicate=false) differs as it should: %v", d)
	}
}

// oracleHistory generates the history of the oracle tests (cdcgen's
// correctness defaults, 4000 operations, without what debezium-json cannot
// represent: truncates and TOAST placeholders), writes it into dir as a
// replay file (path) and as a peer Input, and writes the SQL oracle's final
// join to want.
func oracleHistory(t *testing.T, dir string) (h *cdcgen.History, path string, in Input, want string) {
	t.Helper()
	opts := cdcgen.DefaultOptions(7)
	opts.Ops = 4000
	opts.Toast = 0
	opts.Mix.TruncateUsers, opts.Mix.TruncateDomains = 0, 0
	h, err := cdcgen.Generate(opts)
	if err != nil {
		t.Fatal(err)
	}
	path, in = writeHistory(t, h, dir)
	want = filepath.Join(dir, "want.jsonl")
	writeOracle(t, h, want)
	return h, path, in, want
}

// writeHistory writes h's records as a replay file and converts it.
func writeHistory(t *testing.T, h *cdcgen.History, dir string) (string, Input) {
	t.Helper()
	path := filepath.Join(dir, "history.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := cdcgen.NewJSONLWriter(f)
	for i := range h.Records {
		if err := w.Write(&h.Records[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	in, err := WriteInput([]string{path}, cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic, filepath.Join(dir, "debezium"))
	if err != nil {
		t.Fatal(err)
	}
	return path, in
}

// writeOracle writes the SQL oracle's final join in the peer's shape.
func writeOracle(t *testing.T, h *cdcgen.History, path string) {
	t.Helper()
	names := []string{"user_id", "firstname", "lastname", "domain_id", "domain_name"}
	var b []byte
	for _, r := range cdcgen.Join(h.Final.Users, h.Final.Domains, false) {
		b = append(b, '{')
		for i, v := range r.Values {
			if i > 0 {
				b = append(b, ',')
			}
			b = row.AppendJSONString(b, names[i])
			b = append(b, ':')
			switch {
			case v == cdcgen.Null:
				b = append(b, "null"...)
			case i == 0 || i == 3:
				b = append(b, v...)
			default:
				b = row.AppendJSONString(b, v)
			}
		}
		b = append(b, "}\n"...)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func dupCount(h *cdcgen.History) int {
	n := 0
	for i := range h.Records {
		if h.Records[i].Dup {
			n++
		}
	}
	return n
}

// peerError is the peer's own message in err (its "cdcjoin-flink-peer:"
// line), or err's first line.
func peerError(err error) string {
	if err == nil {
		return ""
	}
	lines := strings.Split(err.Error(), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "cdcjoin-flink-peer:") {
			return l
		}
	}
	return lines[0]
}

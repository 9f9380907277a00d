package peers

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/cdcjoin/cdcjoin/cdcgen"
)

// TestDBSPOracle runs the DBSP peer on the oracle history (see
// oracleHistory: redelivery, a snapshot rerun, mixed schemas, …) in small
// steps, with storage and without, and compares its final join with
// cdcgen's SQL oracle. It needs cargo and builds the peer on first use (many
// minutes); set CDCJOIN_PEER_DBSP=1 to run it (make peer-dbsp-test).
func TestDBSPOracle(t *testing.T) {
	if os.Getenv("CDCJOIN_PEER_DBSP") == "" {
		t.Skip("set CDCJOIN_PEER_DBSP=1 to run the DBSP peer (needs cargo; the first build takes many minutes)")
	}
	ctx := context.Background()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	d, err := BuildDBSP(ctx, filepath.Join(cache, "cdcjoin", "peers"), func(s string) { t.Log(s) })
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	h, path, _, want := oracleHistory(t, dir)
	for _, storage := range []bool{false, true} {
		got := filepath.Join(dir, "final.jsonl")
		r := DBSPRun{Files: []string{path}, ParentTopic: cdcgen.DefaultParentTopic, ChildTopic: cdcgen.DefaultChildTopic,
			Step: 97, Final: got}
		if storage {
			r.StorageDir = filepath.Join(dir, "storage")
		}
		res, err := d.Run(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if res.Records != int64(len(h.Records)) {
			t.Fatalf("storage %t: the peer read %d records, want %d", storage, res.Records, len(h.Records))
		}
		diff, err := CompareFinal(want, got)
		if err != nil {
			t.Fatal(err)
		}
		if !diff.Equal() || diff.RowsA == 0 {
			t.Fatalf("storage %t: DBSP's final join differs from the oracle's: %v", storage, diff)
		}
		t.Logf("storage %t: %v; %d changes, job %.2fs, process %.2fs", storage, diff, res.Changes, res.JobSeconds, res.Process.Seconds)
	}
}

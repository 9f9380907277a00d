package engine_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/engine"
)

// TestMultiThroughput is a rough figure (not an assertion): replay records
// per second of a three-table chain. CDCJOIN_MULTI_BENCH=1 runs it.
func TestMultiThroughput(t *testing.T) {
	if os.Getenv("CDCJOIN_MULTI_BENCH") == "" {
		t.Skip("set CDCJOIN_MULTI_BENCH=1")
	}
	o := cdcgen.DefaultMultiOptions(1)
	o.Rows, o.Ops, o.Redeliver, o.SnapshotRerun, o.Truncates = 20000, 100000, 0, false, false
	h, err := cdcgen.GenerateMulti(o)
	if err != nil {
		t.Fatal(err)
	}
	two := `SELECT u.id AS user_id, u.firstname, u.lastname, d.id AS domain_id, d.domain_name
		FROM users u JOIN domains d ON d.user_id = u.id`
	for _, q := range []string{"two-table (parent/child core)", "two-table (plan core)", "chain-inner-left"} {
		var cfg *config.Config
		switch q {
		case "two-table (parent/child core)":
			cfg = sqlConfig(t, two)
		case "two-table (plan core)":
			cfg = sqlConfig(t, two).AsPlan()
		default:
			cfg = multiConfig(t, multiQueries[q])
		}
		cfg.State.Dir = t.TempDir()
		cfg.State.BatchEvents = 1000
		e, err := engine.Open(cfg, engine.Options{})
		if err != nil {
			t.Fatal(err)
		}
		topics := map[string]bool{}
		for _, n := range cfg.TableNames() {
			topics[cfg.Tables[n].Topic] = true
		}
		start, cpu0 := time.Now(), cpuTime()
		n := 0
		for _, r := range h.Records {
			if !topics[r.Topic] {
				continue
			}
			n++
			rec := engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
			if err := e.Process(context.Background(), &rec); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		cpu := cpuTime() - cpu0
		t.Logf("%s: %d records in %v: %.0f records/s; %.2f CPU-s, %.0f records per CPU-second", q, n, d, float64(n)/d.Seconds(), cpu.Seconds(), float64(n)/cpu.Seconds())
		e.Close()
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

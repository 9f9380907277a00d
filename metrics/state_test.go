package metrics_test

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/metrics"
	"github.com/cdcjoin/cdcjoin/row"
)

func TestStateCollector(t *testing.T) {
	st, err := joinstate.Open(joinstate.Options{Dir: "/s", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	jk := row.AppendKey(nil, []row.Value{row.Int(1)})
	tx := st.Begin()
	if err := tx.PutParent(jk, []byte("parent row")); err != nil {
		t.Fatal(err)
	}
	if err := tx.PutChild(jk, jk, []byte("child row")); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := tx.Parent(jk); err != nil || !ok {
		t.Fatalf("Parent: %v %v", ok, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := st.Flush(); err != nil {
		t.Fatal(err)
	}
	closed := false
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewStateCollector(func() []metrics.StoreStats {
		s, ok := st.Stats()
		if !ok {
			closed = true
			return nil
		}
		return []metrics.StoreStats{{Stage: "2", Partition: "3", Stats: s}}
	}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() == "keyspace" {
					name += "/" + l.GetValue()
				}
				if l.GetName() == "partition" && l.GetValue() != "3" {
					t.Errorf("%s: partition label %q", name, l.GetValue())
				}
				if l.GetName() == "stage" && l.GetValue() != "2" {
					t.Errorf("%s: stage label %q", name, l.GetValue())
				}
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			got[name] = v
		}
	}
	for _, name := range []string{"cdcjoin_state_bytes", "cdcjoin_state_keyspace_bytes/parent", "cdcjoin_state_keyspace_bytes/child", "cdcjoin_state_row_cache_hits_total"} {
		if got[name] <= 0 {
			t.Errorf("%s = %v, want > 0 (all: %v)", name, got[name], got)
		}
	}
	for _, name := range []string{"cdcjoin_state_keyspace_bytes/child_index", "cdcjoin_state_write_amplification", "cdcjoin_state_block_cache_hits_total", "cdcjoin_state_block_cache_misses_total", "cdcjoin_state_row_cache_misses_total"} {
		if _, ok := got[name]; !ok {
			t.Errorf("%s missing (all: %v)", name, got)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil || !closed {
		t.Errorf("gather after Close: err %v, store reported closed %v", err, closed)
	}
}

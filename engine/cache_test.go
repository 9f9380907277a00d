package engine_test

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// TestCacheSize: an engine whose state.cache_mb is unset opens its store
// with engine.AutoCacheBytes (64 MiB to 4 GiB); one that sets it, with that.
func TestCacheSize(t *testing.T) {
	auto := engine.AutoCacheBytes()
	if auto < 64<<20 || auto > 4<<30 {
		t.Fatalf("AutoCacheBytes %d: outside 64 MiB to 4 GiB", auto)
	}
	t.Logf("AutoCacheBytes on this machine: %d MiB", auto>>20)
	for _, tc := range []struct {
		mb   int
		want int64
	}{{0, auto}, {8, 8 << 20}} {
		cfg := jobConfig(t, "inner")
		cfg.State.CacheMB = tc.mb
		e, err := engine.Open(cfg, engine.Options{Sink: sink.Func(func(*row.Change) error { return nil }), FS: vfs.NewMem()})
		if err != nil {
			t.Fatal(err)
		}
		st, ok := e.Store().Stats()
		e.Close()
		if !ok || st.BlockCacheBytes != tc.want {
			t.Errorf("state.cache_mb %d: block cache %d bytes (ok %v), want %d", tc.mb, st.BlockCacheBytes, ok, tc.want)
		}
	}
}

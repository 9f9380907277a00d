package engine

import "testing"

// TestAutoCache: a sixteenth of the memory, within 64 MiB and 4 GiB, and
// /proc/meminfo's MemTotal parsed (kB).
func TestAutoCache(t *testing.T) {
	for _, tc := range []struct{ mem, want int64 }{
		{0, 64 << 20},         // unknown
		{512 << 20, 64 << 20}, // small: the floor
		{24 << 30, 24 << 30 / 16},
		{1 << 40, 4 << 30}, // large: the ceiling
	} {
		if got := autoCache(tc.mem); got != tc.want {
			t.Errorf("autoCache(%d) = %d, want %d", tc.mem, got, tc.want)
		}
	}
	if got := memTotal([]byte("MemFree:  1 kB\nMemTotal:       24580044 kB\n")); got != 24580044<<10 {
		t.Errorf("memTotal = %d", got)
	}
	if got := memTotal([]byte("garbage")); got != 0 {
		t.Errorf("memTotal of garbage = %d, want 0", got)
	}
}

package joinstate

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// BenchmarkPointReads reads random parents of a bulk-loaded state 40 times
// the block cache (row cache off): the CDC-at-depth read path, under pebble
// settings.
func BenchmarkPointReads(b *testing.B) {
	const n = 2_000_000
	for _, tc := range []struct {
		name string
		tune func(*pebble.Options)
	}{
		{"default", nil},
		{"index256k", func(o *pebble.Options) {
			for i := range o.Levels {
				o.Levels[i].IndexBlockSize = 256 << 10
			}
		}},
		{"newest", func(o *pebble.Options) { o.FormatMajorVersion = pebble.FormatNewest }},
		{"block2k", func(o *pebble.Options) {
			for i := range o.Levels {
				o.Levels[i].BlockSize = 2 << 10
			}
		}},
		{"newest+block2k", func(o *pebble.Options) {
			o.FormatMajorVersion = pebble.FormatNewest
			for i := range o.Levels {
				o.Levels[i].BlockSize = 2 << 10
			}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := Open(Options{Dir: b.TempDir(), CacheBytes: 4 << 20, DisableRowCache: true, tune: tc.tune})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			l, err := s.BeginLoad(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			val := make([]byte, 60)
			for i := int64(0); i < n; i++ {
				copy(val, fmt.Sprint("parent-", i))
				if err := l.AddParent(intKey(i), val); err != nil {
					b.Fatal(err)
				}
			}
			if err := l.Commit(); err != nil {
				b.Fatal(err)
			}
			if err := s.Flush(); err != nil {
				b.Fatal(err)
			}
			b.Logf("%s: %.1f B/key on disk", tc.name, float64(s.DiskBytes())/n)
			rng := rand.New(rand.NewPCG(1, 2))
			tx := s.Begin()
			defer tx.Abort()
			b.ResetTimer()
			for b.Loop() {
				if _, ok, err := tx.Parent(intKey(rng.Int64N(n))); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

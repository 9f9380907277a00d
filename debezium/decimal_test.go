package debezium

import (
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestAppendMagnitude: the allocation-free conversion equals math/big's
// for random two's complement integers of 1 to 64 bytes (seeded).
func TestAppendMagnitude(t *testing.T) {
	const seed = 23
	r := rand.New(rand.NewPCG(seed, seed))
	for i := 0; i < 20000; i++ {
		b := make([]byte, 1+r.IntN(smallDecimalBytes))
		for j := range b {
			b[j] = byte(r.UintN(256))
		}
		if i%7 == 0 {
			for j := range b[:len(b)/2] {
				b[j] = 0xff * byte(i%2)
			}
		}
		neg := b[0]&0x80 != 0
		z := new(big.Int).SetBytes(b)
		if neg {
			z.Sub(z, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
			z.Neg(z)
		}
		want := z.String()
		if got := string(appendMagnitude(nil, b, neg)); got != want {
			t.Fatalf("seed %d, %x: %s, want %s", seed, b, got, want)
		}
	}
	digits, b := make([]byte, 0, 200), []byte{0x80, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	if n := testing.AllocsPerRun(100, func() { appendMagnitude(digits[:0], b, true) }); n > 0 {
		t.Errorf("%.0f allocations", n)
	}
}

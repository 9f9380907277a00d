package skew

import "github.com/cdcjoin/cdcjoin/keyedlog"

// SaltOf returns the salt of a child key among salts: FNV-1a 32 of the
// encoded key, modulo salts.
func SaltOf(childKey []byte, salts int) uint16 {
	h := uint32(2166136261)
	for _, c := range childKey {
		h ^= uint32(c)
		h *= 16777619
	}
	return uint16(h % uint32(salts))
}

// SaltPartition returns the keyed partition of joinKey's replica salt: the
// partitions after the key's own, in turn, so that up to n salts land on
// n different partitions (salt 0 on the key's own).
func SaltPartition(joinKey []byte, salt uint16, n int32) int32 {
	return (keyedlog.Partition(joinKey, n) + int32(salt)%n) % n
}

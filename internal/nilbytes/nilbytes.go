// Package nilbytes encodes a byte string that may be nil, for the records
// and state values the skew and stage packages persist: uvarint(len+1)
// then the bytes; nil is a single 0 (so nil and empty differ). The format
// is stored on disk and in Kafka: it must not change.
package nilbytes

import "encoding/binary"

// Append appends b's encoding to dst and returns the extended slice.
func Append(dst, b []byte) []byte {
	if b == nil {
		return append(dst, 0)
	}
	return append(binary.AppendUvarint(dst, uint64(len(b))+1), b...)
}

// Read decodes one string from the front of b and returns it (nil when
// nil was encoded; otherwise a full-capacity-limited subslice of b, not a
// copy) and the rest of b. ok is false when b does not start with a
// complete encoding (rest is then not meaningful).
func Read(b []byte) (v, rest []byte, ok bool) {
	l, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, b, false
	}
	b = b[n:]
	if l == 0 {
		return nil, b, true
	}
	if uint64(len(b)) < l-1 {
		return nil, b, false
	}
	return b[: l-1 : l-1], b[l-1:], true
}

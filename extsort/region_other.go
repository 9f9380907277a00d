//go:build !unix

package extsort

// allocRegion returns n bytes from the Go heap (no anonymous mappings on
// this platform).
func allocRegion(n int) ([]byte, error) { return make([]byte, n), nil }

// freeRegion drops the region (the garbage collector reclaims it).
func freeRegion([]byte) {}

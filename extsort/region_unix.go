//go:build unix

package extsort

import (
	"fmt"
	"syscall"
)

// allocRegion returns n bytes of anonymous memory outside the Go heap: the
// garbage collector neither scans it nor counts it when sizing the heap, so
// a sort buffer costs its size in RSS (its touched pages), not twice that.
func allocRegion(n int) ([]byte, error) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: extsort: allocate %d bytes: %w", n, err)
	}
	return b, nil
}

// freeRegion returns a region to the OS.
func freeRegion(b []byte) {
	if b != nil {
		syscall.Munmap(b)
	}
}

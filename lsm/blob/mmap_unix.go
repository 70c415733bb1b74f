//go:build unix

package blob

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// mmapBytes maps n bytes of anonymous private memory, outside the Go heap.
func mmapBytes(n int) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("blob: mapping %d bytes for the blob cache: %w", n, err)
	}
	return b, nil
}

func munmapBytes(b []byte) {
	if err := unix.Munmap(b); err != nil {
		panic(fmt.Sprintf("blob: munmap: %v", err)) // a broken invariant: we mapped it
	}
}

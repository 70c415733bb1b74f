//go:build unix

package cache

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmapBytes maps n bytes of anonymous private memory, outside the Go heap.
func mmapBytes(n int) ([]byte, error) {
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("cache: mapping %d bytes for the block cache: %w", n, err)
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// mmapSlab maps a slab of slabSize bytes aligned to slabSize (a huge
// page), and asks for huge pages where the system has them. It maps twice
// the size and unmaps the unaligned head and tail.
func mmapSlab() ([]byte, error) {
	b, err := mmapBytes(2 * slabSize)
	if err != nil {
		return nil, err
	}
	p := uintptr(unsafe.Pointer(&b[0]))
	head := int((slabSize - p%slabSize) % slabSize)
	if head > 0 {
		munmapBytes(b[:head])
	}
	if tail := len(b) - head - slabSize; tail > 0 {
		munmapBytes(b[head+slabSize:])
	}
	s := b[head : head+slabSize : head+slabSize]
	adviseHugePages(s)
	return s, nil
}

// munmapBytes unmaps b, all or part of a mapping of mmapBytes.
func munmapBytes(b []byte) {
	if err := unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b))); err != nil {
		panic(fmt.Sprintf("cache: munmap: %v", err)) // a broken invariant: we mapped it
	}
}

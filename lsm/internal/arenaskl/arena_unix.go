//go:build unix

package arenaskl

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// poisonOnRelease: Release keeps the mapping's address range reserved and
// inaccessible instead of unmapping it (see SetPoisonOnRelease).
var poisonOnRelease atomic.Bool

// SetPoisonOnRelease makes Release (while on) turn an arena's memory
// inaccessible rather than unmap it: the physical pages are freed, but the
// addresses are never mapped again, so that any access after Release faults
// at once instead of reading a newer arena mapped at the same address. For
// tests; it returns the previous setting. Without mmap it does nothing.
func SetPoisonOnRelease(on bool) bool { return poisonOnRelease.Swap(on) }

// allocBuffer maps n bytes of anonymous private memory, outside the Go
// heap. The pages are zero and cost nothing until touched.
func allocBuffer(n int) []byte {
	if n == 0 {
		return nil
	}
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		// As make would when out of memory: the memtable cannot exist.
		panic(fmt.Sprintf("arenaskl: mapping a %d-byte arena: %v", n, err))
	}
	return unsafe.Slice((*byte)(p), n)
}

// freeBuffer unmaps a buffer of allocBuffer.
func freeBuffer(b []byte) {
	if len(b) == 0 {
		return
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	if poisonOnRelease.Load() {
		if err := unix.Madvise(b, unix.MADV_DONTNEED); err != nil {
			panic(fmt.Sprintf("arenaskl: madvise: %v", err))
		}
		if err := unix.Mprotect(b, unix.PROT_NONE); err != nil {
			panic(fmt.Sprintf("arenaskl: mprotect: %v", err))
		}
		return
	}
	if err := unix.MunmapPtr(p, uintptr(len(b))); err != nil {
		panic(fmt.Sprintf("arenaskl: munmap: %v", err)) // a broken invariant: we mapped it
	}
}

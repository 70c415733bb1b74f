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

// hugePageBytes is the size of a transparent huge page on the systems that
// have them (x86-64 and arm64 with 4 KiB base pages).
const hugePageBytes = 2 << 20

// allocBuffer maps n bytes of anonymous private memory, outside the Go
// heap. The pages are zero and cost nothing until touched.
//
// A buffer of at least one huge page starts on a huge-page boundary and is
// advised for transparent huge pages (adviseHugePages): the memtable writes
// its arena front to back, so without them every 4 KiB page faults once on
// the writer's path (a fault costs several microseconds in a virtual
// machine; 16k of them per 64 MiB arena); with them one fault maps 2 MiB.
// Because the arena fills sequentially, the resident memory it costs is at
// most one huge page above what has been written. The alignment is what lets
// the kernel use huge pages from the first byte: it maps twice the size
// and unmaps the unaligned head and tail (the virtual address space only).
func allocBuffer(n int) []byte {
	if n == 0 {
		return nil
	}
	if n < hugePageBytes {
		return mmapAnon(n)
	}
	// Unmapping works in whole pages: the kept range ends on one.
	pageBytes := unix.Getpagesize()
	mapped := (n + pageBytes - 1) / pageBytes * pageBytes
	b := mmapAnon(mapped + hugePageBytes)
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	head := int((hugePageBytes - p%hugePageBytes) % hugePageBytes)
	if head > 0 {
		munmap(b[:head])
	}
	if tail := len(b) - head - mapped; tail > 0 {
		munmap(b[head+mapped:])
	}
	b = b[head : head+n : head+n]
	adviseHugePages(b)
	return b
}

// mmapAnon maps n bytes of anonymous private memory.
func mmapAnon(n int) []byte {
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		// As make would when out of memory: the memtable cannot exist.
		panic(fmt.Sprintf("arenaskl: mapping a %d-byte arena: %v", n, err))
	}
	return unsafe.Slice((*byte)(p), n)
}

// munmap unmaps b, all or part of a mapping of mmapAnon.
func munmap(b []byte) {
	if err := unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b))); err != nil {
		panic(fmt.Sprintf("arenaskl: munmap: %v", err)) // a broken invariant: we mapped it
	}
}

// freeBuffer unmaps a buffer of allocBuffer.
func freeBuffer(b []byte) {
	if len(b) == 0 {
		return
	}
	if poisonOnRelease.Load() {
		if err := unix.Madvise(b, unix.MADV_DONTNEED); err != nil {
			panic(fmt.Sprintf("arenaskl: madvise: %v", err))
		}
		if err := unix.Mprotect(b, unix.PROT_NONE); err != nil {
			panic(fmt.Sprintf("arenaskl: mprotect: %v", err))
		}
		return
	}
	munmap(b)
}

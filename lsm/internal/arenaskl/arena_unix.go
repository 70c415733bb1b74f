//go:build unix

package arenaskl

import (
	"fmt"
	"sync/atomic"

	"github.com/cairnkv/cairn/lsm/internal/offheap"
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

// allocBuffer maps n bytes outside the Go heap. An arena of a huge page or
// more is aligned and advised for huge pages (offheap.MapAligned): the
// memtable writes its arena front to back, so without them every 4 KiB page
// faults once on the writer's path; with them one fault maps 2 MiB. Because
// the arena fills sequentially, the resident memory it costs is at most one
// huge page above what has been written.
func allocBuffer(n int) []byte {
	if n == 0 {
		return nil
	}
	b, err := offheap.MapAligned(n)
	if err != nil {
		// As make would when out of memory: the memtable cannot exist.
		panic(fmt.Sprintf("arenaskl: a %d-byte arena: %v", n, err))
	}
	return b
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
	offheap.Unmap(b)
}

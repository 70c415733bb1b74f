package arenaskl

import (
	"errors"
	"math"
	"sync/atomic"
	"unsafe"
)

// ErrArenaFull is returned by Add when the arena has no room left for the
// node, key and value. The memtable owning the skiplist is then full and must
// be rotated; the skiplist itself stays consistent and readable.
var ErrArenaFull = errors.New("arenaskl: arena full")

// MaxArenaSize is the largest arena capacity: offsets are uint32.
const MaxArenaSize = math.MaxUint32

// Arena is a fixed-size bump allocator over one buffer allocated up front.
// Allocation is lock-free (one atomic add); nothing is ever freed
// individually: the whole arena is released at once (Release).
//
// On unix the buffer is an anonymous private mapping, outside the Go heap:
// the garbage collector neither counts it towards its heap goal (GOGC would
// otherwise keep as much again in headroom) nor zeroes it (fresh anonymous
// pages are zero, and the kernel provides them as they are first touched).
// Elsewhere it is a Go slice. Either way it must be released with Release
// once nothing reads the arena any more; an arena never released keeps its
// mapping until the process exits (LiveBytes counts it).
//
// The arena holds no Go pointers, only bytes and uint32 offsets into itself,
// so the garbage collector never scans it however many nodes it holds.
//
// Offset 0 is never handed out, so a zero offset means "no node".
type Arena struct {
	// n is the offset of the next free byte. It only grows; once an
	// allocation overflows the buffer it may exceed len(buf) (it is 64 bits
	// wide so that it cannot wrap). Invariant: n >= 1.
	n atomic.Uint64
	// buf is the arena's memory. Its length never changes until Release,
	// which sets it to nil.
	buf []byte
	// capacity is len(buf) before Release.
	capacity uint32
	// released is set by Release.
	released atomic.Bool
}

// liveBytes is the capacity of the arenas allocated and not yet released,
// process-wide.
var liveBytes atomic.Int64

// LiveBytes returns the total capacity of the arenas allocated and not yet
// released in this process: a leak check.
func LiveBytes() int64 { return liveBytes.Load() }

// NewArena returns an arena of capacityBytes bytes. The buffer is allocated
// immediately (mapped, on unix: its pages cost memory only once touched).
// It panics if capacityBytes is negative or above MaxArenaSize: the
// capacity is a configuration value validated by the caller; and if the
// memory cannot be mapped, like make would when out of memory.
func NewArena(capacityBytes int) *Arena {
	if capacityBytes < 0 || uint64(capacityBytes) > MaxArenaSize {
		panic("arenaskl: arena capacity out of range")
	}
	// Mapped memory is page-aligned, make([]byte, n) memory at least
	// 8-byte aligned for n >= 8: more than the 4-byte alignment nodes need.
	a := &Arena{buf: allocBuffer(capacityBytes), capacity: uint32(capacityBytes)}
	a.n.Store(1)
	liveBytes.Add(int64(capacityBytes))
	return a
}

// Release frees the arena's memory. Nothing may read or write the arena, its
// skiplist or any slice they returned once Release is called: with a mapped
// buffer, such an access faults (or, once the address is mapped again,
// reads another arena). The caller guarantees it by reference counting
// (lsm's memTable). Release panics if called twice: freeing a mapping twice
// could unmap memory that has been mapped again since.
func (a *Arena) Release() {
	if a.released.Swap(true) {
		panic("arenaskl: arena released twice")
	}
	buf := a.buf
	a.buf = nil
	liveBytes.Add(-int64(a.capacity))
	freeBuffer(buf)
}

// Released reports whether Release was called.
func (a *Arena) Released() bool { return a.released.Load() }

// Size returns the number of bytes allocated so far, including offset 0 and
// alignment padding, capped at Capacity.
func (a *Arena) Size() uint32 {
	n := a.n.Load()
	if n > uint64(a.capacity) {
		return a.capacity
	}
	return uint32(n)
}

// Capacity returns the size of the arena's buffer. Size and Capacity may be
// called after Release.
func (a *Arena) Capacity() uint32 { return a.capacity }

// alloc reserves size bytes aligned to align (a power of two) and returns
// their offset. overflow is a number of bytes past the allocation that must
// still lie inside the buffer: a node's tower is truncated to its height, but
// the node is accessed through a *node whose type spans the full tower, and
// that whole struct must stay inside the buffer (checkptr verifies it).
func (a *Arena) alloc(size, align, overflow uint32) (uint32, error) {
	padded := uint64(size) + uint64(align) - 1
	newN := a.n.Add(padded)
	if newN+uint64(overflow) > uint64(len(a.buf)) {
		return 0, ErrArenaFull
	}
	offset := (uint32(newN-padded) + align - 1) &^ (align - 1)
	return offset, nil
}

// bytes returns the size bytes at offset, with the capacity clipped so that
// an append by the caller cannot overwrite what follows.
func (a *Arena) bytes(offset, size uint32) []byte {
	if offset == 0 {
		return nil
	}
	return a.buf[offset : offset+size : offset+size]
}

// pointer returns the address of the byte at offset, or nil for offset 0.
func (a *Arena) pointer(offset uint32) unsafe.Pointer {
	if offset == 0 {
		return nil
	}
	return unsafe.Add(unsafe.Pointer(unsafe.SliceData(a.buf)), offset)
}

// offsetOf returns the arena offset of p, which must point into the arena, or
// 0 for nil.
func (a *Arena) offsetOf(p unsafe.Pointer) uint32 {
	if p == nil {
		return 0
	}
	return uint32(uintptr(p) - uintptr(unsafe.Pointer(unsafe.SliceData(a.buf))))
}

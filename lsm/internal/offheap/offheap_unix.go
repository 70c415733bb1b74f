//go:build unix

package offheap

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Map maps n (> 0) bytes of anonymous private memory. The pages are zero
// and cost nothing until touched.
func Map(n int) ([]byte, error) {
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("offheap: mapping %d bytes: %w", n, err)
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// MapAligned is Map for a buffer that is written or read whole: one of at
// least HugePageBytes starts on a huge-page boundary and is advised for
// transparent huge pages, so that one fault maps 2 MiB instead of 4 KiB (a
// fault costs several microseconds in a virtual machine: 16k of them for
// 64 MiB of 4 KiB pages). The alignment is what lets the kernel use huge
// pages from the first byte: it maps HugePageBytes more than needed and
// unmaps the unaligned head and tail (address space only; nothing was
// touched).
func MapAligned(n int) ([]byte, error) {
	if n < HugePageBytes {
		return Map(n)
	}
	// Unmapping works in whole pages: the kept range ends on one.
	pageBytes := unix.Getpagesize()
	mapped := (n + pageBytes - 1) / pageBytes * pageBytes
	b, err := Map(mapped + HugePageBytes)
	if err != nil {
		return nil, err
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	head := int((HugePageBytes - p%HugePageBytes) % HugePageBytes)
	if head > 0 {
		Unmap(b[:head])
	}
	if tail := len(b) - head - mapped; tail > 0 {
		Unmap(b[head+mapped:])
	}
	b = b[head : head+n : head+n]
	adviseHugePages(b)
	return b, nil
}

// Unmap unmaps b, all or part of a buffer of Map or MapAligned (the whole
// pages it covers). b must not be used after.
func Unmap(b []byte) {
	if len(b) == 0 {
		return
	}
	if err := unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b))); err != nil {
		panic(fmt.Sprintf("offheap: munmap: %v", err)) // a broken invariant: we mapped it
	}
}

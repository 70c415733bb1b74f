package arenaskl

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// smapsVmFlags returns the VmFlags line of the mapping of /proc/self/smaps
// that starts at addr.
func smapsVmFlags(t *testing.T, addr uintptr) string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	prefix := fmt.Sprintf("%x-", addr)
	in := false
	for sc.Scan() {
		line := sc.Text()
		// A mapping's header: "start-end perms offset dev inode path".
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			in = strings.HasPrefix(line, prefix)
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return line
		}
	}
	t.Fatalf("no mapping at %#x in /proc/self/smaps", addr)
	return ""
}

// TestArenaHugePageAligned: a memtable-sized arena starts on a 2 MiB
// boundary and its mapping carries the huge-page advice (VmFlags "hg"), so
// that the kernel can back it with transparent huge pages from its first
// byte. The old arena was a plain page-aligned mapping without the advice.
func TestArenaHugePageAligned(t *testing.T) {
	for _, size := range []int{hugePageBytes, 64 << 20, 64<<20 + 12345} {
		a := NewArena(size)
		p := uintptr(unsafe.Pointer(unsafe.SliceData(a.buf)))
		if p%hugePageBytes != 0 {
			t.Fatalf("arena of %d bytes at %#x: not 2 MiB aligned", size, p)
		}
		flags := smapsVmFlags(t, p)
		if !strings.Contains(" "+strings.TrimPrefix(flags, "VmFlags:")+" ", " hg ") {
			t.Fatalf("arena of %d bytes: no huge-page advice: %q", size, flags)
		}
		a.Release()
	}
	// A small arena is left as it is (page aligned, no advice): aligning
	// it would reserve a huge page of address space per test arena.
	a := NewArena(1 << 16)
	defer a.Release()
	if p := uintptr(unsafe.Pointer(unsafe.SliceData(a.buf))); p%4096 != 0 {
		t.Fatalf("small arena at %#x: not page aligned", p)
	}
}

// TestArenaFillFaults: filling a 64 MiB arena front to back, as a memtable
// does, faults far less than once per 4 KiB page where transparent huge
// pages can be had (the old arena faulted 16384 times). The writer's own
// thread is counted (RUSAGE_THREAD), so other goroutines do not disturb it.
func TestArenaFillFaults(t *testing.T) {
	thp, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(thp), "[never]") {
		t.Skipf("no transparent huge pages here (%q, %v)", thp, err)
	}
	const size = 64 << 20
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	minflt := func() int64 {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
			t.Fatal(err)
		}
		return ru.Minflt
	}
	a := NewArena(size)
	defer a.Release()
	before := minflt()
	for off := uint32(4096); off < size; off += 4096 {
		*(*byte)(a.pointer(off)) = 1
	}
	faults := minflt() - before
	t.Logf("%d faults filling a %d-byte arena", faults, size)
	if pages := int64(size / 4096); faults > pages/4 {
		t.Fatalf("%d faults filling a %d-byte arena (%d pages): no huge pages", faults, size, pages)
	}
}

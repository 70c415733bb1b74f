package arenaskl

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/cairnkv/cairn/lsm/internal/offheap"
	"golang.org/x/sys/unix"
)

// smapsField returns the line of the mapping of /proc/self/smaps that
// starts at addr whose name is field ("VmFlags", "Rss").
func smapsField(t *testing.T, addr uintptr, field string) string {
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
		if in && strings.HasPrefix(line, field+":") {
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
	for _, size := range []int{offheap.HugePageBytes, 64 << 20, 64<<20 + 12345} {
		a := NewArena(size)
		p := uintptr(unsafe.Pointer(unsafe.SliceData(a.buf)))
		if p%offheap.HugePageBytes != 0 {
			t.Fatalf("arena of %d bytes at %#x: not 2 MiB aligned", size, p)
		}
		flags := smapsField(t, p, "VmFlags")
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
// Huge pages cost no memory beyond the one being filled: an arena written
// up to some offset is resident up to the next 2 MiB boundary at most.
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
	const part = 10<<20 + 12345 // not on a huge-page boundary
	for off := uint32(4096); off < part; off += 4096 {
		*(*byte)(a.pointer(off)) = 1
	}
	rss := smapsField(t, uintptr(unsafe.Pointer(unsafe.SliceData(a.buf))), "Rss")
	var rssKiB int64
	if _, err := fmt.Sscanf(strings.TrimPrefix(rss, "Rss:"), "%d kB", &rssKiB); err != nil {
		t.Fatalf("smaps %q: %v", rss, err)
	}
	if limit := int64(part+offheap.HugePageBytes) >> 10; rssKiB > limit {
		t.Fatalf("arena written to %d bytes: %d KiB resident, above %d KiB", part, rssKiB, limit)
	}
	for off := uint32(part); off < size; off += 4096 {
		*(*byte)(a.pointer(off)) = 1
	}
	faults := minflt() - before
	t.Logf("%d faults filling a %d-byte arena; %d KiB resident when written to %d bytes", faults, size, rssKiB, part)
	if pages := int64(size / 4096); faults > pages/4 {
		t.Fatalf("%d faults filling a %d-byte arena (%d pages): no huge pages", faults, size, pages)
	}
}

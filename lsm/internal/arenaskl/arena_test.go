package arenaskl

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

// TestArenaReleaseCounts: LiveBytes counts an arena from NewArena to
// Release, Size and Capacity still answer after Release, a second Release
// panics, and allocation from a released arena reports it full.
func TestArenaReleaseCounts(t *testing.T) {
	before := LiveBytes()
	a := NewArena(1 << 20)
	s := NewSkiplist(a)
	if err := s.Add(ikey("a", 1, 1), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got := LiveBytes() - before; got != 1<<20 {
		t.Fatalf("LiveBytes grew by %d, want %d", got, 1<<20)
	}
	size := a.Size()
	a.Release()
	if got := LiveBytes() - before; got != 0 {
		t.Fatalf("LiveBytes %d above the start after Release", got)
	}
	if !a.Released() || a.Size() != size || a.Capacity() != 1<<20 {
		t.Fatalf("after Release: released %v size %d (was %d) capacity %d", a.Released(), a.Size(), size, a.Capacity())
	}
	if _, err := a.alloc(8, 4, 0); err != ErrArenaFull {
		t.Fatalf("alloc from a released arena: %v, want ErrArenaFull", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("a second Release did not panic")
			}
		}()
		a.Release()
	}()
}

var sinkByte byte

// heapObjectBytes is the Go heap's live-and-dead object bytes.
func heapObjectBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// TestArenaOffHeap: on unix a filled arena is not Go heap: the heap does
// not grow by its size (so GOGC adds no headroom for it) and nothing
// zeroes it but the kernel. On the old make([]byte) arena the heap grew by
// the arena's size.
func TestArenaOffHeap(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" || runtime.GOOS == "js" || runtime.GOOS == "wasip1" {
		t.Skip("no mmap: the arena is Go heap")
	}
	const size = 64 << 20
	runtime.GC()
	before := heapObjectBytes()
	a := NewArena(size)
	s := NewSkiplist(a)
	val := make([]byte, 1000)
	for i := 0; ; i++ {
		if err := s.Add(ikey(fmt.Sprintf("key%08d", i), 1, 1), val); err == ErrArenaFull {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if a.Size() < size/2 {
		t.Fatalf("arena only %d bytes full", a.Size())
	}
	grew := heapObjectBytes() - before
	runtime.KeepAlive(s)
	if grew > size/4 {
		t.Fatalf("Go heap grew by %d bytes with a %d-byte arena: the arena is on the heap", grew, size)
	}
	a.Release()
}

// TestArenaPoisonFaults: with SetPoisonOnRelease a slice kept past Release
// faults when read, rather than reading whatever is mapped there next;
// lsm's tests run with it on so that a memtable read after its release
// cannot go unnoticed.
func TestArenaPoisonFaults(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" || runtime.GOOS == "js" || runtime.GOOS == "wasip1" {
		t.Skip("no mmap")
	}
	defer SetPoisonOnRelease(SetPoisonOnRelease(true))
	a := NewArena(1 << 16)
	s := NewSkiplist(a)
	if err := s.Add(ikey("k", 1, 1), []byte("value")); err != nil {
		t.Fatal(err)
	}
	_, v, ok := s.Get(ikey("k", 2, 1))
	if !ok || string(v) != "value" {
		t.Fatalf("Get: %q %v", v, ok)
	}
	a.Release()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	faulted := func() (faulted bool) {
		defer func() { faulted = recover() != nil }()
		sinkByte = v[0]
		return false
	}()
	if !faulted {
		t.Fatal("reading a released arena did not fault")
	}
}

// BenchmarkArenaNewTouchRelease: the memory cost of a 64 MiB memtable
// arena's life without the skiplist work: allocate it, write one byte per
// 4 KiB page (as a full memtable does), release it. With mmap the kernel
// zeroes each page at its first touch and munmap frees them; with make
// the runtime zeroes the whole buffer up front.
func BenchmarkArenaNewTouchRelease(b *testing.B) {
	const size = 64 << 20
	b.SetBytes(size)
	for b.Loop() {
		a := NewArena(size)
		for off := uint32(4096); off < size; off += 4096 {
			*(*byte)(a.pointer(off)) = 1
		}
		a.Release()
	}
}

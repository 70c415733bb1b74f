package lsm

import (
	"bytes"
	"fmt"
	"runtime"
	"runtime/metrics"
	"testing"

	"github.com/cairnkv/cairn/lsm/vfs"
)

// heapObjectBytes is the Go heap's object bytes (live and not yet swept).
func heapObjectBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// TestMemTablesOffHeap: memtables holding ~20 MiB of writes add far less
// than that to the Go heap (on unix, where arenas are mapped), so the
// garbage collector's GOGC headroom does not double them. With arenas on
// the heap it grew by more than their capacity.
func TestMemTablesOffHeap(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" || runtime.GOOS == "js" || runtime.GOOS == "wasip1" {
		t.Skip("no mmap: arenas are Go heap")
	}
	// A real directory: an in-memory FS would keep the WAL on the heap.
	o := &Options{FS: vfs.Default, MemTableSizeBytes: 64 << 20}
	d := mustOpen(t, t.TempDir(), o)
	defer d.Close()
	runtime.GC()
	before := heapObjectBytes()
	val := bytes.Repeat([]byte("v"), 100)
	// 20 MiB of entries fill memtables of 256 KiB .. 8 MiB and part of a
	// 16 MiB one: less than the half of MemTableSizeBytes queued that
	// starts a flush, so all of it stays in memtables.
	var key []byte
	for i := 0; i < 160000; i++ {
		key = fmt.Appendf(key[:0], "key%010d", i)
		if err := d.Put(key, val, NoSync); err != nil {
			t.Fatal(err)
		}
	}
	m := d.Metrics()
	if m.Flushes != 0 || m.MemTableBytes < 16<<20 {
		t.Fatalf("%d flushes, %d bytes in memtables: the test's premise is off", m.Flushes, m.MemTableBytes)
	}
	runtime.GC()
	grew := heapObjectBytes() - before
	t.Logf("%d bytes in %d memtables; Go heap grew by %d bytes", m.MemTableBytes, m.MemTables, grew)
	if grew > m.MemTableBytes/4 {
		t.Fatalf("Go heap grew by %d bytes with %d bytes in memtables: the arenas are on the heap", grew, m.MemTableBytes)
	}
}

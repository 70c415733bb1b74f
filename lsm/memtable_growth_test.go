package lsm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cairnkv/cairn/lsm/vfs"
)

// TestMemTableGrowth: memtables start at initialMemTableBytes and double up
// to MemTableSizeBytes, and the small first ones are not flushed one by one
// but together, once the queue holds half a full memtable. Every write
// reads back, also after a reopen.
func TestMemTableGrowth(t *testing.T) {
	fs := vfs.NewMem()
	o := &Options{FS: fs, MemTableSizeBytes: 4 << 20}
	d := mustOpen(t, "db", o)
	var sizes []int64
	note := func() {
		d.mu.Lock()
		if n := d.mu.mem.capacityBytes; len(sizes) == 0 || sizes[len(sizes)-1] != n {
			sizes = append(sizes, n)
		}
		d.mu.Unlock()
	}
	note()
	val := bytes.Repeat([]byte("v"), 200)
	const n = 12000 // ~2.6 MiB of entries: memtables of 256 KiB .. 2 MiB
	for i := 0; i < n; i++ {
		if err := d.Put(fmt.Appendf(nil, "key%06d", i), val, NoSync); err != nil {
			t.Fatal(err)
		}
		note()
	}
	want := []int64{256 << 10, 512 << 10, 1 << 20, 2 << 20}
	if len(sizes) < len(want) {
		t.Fatalf("memtable sizes %v, want them to start with %v", sizes, want)
	}
	for i, w := range want {
		if sizes[i] != w {
			t.Fatalf("memtable sizes %v, want them to start with %v", sizes, want)
		}
	}
	// 256K + 512K + 1M queued reach half of 4 MiB only with the 2 MiB one:
	// at most one flush has run, into one table, for three memtables.
	m := d.Metrics()
	if m.Flushes > 1 {
		t.Fatalf("%d flushes for memtables of sizes %v: the small ones were flushed one by one", m.Flushes, sizes)
	}
	check := func(d *DB) {
		t.Helper()
		for i := 0; i < n; i += 7 {
			v, err := d.Get(fmt.Appendf(nil, "key%06d", i))
			if err != nil || !bytes.Equal(v, val) {
				t.Fatalf("key %d: %q, %v", i, v, err)
			}
		}
	}
	check(d)
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	// After a Flush the memtable starts small again.
	d.mu.Lock()
	after := d.mu.mem.capacityBytes
	d.mu.Unlock()
	if after != initialMemTableBytes {
		t.Fatalf("memtable of %d bytes after Flush, want %d", after, initialMemTableBytes)
	}
	check(d)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = mustOpen(t, "db", o)
	defer d.Close()
	check(d)
}

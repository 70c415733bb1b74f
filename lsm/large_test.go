package lsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cairnkv/cairn/lsm/vfs"
)

// TestValueLargerThanMemTable: a value bigger than the memtable gets a
// memtable of its own, survives flush and reopen, and one past the limit is
// refused without side effects.
func TestValueLargerThanMemTable(t *testing.T) {
	fs := vfs.NewMem()
	opts := &Options{FS: fs, MemTableSizeBytes: 1 << 20}
	d := mustOpen(t, "db", opts)
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16) // 3 MiB
	if err := d.Put([]byte("small"), []byte("s"), Sync); err != nil {
		t.Fatal(err)
	}
	if err := d.Put([]byte("big"), big, Sync); err != nil {
		t.Fatal(err)
	}
	if v, err := d.Get([]byte("big")); err != nil || !bytes.Equal(v, big) {
		t.Fatalf("Get(big) = %d bytes, %v", len(v), err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = mustOpen(t, "db", opts)
	defer d.Close()
	if v, err := d.Get([]byte("big")); err != nil || !bytes.Equal(v, big) {
		t.Fatalf("after reopen Get(big) = %d bytes, %v", len(v), err)
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	if v, err := d.Get([]byte("big")); err != nil || !bytes.Equal(v, big) {
		t.Fatalf("after compaction Get(big) = %d bytes, %v", len(v), err)
	}
	// Past the limit: refused, nothing written.
	b := NewBatch()
	b.Set([]byte("k"), []byte("v"))
	b.Set([]byte("huge"), hugeSlice())
	if err := d.Write(b, Sync); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("oversized value: Write = %v, want ErrInvalidArgument", err)
	}
	if _, err := d.Get([]byte("k")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused batch wrote k: %v", err)
	}
}

// hugeSlice returns a slice one byte longer than MaxValueSize. It is
// allocated lazily by the OS (zero pages), so it costs no real memory
// unless written.
func hugeSlice() []byte { return make([]byte, MaxValueSize+1) }

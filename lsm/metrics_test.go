package lsm

import (
	"fmt"
	"testing"

	"github.com/cairnkv/cairn/lsm/vfs"
)

// TestWriteAmplificationCountsBytesAtOpen: a DB opened on data it did not
// ingest (a restart, a restored checkpoint) and then compacting it reports
// a write amplification relative to that data too, not millions over the
// few bytes written since Open.
func TestWriteAmplificationCountsBytesAtOpen(t *testing.T) {
	fs := vfs.NewMem()
	o := testOptions(fs)
	d := mustOpen(t, "src", o)
	val := make([]byte, 100)
	for i := range 5000 {
		if err := d.Put([]byte(fmt.Sprintf("key%06d", i)), val, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	m := d.Metrics()
	if m.BytesAtOpen != 0 || m.BytesIngested == 0 || m.WriteAmplification < 1 {
		t.Fatalf("fresh DB: at open %d, ingested %d, write amp %.2f", m.BytesAtOpen, m.BytesIngested, m.WriteAmplification)
	}
	if err := d.Checkpoint("cp"); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	// Open the checkpoint (as a restore does), write one key, compact
	// everything.
	d = mustOpen(t, "cp", o)
	defer d.Close()
	m = d.Metrics()
	var size int64
	for _, l := range m.Levels {
		size += l.SizeBytes
	}
	if m.BytesAtOpen != size || size == 0 {
		t.Fatalf("bytes at open %d, want the tables' size %d", m.BytesAtOpen, size)
	}
	if err := d.Put([]byte("one"), []byte("more"), nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	m = d.Metrics()
	if m.CompactionBytesWritten < size/2 {
		t.Fatalf("the compaction wrote %d bytes of %d: it did not rewrite the data", m.CompactionBytesWritten, size)
	}
	if m.WriteAmplification > 5 {
		t.Fatalf("write amp %.2f after compacting %d bytes opened with (%d written, %d ingested since open)",
			m.WriteAmplification, size, m.CompactionBytesWritten+m.FlushBytes+m.WALBytes, m.BytesIngested)
	}
}

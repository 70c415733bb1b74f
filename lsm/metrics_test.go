package lsm

import (
	"fmt"
	"testing"

	"github.com/cairnkv/cairn/lsm/version"
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

// TestPendingCompactionBytes checks the estimate on versions built by
// hand: nothing over target owes nothing; an L0 at its threshold owes
// itself and the base level; a level over its target owes its excess and
// the excess's share of the level below, and passes the excess down.
func TestPendingCompactionBytes(t *testing.T) {
	o := &Options{L0CompactionThreshold: 2}
	files := func(sizes ...uint64) []*version.FileMetadata {
		var fs []*version.FileMetadata
		for _, s := range sizes {
			fs = append(fs, &version.FileMetadata{Size: s})
		}
		return fs
	}
	var targets [version.NumLevels]int64
	targets[5], targets[6] = 100, 1000
	for _, c := range []struct {
		name   string
		levels map[int][]*version.FileMetadata
		want   int64
	}{
		{"within targets", map[int][]*version.FileMetadata{0: files(10), 5: files(100), 6: files(1000)}, 0},
		// L0 (30) merges with L5 (100); L5 is then 130, 30 over: it
		// rewrites 30 × (1000/130 + 1) = 260 (rounded down).
		{"L0 at threshold", map[int][]*version.FileMetadata{0: files(10, 20), 5: files(100), 6: files(1000)}, 30 + 100 + 260},
		// L5 150 of 100: 50 × (600/150 + 1) = 250; L6 is never pushed.
		{"L5 over", map[int][]*version.FileMetadata{5: files(150), 6: files(600)}, 250},
		// L4 has no target: its 40 move into L5 (190 of 100): 40 × (150/40+1)
		// = 190, then 90 × (600/190 + 1) = 374 (374.2).
		{"above base", map[int][]*version.FileMetadata{4: files(40), 5: files(150), 6: files(600)}, 190 + 374},
	} {
		v := &version.Version{}
		for l, fs := range c.levels {
			v.Levels[l] = fs
		}
		if got := pendingCompactionBytes(v, o, 5, targets); got != c.want {
			t.Errorf("%s: %d pending bytes, want %d", c.name, got, c.want)
		}
	}
}

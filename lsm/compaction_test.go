package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/version"
	"github.com/cairnkv/cairn/lsm/vfs"
)

func totalEntries(d *DB) (files int, entries uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.mu.versions.Current()
	for _, level := range v.Levels {
		for _, f := range level {
			files++
			entries += f.NumEntries + f.NumRangeDeletions
		}
	}
	return files, entries
}

// TestTombstonesDroppedAtBottom: once a key's deletion reaches the bottom
// level with no snapshot open, neither the value nor the tombstone is kept.
func TestTombstonesDroppedAtBottom(t *testing.T) {
	d := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer d.Close()
	for i := 0; i < 100; i++ {
		k := []byte(fmt.Sprintf("k%03d", i))
		if err := d.Put(k, bytes.Repeat(k, 10), NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if err := d.Delete([]byte(fmt.Sprintf("k%03d", i)), NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	if files, entries := totalEntries(d); files != 0 || entries != 0 {
		t.Fatalf("after deleting everything and compacting: %d files, %d entries; want none", files, entries)
	}
}

// TestSnapshotKeepsDeletedData: a snapshot older than a deletion keeps the
// deleted value alive through compactions, and sees it.
func TestSnapshotKeepsDeletedData(t *testing.T) {
	d := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer d.Close()
	put := func(k, v string) {
		if err := d.Put([]byte(k), []byte(v), NoSync); err != nil {
			t.Fatal(err)
		}
	}
	put("a", "1")
	put("b", "1")
	snap, err := d.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	put("a", "2")
	if err := d.Delete([]byte("b"), NoSync); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteRange([]byte("a"), []byte("c"), NoSync); err != nil {
		t.Fatal(err)
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"a": "1", "b": "1"} {
		if v, err := snap.Get([]byte(k)); err != nil || string(v) != want {
			t.Fatalf("snapshot Get(%s) = %q, %v; want %q", k, v, err, want)
		}
		if _, err := d.Get([]byte(k)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("latest Get(%s) = %v; want not found", k, err)
		}
	}
	if _, entries := totalEntries(d); entries == 0 {
		t.Fatal("compaction dropped data an open snapshot needs")
	}
	snap.Close()
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	if files, entries := totalEntries(d); files != 0 || entries != 0 {
		t.Fatalf("after the snapshot closed: %d files, %d entries; want none", files, entries)
	}
}

// TestLevelTargets checks the dynamic level sizes.
func TestLevelTargets(t *testing.T) {
	o, _ := (&Options{LBaseMaxBytes: 64 << 20, LevelMultiplier: 10}).withDefaults()
	mk := func(sizes map[int]uint64) *version.Version {
		var levels [version.NumLevels][]*version.FileMetadata
		n := base.FileNum(1)
		for l, size := range sizes {
			k := base.MakeInternalKey(nil, []byte(fmt.Sprintf("k%d", l)), 1, base.KindSet)
			levels[l] = []*version.FileMetadata{{FileNum: n, Size: size, Smallest: k, Largest: k}}
			n++
		}
		return version.NewVersion(levels)
	}
	for _, tc := range []struct {
		sizes      map[int]uint64
		base       int
		baseTarget int64
	}{
		{nil, 6, 64 << 20},
		{map[int]uint64{6: 10 << 20}, 6, 64 << 20},
		{map[int]uint64{6: 640 << 20}, 5, 64 << 20},
		{map[int]uint64{6: 700 << 20}, 5, 70 << 20},
		// 64 GiB / 10³ is a little over LBaseMaxBytes, and a fourth
		// division would leave it far below: L3's target ends a little
		// above LBaseMaxBytes.
		{map[int]uint64{6: 64 << 30}, 3, (64 << 30) / 1000},
	} {
		base, targets := levelTargets(mk(tc.sizes), o)
		if base != tc.base || targets[base] != tc.baseTarget {
			t.Errorf("sizes %v: base level L%d target %d; want L%d target %d", tc.sizes, base, targets[base], tc.base, tc.baseTarget)
		}
		for l := base; l < version.NumLevels-1; l++ {
			if targets[l+1]/10 != targets[l] {
				t.Errorf("sizes %v: L%d target %d is not 10× L%d's %d", tc.sizes, l+1, targets[l+1], l, targets[l])
			}
		}
	}
}

// slowTableFS delays the sync of table files, so flushes fall behind.
type slowTableFS struct{ slowSyncFS }

func (fs slowTableFS) Create(name string) (vfs.File, error) {
	f, err := fs.FS.Create(name)
	if err != nil {
		return nil, err
	}
	if ft, _, ok := base.ParseFilename(name); ok && ft == base.FileTypeTable {
		return slowSyncFile{f, fs.delay}, nil
	}
	return f, nil
}

// TestWriteStallsAreReported: when flushes cannot keep up, writes stop
// until they do, and Metrics reports it; no write is lost.
func TestWriteStallsAreReported(t *testing.T) {
	fs := slowTableFS{slowSyncFS{vfs.NewMem(), 20 * time.Millisecond}}
	opts := testOptions(fs)
	opts.MemTableStopWritesThreshold = 2
	d := mustOpen(t, "db", opts)
	defer d.Close()
	value := bytes.Repeat([]byte("v"), 4096)
	for i := 0; i < 200; i++ {
		if err := d.Put([]byte(fmt.Sprintf("k%04d", i)), value, NoSync); err != nil {
			t.Fatal(err)
		}
	}
	m := d.Metrics()
	if m.Stops == 0 || m.StopDuration <= 0 {
		t.Fatalf("no write stall reported (stops %d, %s) although flushes were 20 ms each", m.Stops, m.StopDuration)
	}
	for i := 0; i < 200; i++ {
		if _, err := d.Get([]byte(fmt.Sprintf("k%04d", i))); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCompactionOutputsBoundedGrandparentOverlap: a compaction cuts its
// output tables so that none overlaps more than maxGrandparentOverlapFiles
// target sizes of the level below: a flushed table holding a key below
// and a key above every key of the bottom level (as every table of
// cairn's state machine does, with its applied index) must not become an
// output that spans the bottom level, or the compaction that pushes it
// down later rewrites the whole bottom level at once.
func TestCompactionOutputsBoundedGrandparentOverlap(t *testing.T) {
	o := testOptions(vfs.NewMem())
	o.L0CompactionThreshold, o.L0SlowdownWritesThreshold, o.L0StopWritesThreshold = 1000, 1000, 1000
	o.LBaseMaxBytes = 1 << 30
	d := mustOpen(t, "db", o)
	defer d.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	value := make([]byte, 100)
	for i := range 5000 {
		for j := range value {
			value[j] = byte(rng.Uint32()) // incompressible
		}
		if err := d.Put([]byte(fmt.Sprintf("m%05d", i)), value, NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "z"} {
		if err := d.Put([]byte(k), []byte(k), NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}

	d.mu.Lock()
	for d.mu.compactions.running > 0 {
		d.mu.bgCond.Wait()
	}
	d.mu.compactions.running++
	v := d.mu.versions.Current()
	bottom := levelSize(v, 6)
	limit := maxGrandparentOverlapFiles * o.TargetFileSizeBytes
	if len(v.Levels[0]) != 1 || bottom <= 2*limit {
		d.mu.Unlock()
		t.Fatalf("setup: %d L0 tables, bottom level %d bytes; want one L0 table and more than %d bytes", len(v.Levels[0]), bottom, 2*limit)
	}
	c := d.newCompactionLocked(v, 0, 5, v.Levels[0])
	err := d.runCompactionLocked(c)
	d.mu.compactions.running--
	v = d.mu.versions.Current()
	v.Ref()
	d.mu.Unlock()
	defer v.Unref()
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Levels[5]) < 2 {
		t.Fatalf("L0→L5 of a table holding %q and %q wrote %d table(s); want them cut apart", "a", "z", len(v.Levels[5]))
	}
	for _, f := range v.Levels[5] {
		s, l, _ := f.UserKeyBounds()
		var overlap int64
		for _, g := range v.Overlaps(6, s, l) {
			overlap += int64(g.Size)
		}
		// A table may reach into one more grandparent than the limit.
		if overlap > limit+2*o.TargetFileSizeBytes {
			t.Errorf("L5 table %s [%q, %q] overlaps %d bytes of L6 (of %d); want at most about %d", f.FileNum, s, l, overlap, bottom, limit)
		}
	}
	for _, k := range []string{"a", "z", "m00000", "m04999"} {
		if _, err := d.Get([]byte(k)); err != nil {
			t.Errorf("Get(%q) after the compaction: %v", k, err)
		}
	}
}

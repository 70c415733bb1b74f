package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/version"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// compactionStats returns the compaction counters and the bytes
// compactions read and wrote at each level.
func compactionStats(d *DB) (compactions, written int64, read, levelWritten [version.NumLevels]int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.stats.compactions, d.mu.stats.compactionBytesWritten, d.mu.stats.levelBytesRead, d.mu.stats.levelBytesWritten
}

// TestCompactFillWritesOnce: after a fill of distinct keys into an empty
// DB, Compact writes the data once (the flush) and moves the table to the
// bottom level, instead of rewriting it through every level on the way
// down; a second Compact after overwrites and deletions merges L0 with the
// bottom level in one compaction, reading and writing no level between.
func TestCompactFillWritesOnce(t *testing.T) {
	o := testOptions(vfs.NewMem())
	o.MemTableSizeBytes = 8 << 20 // the fill stays in memtables
	d := mustOpen(t, "db", o)
	defer d.Close()
	rng := rand.New(rand.NewPCG(3, 3))
	m := model{}
	for _, i := range rng.Perm(2000) {
		k, v := fmt.Sprintf("k%05d", i), fmt.Sprintf("v%d-%s", i, bytes.Repeat([]byte("x"), 100))
		if err := d.Put([]byte(k), []byte(v), NoSync); err != nil {
			t.Fatal(err)
		}
		m[k] = v
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	compactions, written, _, _ := compactionStats(d)
	if compactions != 0 || written != 0 {
		t.Fatalf("Compact of a fresh fill ran %d compactions writing %d bytes; want the flushed table moved", compactions, written)
	}
	d.mu.Lock()
	v := d.mu.versions.Current()
	for l := 0; l < version.NumLevels-1; l++ {
		if n := len(v.Levels[l]); n > 0 {
			d.mu.Unlock()
			t.Fatalf("L%d holds %d files after Compact; want everything at the bottom", l, n)
		}
	}
	d.mu.Unlock()
	checkAgainstModel(t, d, m, rng)

	// Overwrite every third key, delete every seventh.
	for i := 0; i < 2000; i++ {
		k := fmt.Sprintf("k%05d", i)
		switch {
		case i%7 == 0:
			if err := d.Delete([]byte(k), NoSync); err != nil {
				t.Fatal(err)
			}
			delete(m, k)
		case i%3 == 0:
			v := fmt.Sprintf("w%d", i)
			if err := d.Put([]byte(k), []byte(v), NoSync); err != nil {
				t.Fatal(err)
			}
			m[k] = v
		}
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	compactions, _, read, levelWritten := compactionStats(d)
	if compactions != 1 {
		t.Fatalf("second Compact ran %d compactions; want one merge of L0 into the bottom level", compactions)
	}
	for l := 1; l < version.NumLevels-1; l++ {
		if read[l] != 0 || levelWritten[l] != 0 {
			t.Fatalf("L%d: compactions read %d and wrote %d bytes; want the level skipped", l, read[l], levelWritten[l])
		}
	}
	if files, entries := totalEntries(d); entries != uint64(len(m)) {
		t.Fatalf("after the second Compact: %d files, %d entries; want %d (one per live key)", files, entries, len(m))
	}
	checkAgainstModel(t, d, m, rng)
}

// checkAgainstModel checks every key of m, some missing keys and a full
// iteration.
func checkAgainstModel(t *testing.T, d *DB, m model, rng *rand.Rand) {
	t.Helper()
	for k, want := range m {
		v, err := d.Get([]byte(k))
		if err != nil || string(v) != want {
			t.Fatalf("Get(%q) = %q, %v; want %q", k, v, err, want)
		}
	}
	for i := 0; i < 50; i++ {
		k := randKey(rng)
		if _, ok := m[k]; ok {
			continue
		}
		if v, err := d.Get([]byte(k)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(%q) = %q, %v; want not found", k, v, err)
		}
	}
	it, err := d.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	checkIter(t, it, m, "", "", rng)
}

// TestL0DisjointFilesMove: L0 tables that overlap neither one another nor
// the base level (a sequential fill) move down without a rewrite when they
// hold one version per key; when each key is written twice they are merged,
// so that the shadowed versions are dropped.
func TestL0DisjointFilesMove(t *testing.T) {
	for _, twice := range []bool{false, true} {
		t.Run(fmt.Sprintf("twice=%v", twice), func(t *testing.T) {
			o := testOptions(vfs.NewMem())
			o.testInitialMemTableBytes = 32 << 10
			d := mustOpen(t, "db", o)
			defer d.Close()
			m := model{}
			for i := 0; i < 3000; i++ {
				k := fmt.Sprintf("k%05d", i)
				for n := 0; n < 1 || (twice && n < 2); n++ {
					v := fmt.Sprintf("v%d.%d-%s", i, n, bytes.Repeat([]byte("x"), 60))
					if err := d.Put([]byte(k), []byte(v), NoSync); err != nil {
						t.Fatal(err)
					}
					m[k] = v
				}
			}
			if err := waitBackgroundIdle(d); err != nil {
				t.Fatal(err)
			}
			met := d.Metrics()
			below := 0
			for l := 1; l < version.NumLevels; l++ {
				below += met.Levels[l].NumFiles
			}
			if met.Flushes < 2 || below == 0 {
				t.Fatalf("want several flushes and files below L0:\n%s", met)
			}
			compactions, written, _, _ := compactionStats(d)
			if !twice && written != 0 {
				t.Fatalf("a sequential fill's compactions rewrote %d bytes in %d compactions; want only moves:\n%s", written, compactions, met)
			}
			if twice && written == 0 {
				t.Fatalf("L0 tables holding two versions of each key were moved, not merged:\n%s", met)
			}
			checkAgainstModel(t, d, m, rand.New(rand.NewPCG(4, 4)))
		})
	}
}

// TestDisjointFiles checks the overlap test that decides whether L0 files
// may move together.
func TestDisjointFiles(t *testing.T) {
	file := func(a, b string, sentinel bool) *version.FileMetadata {
		largest := base.MakeInternalKey(nil, []byte(b), 1, base.KindSet)
		if sentinel {
			largest = base.MakeRangeDeleteSentinel(nil, []byte(b))
		}
		return &version.FileMetadata{Smallest: base.MakeInternalKey(nil, []byte(a), 1, base.KindSet), Largest: largest}
	}
	for _, tc := range []struct {
		files []*version.FileMetadata
		want  bool
	}{
		{[]*version.FileMetadata{file("a", "c", false)}, true},
		{[]*version.FileMetadata{file("d", "f", false), file("a", "c", false)}, true},
		{[]*version.FileMetadata{file("a", "c", false), file("c", "f", false)}, false},
		// [a, c) ends before c.
		{[]*version.FileMetadata{file("c", "f", false), file("a", "c", true)}, true},
		// Two apart, one spanning both.
		{[]*version.FileMetadata{file("a", "b", false), file("e", "f", false), file("a", "z", false)}, false},
		// "ab" sorts after "a" as a user key whatever the trailers say.
		{[]*version.FileMetadata{file("ab", "ac", false), file("a", "a", false)}, true},
	} {
		if got := disjointFiles(tc.files); got != tc.want {
			t.Errorf("disjointFiles(%v) = %v, want %v", tc.files, got, tc.want)
		}
	}
}

// TestCompactRangesAgainstModel runs random writes, deletions, range
// deletions, snapshots, flushes and Compacts of random ranges on a DB with
// many small levels (so that Compact skips some of them and moves tables
// past others), and checks every read, and every snapshot's reads,
// against a map.
func TestCompactRangesAgainstModel(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	o := testOptions(vfs.NewMem())
	o.LBaseMaxBytes = 4 << 10
	o.LevelMultiplier = 2
	o.TargetFileSizeBytes = 4 << 10
	o.testInitialMemTableBytes = 16 << 10
	d := mustOpen(t, "db", o)
	defer func() { d.Close() }()
	m := model{}
	type snap struct {
		s *Snapshot
		m model
	}
	var snaps []snap
	defer func() {
		for _, s := range snaps {
			s.s.Close()
		}
	}()
	randRange := func() (lo, hi string) {
		lo, hi = randKey(rng), randKey(rng)
		if lo > hi {
			lo, hi = hi, lo
		}
		return lo, hi
	}
	for i := 0; i < 4000; i++ {
		switch op := rng.IntN(100); {
		case op < 50:
			k, v := randKey(rng), fmt.Sprintf("v%d-%s", i, bytes.Repeat([]byte("x"), rng.IntN(120)))
			if err := d.Put([]byte(k), []byte(v), NoSync); err != nil {
				t.Fatal(err)
			}
			m[k] = v
		case op < 60:
			k := randKey(rng)
			if err := d.Delete([]byte(k), NoSync); err != nil {
				t.Fatal(err)
			}
			delete(m, k)
		case op < 62:
			a, b := randRange()
			if err := d.DeleteRange([]byte(a), []byte(b), NoSync); err != nil {
				t.Fatal(err)
			}
			for k := range m {
				if k >= a && k < b {
					delete(m, k)
				}
			}
		case op < 75:
			k := randKey(rng)
			v, err := d.Get([]byte(k))
			if want, ok := m[k]; !ok {
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("op %d: Get(%q) = %q, %v; want not found", i, k, v, err)
				}
			} else if err != nil || string(v) != want {
				t.Fatalf("op %d: Get(%q) = %q, %v; want %q", i, k, v, err, want)
			}
		case op < 77:
			s, err := d.NewSnapshot()
			if err != nil {
				t.Fatal(err)
			}
			snaps = append(snaps, snap{s, m.clone()})
		case op < 79 && len(snaps) > 0:
			j := rng.IntN(len(snaps))
			it, err := snaps[j].s.NewIter(nil)
			if err != nil {
				t.Fatal(err)
			}
			checkIter(t, it, snaps[j].m, "", "", rng)
			it.Close()
			if rng.IntN(2) == 0 {
				snaps[j].s.Close()
				snaps = slices.Delete(snaps, j, j+1)
			}
		case op < 84:
			if err := d.Flush(); err != nil {
				t.Fatal(err)
			}
		case op < 90:
			lo, hi := randRange()
			var err error
			if rng.IntN(8) == 0 {
				err = d.Compact(nil, nil)
			} else {
				err = d.Compact([]byte(lo), []byte(hi))
			}
			if err != nil {
				t.Fatal(err)
			}
		case op < 92:
			it, err := d.NewIter(nil)
			if err != nil {
				t.Fatal(err)
			}
			checkIter(t, it, m, "", "", rng)
			it.Close()
		}
	}
	checkAgainstModel(t, d, m, rng)
	for _, s := range snaps {
		it, err := s.s.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		checkIter(t, it, s.m, "", "", rng)
		it.Close()
	}
	t.Log(d.Metrics())
}

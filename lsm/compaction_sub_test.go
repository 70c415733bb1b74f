package lsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/version"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// TestSubcompactions runs random writes (overwrites, deletions, range
// deletions, a snapshot held across them) and a full Compact with
// compactions cut into up to four parallel parts, then checks that parts
// were used, that the DB and the snapshot read exactly the model, and the
// output boundaries: every level's tables are sorted and disjoint and no
// user key's point entries span two tables of a level.
func TestSubcompactions(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			o := testOptions(vfs.NewMem())
			o.MaxSubcompactions = 4
			d := mustOpen(t, "db", o)
			defer d.Close()
			rng := rand.New(rand.NewPCG(seed, 99))
			model := map[string]string{}
			var snap *Snapshot
			var snapModel map[string]string
			key := func() string { return fmt.Sprintf("key%05d", rng.IntN(3000)) }
			for i := 0; i < 12000; i++ {
				switch r := rng.IntN(100); {
				case r < 85:
					k, v := key(), fmt.Sprintf("v%d-%s", i, bytes.Repeat([]byte{'x'}, rng.IntN(80)))
					if err := d.Put([]byte(k), []byte(v), NoSync); err != nil {
						t.Fatal(err)
					}
					model[k] = v
				case r < 98:
					k := key()
					if err := d.Delete([]byte(k), NoSync); err != nil {
						t.Fatal(err)
					}
					delete(model, k)
				default:
					a, b := key(), key()
					if a > b {
						a, b = b, a
					}
					if err := d.DeleteRange([]byte(a), []byte(b), NoSync); err != nil {
						t.Fatal(err)
					}
					for k := range model {
						if k >= a && k < b {
							delete(model, k)
						}
					}
				}
				if i == 6000 {
					var err error
					if snap, err = d.NewSnapshot(); err != nil {
						t.Fatal(err)
					}
					snapModel = map[string]string{}
					for k, v := range model {
						snapModel[k] = v
					}
				}
			}
			if err := d.Compact(nil, nil); err != nil {
				t.Fatal(err)
			}
			d.mu.Lock()
			parts := d.mu.stats.subcompactions
			d.mu.Unlock()
			if parts == 0 {
				t.Fatal("no compaction was split into subcompactions")
			}
			checkLevelBoundaries(t, d)
			checkContents(t, d, nil, model)
			checkContents(t, d, snap, snapModel)
			snap.Close()
			// Without the snapshot the bottom level is rewritten once more.
			if err := d.Compact(nil, nil); err != nil {
				t.Fatal(err)
			}
			checkLevelBoundaries(t, d)
			checkContents(t, d, nil, model)
		})
	}
}

// checkLevelBoundaries checks every level below L0: tables in order, not
// overlapping, and no user key with point entries in two tables.
func checkLevelBoundaries(t *testing.T, d *DB) {
	t.Helper()
	d.mu.Lock()
	v := d.mu.versions.Current()
	v.Ref()
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		v.Unref()
		d.mu.Unlock()
	}()
	for level := 1; level < version.NumLevels; level++ {
		files := v.Levels[level]
		var prevLast []byte
		for i, f := range files {
			if i > 0 && base.InternalCompare(files[i-1].Largest, f.Smallest) >= 0 {
				t.Fatalf("L%d: tables %s and %s overlap", level, files[i-1].FileNum, f.FileNum)
			}
			r, err := d.tables.get(f)
			if err != nil {
				t.Fatal(err)
			}
			it := r.NewIter()
			first := true
			var last []byte
			for it.First(); it.Valid(); it.Next() {
				uk := base.UserKey(it.Key())
				if first && prevLast != nil && bytes.Compare(uk, prevLast) <= 0 {
					t.Fatalf("L%d: table %s starts at user key %q, not after %q where the table before ends", level, f.FileNum, uk, prevLast)
				}
				first = false
				last = append(last[:0], uk...)
			}
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
			if last != nil {
				prevLast = last
			}
		}
	}
}

// checkContents scans the DB (at snap, if not nil) and compares with want.
func checkContents(t *testing.T, d *DB, snap *Snapshot, want map[string]string) {
	t.Helper()
	var it *Iterator
	var err error
	if snap != nil {
		it, err = snap.NewIter(nil)
	} else {
		it, err = d.NewIter(nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		k := string(it.Key())
		if w, found := want[k]; !found || w != string(it.Value()) {
			t.Fatalf("key %q: read %q, want %q (present %v)", k, it.Value(), w, found)
		}
		n++
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	if n != len(want) {
		t.Fatalf("read %d keys, want %d", n, len(want))
	}
}

// TestCompactSkipsCleanBottomRewrite: a full Compact rewrites the bottom
// level into itself only when a table there may hold something to drop. A
// table written at the bottom by a compaction with no snapshot open holds
// one version per key and no deletion, so it is not read again; with a
// snapshot open between two versions of each key, both are written and
// the table is compacted again.
func TestCompactSkipsCleanBottomRewrite(t *testing.T) {
	for _, withSnap := range []bool{false, true} {
		t.Run(fmt.Sprintf("snapshot=%v", withSnap), func(t *testing.T) {
			o := testOptions(vfs.NewMem())
			o.MemTableSizeBytes = 1 << 20
			d := mustOpen(t, "db", o)
			defer d.Close()
			for round := 0; round < 2; round++ {
				if round == 1 && withSnap {
					s, err := d.NewSnapshot()
					if err != nil {
						t.Fatal(err)
					}
					defer s.Close()
				}
				for i := 0; i < 300; i++ {
					k := fmt.Sprintf("k%04d", i)
					if err := d.Put([]byte(k), bytes.Repeat([]byte(k), 8+round), NoSync); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := d.Compact(nil, nil); err != nil {
				t.Fatal(err)
			}
			d.mu.Lock()
			bottomRead := d.mu.stats.levelBytesRead[version.NumLevels-1]
			bottomFiles := len(d.mu.versions.Current().Levels[version.NumLevels-1])
			d.mu.Unlock()
			if bottomFiles == 0 {
				t.Fatal("Compact left nothing at the bottom level")
			}
			if withSnap && bottomRead == 0 {
				t.Fatal("with a snapshot open, the bottom level was not rewritten")
			}
			if !withSnap && bottomRead != 0 {
				t.Fatalf("the bottom level's clean tables were read again (%d bytes)", bottomRead)
			}
		})
	}
}

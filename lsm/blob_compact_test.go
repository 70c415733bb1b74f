package lsm

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/cairnkv/cairn/lsm/vfs/errorfs"
)

// fullCompactTestDB opens "db" on fs with key-value separation on and
// background blob GC held back (only a full Compact reclaims the
// garbage), writes every key, overwrites every key, then every second
// key again, flushing after each round: the second round's blob files
// end half garbage, the first's all garbage.
func fullCompactTestDB(t *testing.T, fs vfs.FS) (*DB, map[string][]byte) {
	t.Helper()
	o := blobTestOptions(fs, 64)
	o.BlobGCDiscardRatio = 0.99
	o.BlobMaxSpaceAmp = 100
	d := mustOpen(t, "db", o)
	model := map[string][]byte{}
	for i, step := range []int{1, 1, 2} {
		putBlobKeys(t, d, model, step, i, 1000)
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	return d, model
}

// blobSpaceAmp returns the bytes of the blob files in "db" on disk over
// the bytes of the model's values.
func blobSpaceAmp(t *testing.T, fs vfs.FS, model map[string][]byte) float64 {
	t.Helper()
	var live int64
	for _, v := range model {
		live += int64(len(v))
	}
	return float64(blobBytesOnDisk(fs, listBlobFiles(t, fs, "db"))) / float64(live)
}

// TestBlobFullCompactReclaimsGarbage: a full Compact relocates the live
// records of the blob files that hold garbage, so that when it returns
// the blob files on disk are about the live values' size (they were
// about 1.5× here, and 1.36-1.56× in dbbench's overwrite, before).
func TestBlobFullCompactReclaimsGarbage(t *testing.T) {
	fs := vfs.NewMem()
	d, model := fullCompactTestDB(t, fs)
	o := d.opts
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	if amp := blobSpaceAmp(t, fs, model); amp > 1.1 {
		t.Errorf("blob space amplification after Compact(nil, nil) = %.2f, want <= 1.1", amp)
	}
	checkModel(t, d, model)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = mustOpen(t, "db", o)
	defer d.Close()
	if amp := blobSpaceAmp(t, fs, model); amp > 1.1 {
		t.Errorf("blob space amplification after reopen = %.2f, want <= 1.1", amp)
	}
	checkModel(t, d, model)
	waitBlobFilesOnDisk(t, fs, "db", func() []base.FileNum { return blobFilesOf(d) })
}

// TestBlobFullCompactRelocationFails: a write of a relocation batch fails:
// of its output blob file, or of the manifest edit installing it.
// Compact returns the error and every key reads its newest value, before
// and after a reopen. A failed blob write leaves no orphan blob file
// behind; after a failed manifest write (the edit may or may not have
// reached the manifest) the reopen deletes the outputs or keeps them
// referenced.
func TestBlobFullCompactRelocationFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		suffix string
	}{{"blob", ".blob"}, {"manifest", "MANIFEST"}} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			var armed atomic.Bool
			fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
				if armed.Load() && op == errorfs.OpWrite && strings.Contains(path, tc.suffix) {
					return errorfs.ErrInjected
				}
				return nil
			}))
			d, model := fullCompactTestDB(t, fs)
			o := d.opts
			// Fail the second relocating batch: the first stays installed.
			batches := 0
			d.mu.Lock()
			d.mu.compactions.beforeWrite = func(c *compaction) {
				if len(c.relocate) > 0 {
					batches++
					if batches == 2 {
						armed.Store(true)
					}
				}
			}
			d.mu.Unlock()
			if err := d.Compact(nil, nil); !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("Compact = %v, want the injected error", err)
			}
			armed.Store(false)
			if tc.suffix == ".blob" {
				waitBlobFilesOnDisk(t, mem, "db", func() []base.FileNum { return blobFilesOf(d) })
			}
			checkModel(t, d, model)
			d.Close()
			o.FS = mem
			d = mustOpen(t, "db", o)
			defer d.Close()
			checkModel(t, d, model)
			checkBlobFilesReferenced(t, mem, d, model)
		})
	}
}

package lsm

import (
	"bytes"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cairnkv/cairn/lsm/blob"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/cairnkv/cairn/lsm/vfs/errorfs"
)

// checkBlobFilesReferenced fails unless every blob file of d's version is
// settled and holds the record of at least one key's newest entry: a file
// that no index reaches is a leak that garbage accounting can never
// reclaim (its records were never counted as garbage). It also checks that
// the disk holds exactly the version's blob files.
func checkBlobFilesReferenced(t *testing.T, fs vfs.FS, d *DB, model map[string][]byte) {
	t.Helper()
	referenced := map[base.FileNum]int{}
	for k := range model {
		var idx []byte
		if _, err := d.getWith([]byte(k), 0, func(_ *readState, _, v []byte, kind base.Kind, seq, tombSeq base.SeqNum) ([]byte, error) {
			if kind == base.KindBlobIndex && seq >= tombSeq {
				idx = append(idx[:0], v...)
			}
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
		if idx == nil {
			continue
		}
		x, err := blob.DecodeIndex(idx)
		if err != nil {
			t.Fatal(err)
		}
		referenced[x.FileNum]++
	}
	d.mu.Lock()
	files := d.mu.versions.Current().BlobFiles
	d.mu.Unlock()
	for n, m := range files {
		if m.Unsettled || referenced[n] == 0 {
			t.Errorf("blob file %v: %d keys reference it", m, referenced[n])
		}
	}
	waitBlobFilesOnDisk(t, fs, "db", func() []base.FileNum { return blobFilesOf(d) })
}

// reopenForGC opens "db" on fs with background blob GC on (gcTestDB
// turns it off), compacts everything (so that every shadowed index is
// dropped and counted as garbage) and waits until background work is done.
func reopenForGC(t *testing.T, fs vfs.FS, o *Options) *DB {
	t.Helper()
	o2 := *o
	o2.FS = fs
	o2.BlobGCDiscardRatio = 0.99 // only unsettled files qualify
	o2.BlobMaxSpaceAmp = 100
	d := mustOpen(t, "db", &o2)
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := waitBackgroundIdle(d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestBlobGCCloseMidCommit: the DB closes after blob GC installed its
// output file and before it committed the new indexes. No index ever
// points into the output, so after a reopen it must be reclaimed, not kept
// forever (it was, before outputs were marked unsettled: in the version,
// its records never counted as garbage).
func TestBlobGCCloseMidCommit(t *testing.T) {
	fs := vfs.NewMem()
	d, model := gcTestDB(t, fs)
	o := d.opts
	closed := make(chan error, 1)
	d.blobs.beforeGCCommit = func() {
		d.blobs.beforeGCCommit = nil
		// Close waits for this GC job (a background one): run it
		// alongside and let the commit meet a closing DB.
		go func() { closed <- d.Close() }()
		d.mu.Lock()
		for !d.mu.closing {
			d.mu.bgCond.Wait()
		}
		d.mu.Unlock()
	}
	d.mu.Lock()
	d.opts.BlobGCDiscardRatio = 0.3
	d.opts.DisableBlobCompactionGC = true // the background job does it
	d.maybeScheduleBlobGCLocked()
	started := d.mu.blobGC.running
	d.mu.Unlock()
	if !started {
		t.Fatal("no background GC job started")
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	d = reopenForGC(t, fs, o)
	defer d.Close()
	checkModel(t, d, model)
	checkBlobFilesReferenced(t, fs, d, model)
}

// TestBlobGCCommitFails: the WAL write (or sync) of GC's conditional
// index commit fails. The DB stops taking writes; after a reopen every
// value reads, and GC's output file is either reached by the replayed
// indexes or reclaimed, never kept unreferenced.
func TestBlobGCCommitFails(t *testing.T) {
	for _, op := range []errorfs.Op{errorfs.OpWrite, errorfs.OpSync} {
		t.Run(op.String(), func(t *testing.T) {
			mem := vfs.NewMem()
			var armed atomic.Bool
			fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(o errorfs.Op, path string) error {
				if armed.Load() && o == op && strings.HasSuffix(path, ".log") {
					return errorfs.ErrInjected
				}
				return nil
			}))
			d, model := gcTestDB(t, fs)
			o := d.opts
			d.blobs.beforeGCCommit = func() { armed.Store(true) }
			if err := d.BlobGC(0.3); !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("BlobGC = %v, want the injected error", err)
			}
			armed.Store(false)
			d.Close()
			d = reopenForGC(t, mem, o)
			defer d.Close()
			checkModel(t, d, model)
			checkBlobFilesReferenced(t, mem, d, model)
		})
	}
}

// TestBlobObsoleteDeletedAtLastRelease: a blob file that leaves the
// version while an older version holding it is pinned (as a running
// compaction or blob GC pins one) is deleted once that version is
// released, without waiting for another version change. Before, only a
// readState's release woke the cleaner: a file whose last holder was a
// compaction stayed on disk until the next flush or compaction.
func TestBlobObsoleteDeletedAtLastRelease(t *testing.T) {
	fs := vfs.NewMem()
	o := blobTestOptions(fs, 64)
	o.BlobGCDiscardRatio = -1
	d := mustOpen(t, "db", o)
	defer d.Close()
	model := map[string][]byte{}
	putBlobKeys(t, d, model, 1, 0, 500)
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	old := blobFilesOf(d)
	d.mu.Lock()
	pinned := d.mu.versions.Current()
	pinned.Ref()
	d.mu.Unlock()
	// Overwrite every key and compact: every record of the old files is
	// garbage and the files leave the version.
	putBlobKeys(t, d, model, 1, 1, 500)
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := waitBackgroundIdle(d); err != nil {
		t.Fatal(err)
	}
	for _, n := range blobFilesOf(d) {
		if slices.Contains(old, n) {
			t.Fatalf("blob file %s still in the version", n)
		}
	}
	if disk := listBlobFiles(t, fs, "db"); !slices.Contains(disk, old[0]) {
		t.Fatalf("blob file %s deleted while a version holding it is pinned (disk %v)", old[0], disk)
	}
	// Let the cleaner consume what earlier releases signalled, so that
	// only the release below can lead to the deletion.
	for len(d.cleanCh) > 0 {
		runtime.Gosched()
	}
	d.deleteObsoleteFiles()
	pinned.Unref()
	waitBlobFilesOnDisk(t, fs, "db", func() []base.FileNum { return blobFilesOf(d) })
	checkModel(t, d, model)
}

// TestBlobGCDeadFileRetiredOnlyWhenDurable: blob GC finds no live record
// in a file because unsynced writes overwrote every key; it must not
// retire the file until those writes are in tables. A crash that loses
// them revives the tables' indexes into the file, which must still be
// there (it once was not: a GC that copied nothing retired its file at
// once, and the metamorphic test's torn crash found a dangling index).
func TestBlobGCDeadFileRetiredOnlyWhenDurable(t *testing.T) {
	fs := vfs.NewMem()
	o := blobTestOptions(fs, 64)
	o.BlobGCDiscardRatio = -1
	d := mustOpen(t, "db", o)
	model := map[string][]byte{}
	putBlobKeys(t, d, model, 1, 0, 500)
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	flushed := maps_clone(model)
	// NoSync, and small enough that the memtable takes them all: only in
	// the memtable and the WAL's unsynced tail.
	putBlobKeys(t, d, model, 1, 1, 70)
	if err := d.BlobGC(0); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone()
	d.Close()
	o.FS = crashed
	d = mustOpen(t, "db", o)
	defer d.Close()
	// GC may have made the overwrites durable (it flushes before
	// retiring) or not; either way every key reads one of its values.
	for k, v := range model {
		got, err := d.Get([]byte(k))
		if err != nil || (!bytes.Equal(got, v) && !bytes.Equal(got, flushed[k])) {
			t.Fatalf("Get(%s) = %d bytes, %v", k, len(got), err)
		}
	}
}

// TestBlobGCInstallFails: the manifest write that adds GC's output files
// fails (the write, or its sync). The DB must reopen; the outputs are then
// orphans (deleted by Open) or in the manifest unsettled (scanned by GC,
// found unreferenced, retired), never kept with no index reaching them.
func TestBlobGCInstallFails(t *testing.T) {
	for _, op := range []errorfs.Op{errorfs.OpWrite, errorfs.OpSync} {
		t.Run(op.String(), func(t *testing.T) {
			mem := vfs.NewMem()
			var armed atomic.Bool
			fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(o errorfs.Op, path string) error {
				if armed.Load() && o == op && strings.Contains(path, "MANIFEST") {
					return errorfs.ErrInjected
				}
				return nil
			}))
			d, model := gcTestDB(t, fs)
			o := d.opts
			// GC's first manifest write is the one adding its outputs.
			armed.Store(true)
			if err := d.BlobGC(0.3); !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("BlobGC = %v, want the injected error", err)
			}
			armed.Store(false)
			d.Close()
			d = reopenForGC(t, mem, o)
			defer d.Close()
			checkModel(t, d, model)
			checkBlobFilesReferenced(t, mem, d, model)
		})
	}
}

// TestBlobGCCopyFailsRemovesOutputs: blob GC fails while copying live
// records, on the creation of its second output file, after the first
// was finished. Both must be gone when BlobGC returns (they were kept
// until the next Open's sweep), and every value still reads.
func TestBlobGCCopyFailsRemovesOutputs(t *testing.T) {
	mem := vfs.NewMem()
	var armed atomic.Bool
	var finished atomic.Int32
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if !armed.Load() || !strings.HasSuffix(path, ".blob") {
			return nil
		}
		switch {
		case op == errorfs.OpSync:
			finished.Add(1)
		case op == errorfs.OpCreate && finished.Load() > 0:
			return errorfs.ErrInjected
		}
		return nil
	}))
	d, model := gcTestDB(t, fs)
	o := d.opts
	// Small outputs: the first file's copy rolls over several.
	d.opts.BlobTargetFileSizeBytes = 4 << 10
	armed.Store(true)
	err := d.BlobGC(0.3)
	armed.Store(false)
	if !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("BlobGC = %v, want the injected error", err)
	}
	if left := unreferencedFiles(t, mem, d); len(left) > 0 {
		t.Errorf("outputs of the failed blob GC left on disk: %v", left)
	}
	checkModel(t, d, model)
	d.Close()
	d = reopenSweepsNothing(t, mem, o)
	defer d.Close()
	checkModel(t, d, model)
}

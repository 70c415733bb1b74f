package lsm

import (
	"errors"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/cairnkv/cairn/lsm/vfs/errorfs"
)

// unreferencedFiles returns the tables and blob files in d's directory
// that no live version holds: what the next Open's sweep would delete.
func unreferencedFiles(t *testing.T, fs vfs.FS, d *DB) []string {
	t.Helper()
	d.mu.Lock()
	live := d.mu.versions.LiveFiles()
	d.mu.Unlock()
	var out []string
	for _, ft := range []base.FileType{base.FileTypeTable, base.FileTypeBlob} {
		for _, n := range filesOnDisk(t, fs, "db", ft) {
			if _, ok := live[n]; !ok {
				out = append(out, base.MakeFilename(ft, n))
			}
		}
	}
	return out
}

// reopenSweepsNothing opens "db" on fs and fails if the directory held a
// table or blob file the recovered version does not: one the Open's sweep
// deletes, left behind by the closed DB.
func reopenSweepsNothing(t *testing.T, fs vfs.FS, o *Options) *DB {
	t.Helper()
	onDisk := append(filesOnDisk(t, fs, "db", base.FileTypeTable), filesOnDisk(t, fs, "db", base.FileTypeBlob)...)
	o2 := *o
	o2.FS = fs
	d := mustOpen(t, "db", &o2)
	d.mu.Lock()
	live := d.mu.versions.LiveFiles()
	d.mu.Unlock()
	for _, n := range onDisk {
		if _, ok := live[n]; !ok {
			t.Errorf("file %s left on disk is not in the reopened version", n)
		}
	}
	return d
}

// lockedLog is a Logger destination the background goroutines may write
// while the test reads it.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCompactionFailureRemovesBlobOutputs: a compaction that separates
// values into several blob files fails on the sync of its last one, after
// the others were finished (by an earlier part, or rolled over by the same
// part). Every output, tables and blob files, must be gone when Compact
// returns, not left for the next Open's sweep: a DB that keeps running
// would hold them until then. It once kept the finished parts' files and a
// part's rolled-over files. With the removal failing too, the compaction
// still reports its own error, names the files it left in the log, and
// the next Open sweeps them.
func TestCompactionFailureRemovesBlobOutputs(t *testing.T) {
	for _, tc := range []struct {
		name            string
		parts           int
		blobTargetBytes int64
		failRemove      bool
	}{
		{name: "parts", parts: 2, blobTargetBytes: 32 << 10},
		{name: "rolled", parts: 1, blobTargetBytes: 4 << 10},
		{name: "remove-fails", parts: 2, blobTargetBytes: 32 << 10, failRemove: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One L0 table of inline values (two versions of each key,
			// so that Compact rewrites it rather than moving it), then
			// a reopen with separation on: the compaction writes the
			// values to blob files.
			mem := vfs.NewMem()
			o := testOptions(mem)
			o.Compression = NoCompression
			d := mustOpen(t, "db", o)
			model := map[string][]byte{}
			putBlobKeys(t, d, model, 1, 0, 80)
			putBlobKeys(t, d, model, 1, 1, 80)
			if err := d.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}

			var armed atomic.Bool
			var blobSyncs, failSync atomic.Int32
			inj := errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
				if !armed.Load() || !strings.HasSuffix(path, ".blob") {
					return nil
				}
				if op == errorfs.OpSync && blobSyncs.Add(1) == failSync.Load() {
					return errorfs.ErrInjected
				}
				if op == errorfs.OpRemove && tc.failRemove {
					return errorfs.ErrInjected
				}
				return nil
			})
			logged := &lockedLog{}
			compact := func(fs vfs.FS) (*DB, error) {
				o := blobTestOptions(errorfs.Wrap(fs, inj), 64)
				o.Compression = NoCompression
				o.MaxSubcompactions = tc.parts
				o.TargetFileSizeBytes = 4 << 10 // the table holds several
				o.BlobTargetFileSizeBytes = tc.blobTargetBytes
				o.Logger = log.New(logged, "", 0)
				d := mustOpen(t, "db", o)
				blobSyncs.Store(0)
				armed.Store(true)
				err := d.Compact(nil, nil)
				armed.Store(false)
				return d, err
			}
			// A run that succeeds counts the blob file syncs; the real
			// run fails the last.
			dry, err := compact(mem.CrashClone())
			if err != nil {
				t.Fatal(err)
			}
			dry.mu.Lock()
			split := dry.mu.stats.subcompactions > 0
			dry.mu.Unlock()
			dry.Close()
			if split != (tc.parts > 1) {
				t.Fatalf("compaction split into parts: %v, want %v", split, tc.parts > 1)
			}
			n := blobSyncs.Load()
			if n < 2 {
				t.Fatalf("the compaction wrote %d blob files, want several", n)
			}
			failSync.Store(n)
			d, err = compact(mem)
			if !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("Compact = %v, want the injected error", err)
			}
			left := unreferencedFiles(t, mem, d)
			if tc.failRemove {
				if len(left) == 0 {
					t.Fatal("no output left on disk, though every blob removal failed")
				}
				for _, name := range left {
					if strings.HasSuffix(name, ".blob") && !strings.Contains(logged.String(), name) {
						t.Errorf("%s left on disk and not named in the log:\n%s", name, logged)
					}
				}
			} else if len(left) > 0 {
				t.Errorf("outputs of the failed compaction left on disk: %v", left)
			}
			checkModel(t, d, model)
			// Close reports the compaction's error, which stopped writes.
			d.Close()
			if tc.failRemove {
				d = mustOpen(t, "db", blobTestOptions(mem, 64))
				defer d.Close()
				waitBlobFilesOnDisk(t, mem, "db", func() []base.FileNum { return blobFilesOf(d) })
			} else {
				d = reopenSweepsNothing(t, mem, blobTestOptions(mem, 64))
				defer d.Close()
			}
			checkModel(t, d, model)
		})
	}
}

package lsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/cairnkv/cairn/lsm/vfs/errorfs"
)

// cancelTestTimeout bounds the waits of these tests for a call that must
// return: it is a guard against a hang, not a measure of promptness.
const cancelTestTimeout = time.Minute

// putVersions writes, for each version number in turn, every key
// k00000.. of n a 100-byte value of that version, records the newest in
// model, and calls after (if not nil) at the end of each version.
func putVersions(t *testing.T, d *DB, model map[string][]byte, versions, n int, after func()) {
	t.Helper()
	for ver := range versions {
		for i := range n {
			k := fmt.Sprintf("k%05d", i)
			v := blobValueFor(k, ver, 100)
			if err := d.Put([]byte(k), v, NoSync); err != nil {
				t.Fatal(err)
			}
			model[k] = v
		}
		if after != nil {
			after()
		}
	}
}

func recvErr(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(cancelTestTimeout):
		t.Fatalf("%s did not return", what)
		return nil
	}
}

// TestCloseCancelsCompaction: a Close during a Compact(nil, nil) cancels
// its compaction instead of waiting for the whole of it. The compaction
// separates inline values into blob files, so that at the cancellation it
// has a table and a blob file open. Compact must return ErrClosed, Close
// no error (a cancellation is not a failure), the compaction must stop
// within a few entries of the Close (no further table is started), and
// nothing of it may be installed or left on disk: the reopened DB holds
// the tables it held before, every key reads back, and Open's sweep finds
// no orphan. Close once waited for the compaction to run to the end.
func TestCloseCancelsCompaction(t *testing.T) {
	mem := vfs.NewMem()
	// Two versions of each key, inline, in one L0 table, so that Compact
	// rewrites all of it (and, reopened with separation on, writes blob
	// files).
	fill := testOptions(mem)
	fill.MemTableSizeBytes = 8 << 20
	d := mustOpen(t, "db", fill)
	model := map[string][]byte{}
	putVersions(t, d, model, 2, 4000, nil)
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	// The injector counts the tables the armed compaction creates and,
	// if blockFirstBlob, stops it at the creation of its first blob file
	// (when it has a table open too) until release is closed.
	var armed, blockFirstBlob, released atomic.Bool
	var tables, tablesAfterRelease atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	inj := errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if !armed.Load() || op != errorfs.OpCreate {
			return nil
		}
		if strings.HasSuffix(path, ".sst") {
			tables.Add(1)
			if released.Load() {
				tablesAfterRelease.Add(1)
			}
		}
		if strings.HasSuffix(path, ".blob") && blockFirstBlob.Load() {
			once.Do(func() {
				close(started)
				<-release
			})
		}
		return nil
	})
	open := func(fs vfs.FS) *DB {
		o := blobTestOptions(errorfs.Wrap(fs, inj), 64)
		o.MaxSubcompactions = 1
		d := mustOpen(t, "db", o)
		if err := waitBackgroundIdle(d); err != nil {
			t.Fatal(err)
		}
		return d
	}

	// A full run, on a copy, for the size of the whole compaction.
	dry := open(mem.CrashClone())
	armed.Store(true)
	if err := dry.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	armed.Store(false)
	if err := dry.Close(); err != nil {
		t.Fatal(err)
	}
	full := tables.Load()
	if full < 4 {
		t.Fatalf("the full compaction wrote %d tables, want several", full)
	}

	d = open(mem)
	before := tablesInVersion(d)
	tables.Store(0)
	blockFirstBlob.Store(true)
	armed.Store(true)
	compactErr, closeErr := make(chan error, 1), make(chan error, 1)
	go func() { compactErr <- d.Compact(nil, nil) }()
	select {
	case <-started:
	case <-time.After(cancelTestTimeout):
		t.Fatal("the compaction did not create a blob file")
	}
	go func() { closeErr <- d.Close() }()
	<-d.closeCh // Close has begun
	released.Store(true)
	close(release)
	if err := recvErr(t, compactErr, "Compact"); !errors.Is(err, ErrClosed) {
		t.Errorf("Compact during Close = %v, want ErrClosed", err)
	}
	if err := recvErr(t, closeErr, "Close"); err != nil {
		t.Errorf("Close during a compaction = %v, want no error", err)
	}
	armed.Store(false)
	if n := tablesAfterRelease.Load(); n > 0 {
		t.Errorf("the compaction started %d more tables after Close (%d before; %d in all when not cancelled)", n, tables.Load()-n, full)
	}

	d = reopenSweepsNothing(t, mem, blobTestOptions(mem, 64))
	defer d.Close()
	if after := tablesInVersion(d); !slices.Equal(after, before) {
		t.Errorf("tables after the cancelled compaction %v, want those before it %v", after, before)
	}
	if blobs := blobFilesOf(d); len(blobs) > 0 {
		t.Errorf("blob files %v installed by the cancelled compaction", blobs)
	}
	checkModel(t, d, model)
}

// TestWaitBackgroundIdleReturnsBackgroundError: a background flush fails
// (its table's sync), and waitBackgroundIdle returns that error instead of
// nothing, or of waiting for ever for the memtables a DB stopped by a
// background error never flushes (which it once did).
func TestWaitBackgroundIdleReturnsBackgroundError(t *testing.T) {
	var armed atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if armed.Load() && op == errorfs.OpSync && strings.HasSuffix(path, ".sst") {
			return errorfs.ErrInjected
		}
		return nil
	})
	d := mustOpen(t, "db", testOptions(errorfs.Wrap(vfs.NewMem(), inj)))
	armed.Store(true)
	// Past MemTableSizeBytes several times: the background flush runs,
	// and fails; the writes after it may fail with its error.
	for i := range 4000 {
		k := fmt.Sprintf("k%05d", i)
		if err := d.Put([]byte(k), blobValueFor(k, 0, 100), NoSync); err != nil {
			if !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("Put: %v", err)
			}
			break
		}
	}
	idle := make(chan error, 1)
	go func() { idle <- waitBackgroundIdle(d) }()
	if err := recvErr(t, idle, "waitBackgroundIdle"); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("waitBackgroundIdle = %v, want the flush's injected error", err)
	}
	armed.Store(false)
	if err := d.Close(); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("Close = %v, want the background error", err)
	}
}

// TestCloseCancelsBackgroundCompaction: a Close during an automatic
// compaction cancels it too, and the cancellation is no background error
// (Close returns nil, and the next Open writes as usual); nothing of the
// compaction is installed or left on disk. Close once waited for it to
// finish and install its outputs.
func TestCloseCancelsBackgroundCompaction(t *testing.T) {
	mem := vfs.NewMem()
	// Three overlapping L0 tables, none compacted.
	fill := testOptions(mem)
	fill.L0CompactionThreshold = 100
	fill.L0SlowdownWritesThreshold = 100
	fill.L0StopWritesThreshold = 100
	fill.MemTableSizeBytes = 8 << 20
	d := mustOpen(t, "db", fill)
	model := map[string][]byte{}
	putVersions(t, d, model, 3, 3000, func() {
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
	})
	before := tablesInVersion(d)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopened with the usual L0 trigger, the DB compacts L0 at once;
	// the injector holds the compaction at the creation of its first
	// table until Close has begun.
	var armed atomic.Bool
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	inj := errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if armed.Load() && op == errorfs.OpCreate && strings.HasSuffix(path, ".sst") {
			once.Do(func() {
				close(started)
				<-release
			})
		}
		return nil
	})
	armed.Store(true)
	d = mustOpen(t, "db", testOptions(errorfs.Wrap(mem, inj)))
	select {
	case <-started:
	case <-time.After(cancelTestTimeout):
		t.Fatal("no compaction started")
	}
	closeErr := make(chan error, 1)
	go func() { closeErr <- d.Close() }()
	<-d.closeCh // Close has begun
	close(release)
	if err := recvErr(t, closeErr, "Close"); err != nil {
		t.Errorf("Close during a compaction = %v, want no error", err)
	}
	armed.Store(false)

	d = reopenSweepsNothing(t, mem, fill)
	defer d.Close()
	if after := tablesInVersion(d); !slices.Equal(after, before) {
		t.Errorf("tables after the cancelled compaction %v, want those before it %v", after, before)
	}
	checkModel(t, d, model)
	if err := d.Put([]byte("after"), []byte("x"), Sync); err != nil {
		t.Fatalf("Put after the cancelled compaction: %v", err)
	}
}

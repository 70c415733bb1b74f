package lsm

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/record"
	"github.com/cairnkv/cairn/lsm/version"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/cairnkv/cairn/trace"
)

// Errors returned by the engine. Test for them with errors.Is.
var (
	ErrNotFound        = base.ErrNotFound
	ErrInvalidArgument = base.ErrInvalidArgument
	ErrClosed          = base.ErrClosed
)

// IsCorruption reports whether err reports damaged on-disk data.
func IsCorruption(err error) bool { return base.IsCorruption(err) }

// DB is an LSM key-value store over one directory. It is safe for
// concurrent use.
//
// Lock order: commit leadership (d.mu.writers front) → d.mu → version set
// internals. The read path takes no DB-wide lock: it loads the current
// readState with one atomic load and a reference count.
type DB struct {
	dirname string
	opts    *Options
	fs      vfs.FS
	cache   *cache.Cache
	cacheID uint64
	tables  *tableCache
	blobs   blobStore
	lock    io.Closer
	// tracer records block-cache accesses between StartTrace and EndTrace
	// (trace.go).
	tracer trace.Tracer

	// visibleSeq is the snapshot of the latest state: readers see writes
	// with sequence numbers below it. Published by the commit leader after
	// a group is applied to the memtable.
	visibleSeq atomic.Uint64
	// readState is what a reader needs: memtables and the current version.
	readState atomic.Pointer[readState]
	closed    atomic.Bool

	mu struct {
		sync.Mutex
		versions *version.VersionSet
		// mem is the mutable memtable; imm the memtables waiting to be
		// flushed, oldest first.
		mem *memTable
		imm []*memTable
		// memNextSize is the arena size of the next memtable.
		memNextSize int64
		// writers is the commit queue; its front is the leader.
		writers []*writer
		log     struct {
			num  base.FileNum
			file vfs.File
			w    *record.Writer
			// recordedSize is the synced size of this WAL last recorded
			// in the manifest (0: none).
			recordedSize int64
		}
		snapshots snapshotList
		// bgErr is a sticky error from the WAL or a background job whose
		// effects on disk are unknown; every later write returns it.
		bgErr error
		// bgCond is signalled whenever a flush or compaction finishes or
		// bgErr is set.
		bgCond            sync.Cond
		flushing          bool
		compactions       compactionsState
		manualCompactions int
		closing           bool
		compactPointer    [version.NumLevels][]byte
		stats             dbStats
		// liveLogs are the WALs not yet deleted, ascending.
		liveLogs []base.FileNum
		// blobGC is blob GC's state (blob_gc.go).
		blobGC blobGCState
		// compactCalls counts the Compact calls past their check of
		// closing and not yet returned: Close waits until it is 0, so
		// that no Compact touches a file after Close.
		compactCalls int
	}

	// Filter probe counters: SST filters, and memtable filters of
	// memtables already flushed.
	tableFilter, retiredMemFilter filterCounters

	// memArenaBytes is the capacity of this DB's memtable arenas not yet
	// released (Metrics.MemTableArenaBytes): memtables in the lists, and
	// those a reader or a flush still holds.
	memArenaBytes atomic.Int64

	// deleteMu serializes deleteObsoleteFiles, so that a call returns only
	// once the files any earlier call found obsolete are removed.
	deleteMu sync.Mutex

	bgWG    sync.WaitGroup
	cleanCh chan struct{}
	closeCh chan struct{}
	// sweptCh is closed when the cleaner has finished (or, on Close,
	// abandoned) the sweep of what Open found left behind.
	sweptCh chan struct{}
}

type filterCounters struct{ checked, useful atomic.Int64 }

// dbStats are the counters behind Metrics. REQUIRES: d.mu held to update.
type dbStats struct {
	flushes, compactions int64
	flushBytes           int64
	blobBytesWritten     int64
	blobGCBytesRead      int64
	blobGCBytesWritten   int64
	// Blob GC by compaction (blob_relocate.go).
	blobRelocatedBytesRead, blobRelocatedBytesWritten int64
	blobForcedCompactions                             int64
	blobSlowdowns                                     int64
	compactionBytesRead                               int64
	compactionBytesWritten                            int64
	bytesIngested                                     int64 // user bytes written (batch reprs)
	// bytesAtOpen is the size of the tables the DB opened with (including
	// those recovered from the WAL at Open): input that compactions
	// rewrite but that was not ingested since Open.
	bytesAtOpen                int64
	levelBytesRead             [version.NumLevels]int64
	levelBytesWritten          [version.NumLevels]int64
	slowdowns, stops           int64
	slowdownTime, stopTime     time.Duration
	walBytes, walSyncs, groups int64
	writes                     int64
	// subcompactions counts the compactions split into parallel parts.
	subcompactions int64
}

// Get returns a copy of the latest value of key, or ErrNotFound.
func (d *DB) Get(key []byte) ([]byte, error) {
	return d.get(key, 0)
}

// batchPool recycles the single-operation batches of Put, Delete and
// DeleteRange. Write does not keep a batch once it returns.
var batchPool = sync.Pool{New: func() any { return &Batch{} }}

// maxPooledBatchBytes keeps huge values' buffers out of the pool.
const maxPooledBatchBytes = 64 << 10

func (d *DB) writeOne(fill func(b *Batch), wo *WriteOptions) error {
	b := batchPool.Get().(*Batch)
	fill(b)
	err := d.Write(b, wo)
	if cap(b.data) <= maxPooledBatchBytes {
		b.Reset()
		batchPool.Put(b)
	}
	return err
}

// Put sets key to value.
func (d *DB) Put(key, value []byte, wo *WriteOptions) error {
	return d.writeOne(func(b *Batch) { b.Set(key, value) }, wo)
}

// Delete removes key.
func (d *DB) Delete(key []byte, wo *WriteOptions) error {
	return d.writeOne(func(b *Batch) { b.Delete(key) }, wo)
}

// DeleteRange removes every key k with start <= k < end.
func (d *DB) DeleteRange(start, end []byte, wo *WriteOptions) error {
	return d.writeOne(func(b *Batch) { b.DeleteRange(start, end) }, wo)
}

// checkOpen returns ErrClosed once Close has begun.
func (d *DB) checkOpen() error {
	if d.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Close waits for background work, closes the WAL and every open file and
// releases the directory lock. The WAL is synced first; without a WAL the
// memtables are flushed. Obsolete files whose deletion had not happened
// (the inputs of a compaction that just finished, say) are left on disk
// and deleted by the next Open, in the background: Close waits for at most
// the one being unlinked. Compactions in progress, a Compact's included,
// are cancelled: their outputs are removed and nothing of them is
// installed (the next Open finds the same work to do), and Close waits
// until they, and any Compact call, are out of the DB's files. Flushes are
// not cancelled: they run to the end. Iterators and snapshots must be
// closed before, and no other call (a Flush, a Checkpoint or a
// PreparedCheckpoint's Write, a BlobGC) may still be running; a
// PreparedCheckpoint should be released before (one released after Close
// only frees memory: no file is deleted after Close).
// Close returns any background error the DB met.
func (d *DB) Close() error {
	var flushErr error
	if d.opts.DisableWAL && !d.closed.Load() {
		// Without a WAL the memtables are the only copy of recent writes.
		flushErr = d.Flush()
	}
	if !d.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	d.mu.Lock()
	// Wait for the commit queue to drain.
	for len(d.mu.writers) > 0 {
		d.mu.bgCond.Wait()
	}
	d.mu.closing = true
	d.mu.bgCond.Broadcast()
	d.mu.Unlock()

	close(d.closeCh)
	d.mu.Lock()
	for d.mu.compactCalls > 0 {
		d.mu.bgCond.Wait()
	}
	d.mu.Unlock()
	d.bgWG.Wait()

	d.mu.Lock()
	// A background error (a failed flush or compaction) is reported here
	// too, so that it reaches the caller even if no write follows it.
	errs := []error{flushErr, d.mu.bgErr}
	if d.mu.log.w != nil {
		w := d.mu.log.w
		ferr := errors.Join(w.Flush(), finishWAL(d.mu.log.file))
		serr := d.mu.log.file.Sync()
		errs = append(errs, ferr, serr, d.mu.log.file.Close())
		d.mu.log.w = nil
		if ferr == nil && serr == nil && d.mu.bgErr == nil {
			// A cleanly closed WAL cannot have a torn tail: say so in
			// the manifest, so that recovery reports any damage in it.
			errs = append(errs, d.recordWALSyncedLocked(d.mu.log.num, w.Size()))
		}
	}
	rs := d.readState.Swap(nil)
	// Drop the lists' references to the memtables: their arenas are
	// released now, or by the last reader still holding a readState (an
	// iterator not yet closed).
	mems := append([]*memTable{d.mu.mem}, d.mu.imm...)
	d.mu.imm = nil
	d.mu.Unlock()
	if rs != nil {
		rs.unref()
	}
	for _, m := range mems {
		m.unref()
	}
	// Files obsolete now are not deleted here: the next Open's sweep
	// deletes them, after it has returned (see obsolete.go).
	d.mu.Lock()
	errs = append(errs, d.mu.versions.Close())
	d.mu.Unlock()
	errs = append(errs, d.tables.close(), d.closeBlobStore(), d.lock.Close())
	return errors.Join(errs...)
}

// recordWALSyncedLocked records in the manifest that WAL n is durable up
// to size bytes.
// REQUIRES: d.mu held (released while the manifest is written); the caller
// leads the commit queue, or Close has drained it.
func (d *DB) recordWALSyncedLocked(n base.FileNum, size int64) error {
	ve := &version.VersionEdit{WALsSynced: []version.WALSynced{{Num: n, SyncedSize: uint64(size)}}}
	if err := d.mu.versions.LogAndApply(&d.mu.Mutex, ve); err != nil {
		return fmt.Errorf("lsm: recording the synced size of WAL %s in the manifest: %w", n, err)
	}
	if n == d.mu.log.num {
		d.mu.log.recordedSize = size
	}
	return nil
}

// setBackgroundErrorLocked records a sticky error.
// REQUIRES: d.mu held.
func (d *DB) setBackgroundErrorLocked(err error) {
	if d.mu.bgErr == nil {
		d.mu.bgErr = err
		d.opts.Logger.Printf("lsm: background error, writes now fail: %v", err)
	}
	d.mu.bgCond.Broadcast()
}

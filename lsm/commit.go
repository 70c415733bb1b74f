package lsm

import (
	"fmt"
	"sync"
	"time"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/record"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// The commit pipeline (group commit, as in LevelDB):
//
// Each Write queues a writer under d.mu. The writer at the front of the
// queue is the leader: it makes room in the memtable (switching memtables or
// stalling as needed), takes the queued writers behind it into one group,
// assigns the group consecutive sequence numbers, and releases d.mu. It then
// appends every batch of the group to the WAL and issues one fsync if any
// member asked for Sync, applies the batches to the memtable and, with d.mu
// held again, publishes the new visible sequence number and wakes the group.
// Followers sleep on their own condition variable until they are done or
// become the leader of the next group.
//
// With Options.WALBufferedWrites the WAL file is a bufferedWAL
// (wal_buffered.go): the leader's appends only copy the records into a
// buffer in memory, and the fsync a Sync member asks for is a request to
// the buffer's flusher goroutine, which writes the buffer out, syncs, and
// wakes the leader. Nothing else in the pipeline changes: the WAL switch
// and Close write out and sync the buffer through finishWAL and Sync.

// writer is one Write waiting in the commit queue.
type writer struct {
	batch *Batch
	sync  bool
	done  bool
	err   error
	cond  condVar
	// precommit, if set, fills batch once the writer leads the queue,
	// when every earlier write is applied and visible and no later one
	// can be: what it reads and what it writes form one atomic step. Such
	// a writer commits alone (blob GC's conditional index update).
	precommit func(b *Batch) error
}

var writerPool = sync.Pool{New: func() any { return &writer{} }}

// maxGroupBytes bounds the bytes one commit group writes; a small leader
// takes a smaller group so that its latency does not grow much (LevelDB).
const (
	maxGroupBytes      = 1 << 20
	smallLeaderBytes   = 128 << 10
	slowdownWriteDelay = time.Millisecond
)

// Write applies the batch atomically. A batch holding an invalid operation
// (see Batch.Err) is refused and nothing is written.
func (d *DB) Write(b *Batch, wo *WriteOptions) error {
	if err := d.checkOpen(); err != nil {
		return err
	}
	if b == nil {
		return base.InvalidArgumentf("nil batch")
	}
	if b.err != nil {
		return b.err
	}
	if b.Empty() {
		return nil
	}
	return d.commit(b, wo, nil)
}

// commit runs the commit pipeline for b (see Write), with an optional
// precommit hook (see writer.precommit).
func (d *DB) commit(b *Batch, wo *WriteOptions, precommit func(b *Batch) error) error {
	if wo == nil {
		wo = NoSync
	}
	w := writerPool.Get().(*writer)
	*w = writer{batch: b, sync: wo.Sync && !d.opts.DisableWAL, precommit: precommit}
	w.cond.init(&d.mu.Mutex)
	// Once Write returns, no one refers to w: the leader that completed it
	// dropped it from the queue under d.mu before w could wake.
	defer writerPool.Put(w)

	d.mu.Lock()
	if d.mu.closing {
		d.mu.Unlock()
		return ErrClosed
	}
	d.mu.writers = append(d.mu.writers, w)
	for !w.done && d.mu.writers[0] != w {
		w.cond.wait()
	}
	if w.done {
		d.mu.Unlock()
		return w.err
	}

	// w leads the next group.
	if w.precommit != nil {
		// While w leads, no other write can commit: run the hook
		// without d.mu (it reads the DB).
		d.mu.Unlock()
		err := w.precommit(b)
		if err == nil {
			err = b.err
		}
		d.mu.Lock()
		if err != nil || b.Empty() {
			d.popWritersLocked(1)
			d.mu.Unlock()
			return err
		}
	}
	err := d.makeRoomForWriteLocked(b)
	group := d.buildGroupLocked()
	var anySync bool
	var seq base.SeqNum
	if err == nil {
		seq = d.mu.versions.LastSeq() + 1
		for _, g := range group {
			g.batch.setSeq(seq)
			seq += base.SeqNum(g.batch.Count())
			anySync = anySync || g.sync
		}
		d.mu.versions.SetLastSeq(seq - 1)
	}
	mem, lw, lf, lnum := d.mu.mem, d.mu.log.w, d.mu.log.file, d.mu.log.num
	d.mu.Unlock()

	var walBytes, syncedSize int64
	if err == nil && lw != nil {
		for _, g := range group {
			if _, err = lw.WriteRecord(g.batch.Repr()); err != nil {
				break
			}
			walBytes += int64(g.batch.Len())
		}
		if err == nil {
			err = lw.Flush()
		}
		if err == nil && anySync {
			err = lf.Sync()
			syncedSize = lw.Size()
		}
		if err != nil {
			err = fmt.Errorf("lsm: writing WAL %s: %w", lnum, err)
		}
	}
	if err == nil {
		for _, g := range group {
			r, rerr := newBatchReader(g.batch.Repr())
			if rerr == nil {
				rerr = mem.apply(r, r.seq)
			}
			if rerr != nil {
				err = fmt.Errorf("lsm: applying batch to memtable: %w", rerr)
				break
			}
		}
	}

	d.mu.Lock()
	if err == nil && syncedSize > 0 && d.opts.WALSyncRecordBytes > 0 &&
		syncedSize-d.mu.log.recordedSize >= d.opts.WALSyncRecordBytes {
		// Still the leader: no other write can sync or switch the WAL
		// while the manifest is written (see Options.WALSyncRecordBytes
		// for why not at every sync).
		err = d.recordWALSyncedLocked(lnum, syncedSize)
	}
	if err == nil {
		d.visibleSeq.Store(uint64(seq))
		d.mu.stats.walBytes += walBytes
		d.mu.stats.groups++
		d.mu.stats.writes += int64(len(group))
		if anySync {
			d.mu.stats.walSyncs++
		}
		for _, g := range group {
			d.mu.stats.bytesIngested += int64(g.batch.Len())
		}
	} else if d.mu.bgErr == nil && !base.IsCorruption(err) {
		// The WAL's state on disk is unknown after a failed write or
		// sync: acknowledging later writes could lose them silently.
		d.setBackgroundErrorLocked(err)
	}
	for _, g := range group {
		g.err = err
		g.done = true
		if g != w {
			g.cond.signal()
		}
	}
	d.popWritersLocked(len(group))
	d.mu.Unlock()
	return err
}

// popWritersLocked removes the first n writers from the commit queue and
// wakes the next leader, or, when the queue is empty, whoever waits for it
// to drain (Close). The queue keeps its array: the writers left move to the
// front, so that a Write does not allocate to queue itself (re-slicing
// from the front would shrink the capacity until append reallocates).
// REQUIRES: d.mu held.
func (d *DB) popWritersLocked(n int) {
	k := copy(d.mu.writers, d.mu.writers[n:])
	clear(d.mu.writers[k:])
	d.mu.writers = d.mu.writers[:k]
	if k > 0 {
		d.mu.writers[0].cond.signal()
	} else {
		d.mu.bgCond.Broadcast() // Close waits for the queue to drain
	}
}

// buildGroupLocked returns the writers of the next commit group: the leader
// and the writers queued behind it, up to maxGroupBytes. A non-sync leader
// does not take a sync writer, whose durability it would not provide.
// REQUIRES: d.mu held; the caller is the leader.
func (d *DB) buildGroupLocked() []*writer {
	leader := d.mu.writers[0]
	if leader.precommit != nil {
		return d.mu.writers[:1]
	}
	size, count := leader.batch.Len(), leader.batch.Count()
	maxSize := maxGroupBytes
	if size <= smallLeaderBytes {
		maxSize = size + smallLeaderBytes
	}
	n := 1
	for _, w := range d.mu.writers[1:] {
		// A writer without a batch is a Flush (or Checkpoint, BlobGC)
		// waiting for commit leadership, not a write to take along.
		if (w.sync && !leader.sync) || w.precommit != nil || w.batch == nil {
			break
		}
		// The whole group must fit the memtable the leader made room in.
		if size+w.batch.Len() > maxSize || !d.mu.mem.fits(size+w.batch.Len(), count+w.batch.Count()) {
			break
		}
		size += w.batch.Len()
		count += w.batch.Count()
		n++
	}
	return d.mu.writers[:n]
}

// makeRoomForWriteLocked makes sure the mutable memtable can take b,
// switching to a new memtable and WAL when it is full, delaying the write
// when L0 is filling up and stopping it while too many memtables or L0
// files wait for background work.
// REQUIRES: d.mu held; the caller is the commit leader.
func (d *DB) makeRoomForWriteLocked(b *Batch) error {
	slowed := false
	for {
		if d.mu.bgErr != nil {
			return d.mu.bgErr
		}
		if d.mu.closing {
			return ErrClosed
		}
		l0 := len(d.mu.versions.Current().Levels[0])
		switch {
		case !slowed && l0 >= d.opts.L0SlowdownWritesThreshold,
			!slowed && d.blobDebtLocked():
			// Delay each write a little rather than stop them all
			// later; this also hands the CPU to the compaction (or to
			// blob GC by compaction when it is behind: blob_relocate.go).
			slowed = true
			d.mu.stats.slowdowns++
			if l0 < d.opts.L0SlowdownWritesThreshold {
				d.mu.stats.blobSlowdowns++
			}
			d.mu.Unlock()
			start := time.Now()
			time.Sleep(slowdownWriteDelay)
			d.mu.Lock()
			d.mu.stats.slowdownTime += time.Since(start)
			continue
		case d.mu.mem.fits(b.Len(), b.Count()):
			return nil
		case d.immStopLocked():
			d.stallLocked()
			continue
		case l0 >= d.opts.L0StopWritesThreshold:
			d.stallLocked()
			continue
		}
		if err := d.switchMemTableLocked(b.Len(), b.Count()); err != nil {
			return err
		}
	}
}

// stallLocked waits for a background job to finish.
// REQUIRES: d.mu held.
func (d *DB) stallLocked() {
	d.mu.stats.stops++
	start := time.Now()
	d.maybeScheduleFlushLocked()
	d.maybeScheduleCompactionLocked()
	d.mu.bgCond.Wait()
	d.mu.stats.stopTime += time.Since(start)
}

// switchMemTableLocked queues the mutable memtable for flushing and starts a
// new memtable and WAL big enough for a batch of n bytes and count entries.
// The old WAL is synced first, so that only the newest WAL can have a torn
// tail after a crash.
// REQUIRES: d.mu held; the caller is the commit leader (or Flush holding
// commit leadership).
func (d *DB) switchMemTableLocked(n, count int) error {
	if d.mu.bgErr != nil {
		return d.mu.bgErr
	}
	newLogNum := d.mu.versions.NewFileNum()
	oldLog := d.mu.log
	d.mu.Unlock()
	var newFile vfs.File
	var err error
	if !d.opts.DisableWAL {
		if oldLog.w != nil {
			if err = oldLog.w.Flush(); err == nil {
				err = finishWAL(oldLog.file)
			}
			if err == nil {
				err = oldLog.file.Sync()
			}
			if cerr := oldLog.file.Close(); err == nil {
				err = cerr
			}
		}
		if err == nil {
			newFile, err = d.createWAL(newLogNum)
		}
	}
	d.mu.Lock()
	if err == nil && oldLog.w != nil {
		// The old WAL is complete: from now on a torn tail in it is
		// corruption, and recovery must find it whole until its memtable
		// is flushed.
		err = d.recordWALSyncedLocked(oldLog.num, oldLog.w.Size())
	}
	if err != nil {
		if oldLog.w != nil {
			// The old WAL was closed above, whatever the outcome.
			d.mu.log.w, d.mu.log.file = nil, nil
		}
		if newFile != nil {
			newFile.Close()
		}
		err = fmt.Errorf("lsm: switching WAL: %w", err)
		d.setBackgroundErrorLocked(err)
		return err
	}
	d.mu.log.num = newLogNum
	d.mu.log.recordedSize = 0
	d.mu.log.file = newFile
	if newFile != nil {
		d.mu.liveLogs = append(d.mu.liveLogs, newLogNum)
	}
	d.mu.log.w = nil
	if newFile != nil {
		d.mu.log.w = record.NewWriter(newFile)
	}
	// Memtables grow from initialMemTableBytes, doubling up to
	// MemTableSizeBytes: a small DB keeps a small arena, and the first
	// writes insert into a small, cache-friendly skiplist.
	size := d.mu.memNextSize
	d.mu.memNextSize = min(2*d.mu.memNextSize, d.opts.MemTableSizeBytes)
	if n == 0 && count == 0 {
		// A Flush (or Compact, Checkpoint): writes may have stopped, so
		// start small again rather than allocate (and zero) a full-size
		// arena that may stay empty.
		size = initialMemTableSize(d.opts)
		d.mu.memNextSize = min(2*size, d.opts.MemTableSizeBytes)
	}
	if need := int64(n) + int64(count)*memTableArenaOverheadBytes + 1<<16; need > size {
		size = need
	}
	d.mu.imm = append(d.mu.imm, d.mu.mem)
	d.mu.mem = d.newMemTable(size, newLogNum)
	d.updateReadStateLocked()
	d.maybeScheduleFlushLocked()
	return nil
}

// initialMemTableBytes is the size of a DB's first memtable (or
// MemTableSizeBytes if smaller); each next one doubles, up to
// MemTableSizeBytes.
const initialMemTableBytes = 256 << 10

func initialMemTableSize(o *Options) int64 {
	if o.testInitialMemTableBytes > 0 {
		return min(o.testInitialMemTableBytes, o.MemTableSizeBytes)
	}
	return min(initialMemTableBytes, o.MemTableSizeBytes)
}

// createWAL creates WAL n and makes its directory entry durable. With
// Options.WALBufferedWrites the file is a bufferedWAL: writes to it reach
// the file in the background.
func (d *DB) createWAL(n base.FileNum) (vfs.File, error) {
	f, err := d.fs.Create(base.MakeFilepath(d.dirname, base.FileTypeLog, n))
	if err != nil {
		return nil, err
	}
	if err := d.syncDir(); err != nil {
		f.Close()
		return nil, err
	}
	wf := newWALFile(f, d.opts)
	if d.opts.WALBufferedWrites {
		return newBufferedWAL(wf), nil
	}
	return wf, nil
}

// syncDir makes the directory's entries durable.
func (d *DB) syncDir() error { return vfs.SyncDir(d.fs, d.dirname) }

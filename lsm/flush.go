package lsm

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/internal/rangedel"
	"github.com/cairnkv/cairn/lsm/sst"
	"github.com/cairnkv/cairn/lsm/version"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// Flush writes every memtable to L0 and waits until it is done. The
// mutable memtable is switched out first, so Flush makes every write
// acknowledged before it durable in SSTs. When it returns, the WALs of the
// flushed memtables are removed.
func (d *DB) Flush() error {
	if err := d.checkOpen(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.acquireCommitLeadershipLocked()
	var err error
	if d.mu.closing {
		// A Flush racing Close (which the DB's contract forbids): Close
		// may have dropped the memtables already; do not switch them.
		d.releaseCommitLeadershipLocked(w)
		return ErrClosed
	}
	if !d.mu.mem.empty() {
		err = d.switchMemTableLocked(0, 0)
	}
	var target *memTable
	if n := len(d.mu.imm); n > 0 {
		target = d.mu.imm[n-1]
		target.forceFlush = true
	}
	d.releaseCommitLeadershipLocked(w)
	if err != nil {
		return err
	}
	for target != nil && d.mu.bgErr == nil && !d.mu.closing && d.queuedLocked(target) {
		d.maybeScheduleFlushLocked()
		d.mu.bgCond.Wait()
	}
	if d.mu.bgErr != nil {
		return d.mu.bgErr
	}
	if d.mu.closing {
		return ErrClosed
	}
	// The flush goroutine removes the flushed memtables' WALs after it
	// has taken them off the queue: wait for it.
	d.mu.Unlock()
	d.deleteObsoleteFiles()
	d.mu.Lock()
	return nil
}

func (d *DB) queuedLocked(m *memTable) bool {
	for _, x := range d.mu.imm {
		if x == m {
			return true
		}
	}
	return false
}

// acquireCommitLeadershipLocked queues a writer that carries no batch and
// waits until it leads the commit queue: while it does, no write can touch
// the WAL or the memtables.
// REQUIRES: d.mu held.
func (d *DB) acquireCommitLeadershipLocked() *writer {
	w := &writer{}
	w.cond.init(&d.mu.Mutex)
	d.mu.writers = append(d.mu.writers, w)
	for d.mu.writers[0] != w {
		w.cond.wait()
	}
	return w
}

// releaseCommitLeadershipLocked removes w from the front of the queue.
// REQUIRES: d.mu held; w leads the queue.
func (d *DB) releaseCommitLeadershipLocked(w *writer) {
	if d.mu.writers[0] != w {
		panic("lsm: releasing commit leadership not held")
	}
	d.popWritersLocked(1)
}

// maybeScheduleFlushLocked starts the flush goroutine if memtables wait.
// REQUIRES: d.mu held.
func (d *DB) maybeScheduleFlushLocked() {
	if d.mu.flushing || !d.flushReadyLocked() || d.mu.closing || d.mu.bgErr != nil {
		return
	}
	d.mu.flushing = true
	d.bgWG.Add(1)
	go d.flushLoop()
}

// flushLoop flushes queued memtables, oldest first, until none is left.
func (d *DB) flushLoop() {
	defer d.bgWG.Done()
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.flushReadyLocked() && !d.mu.closing && d.mu.bgErr == nil {
		if err := d.flushOneLocked(); err != nil {
			d.setBackgroundErrorLocked(err)
		}
	}
	d.mu.flushing = false
	d.mu.bgCond.Broadcast()
}

// flushReadyLocked reports whether the queued memtables should be flushed
// now: a Flush waits for one of them, writes are stopped until one is
// flushed, or together they hold at least half of MemTableSizeBytes. The
// memtables grow from initialMemTableBytes to MemTableSizeBytes (see
// switchMemTableLocked); the small first ones wait and are flushed
// together into one table instead of one small L0 table each (Pebble).
// REQUIRES: d.mu held.
func (d *DB) flushReadyLocked() bool {
	if len(d.mu.imm) == 0 {
		return false
	}
	var size int64
	for _, m := range d.mu.imm {
		if m.forceFlush {
			return true
		}
		size += m.capacityBytes
	}
	return size >= d.opts.MemTableSizeBytes/2 || d.immStopLocked()
}

// immStopLocked reports whether the queued memtables stop writes: they
// hold MemTableStopWritesThreshold-1 full-size memtables' worth of arena.
// REQUIRES: d.mu held.
func (d *DB) immStopLocked() bool {
	var size int64
	for _, m := range d.mu.imm {
		size += m.capacityBytes
	}
	return size >= int64(d.opts.MemTableStopWritesThreshold-1)*d.opts.MemTableSizeBytes
}

// flushOneLocked writes the queued memtables to one L0 table and records
// it in the manifest together with the WAL number below which WALs are no
// longer needed.
// REQUIRES: d.mu held (released while writing the table).
func (d *DB) flushOneLocked() error {
	ms := slices.Clone(d.mu.imm)
	for _, m := range ms {
		m.ref() // the flush's own, held while it reads them
	}
	unrefAll := func() {
		for _, m := range ms {
			m.unref()
		}
	}
	fileNum := d.mu.versions.NewFileNum()
	d.mu.Unlock()
	start := time.Now()
	meta, blobs, err := d.writeMemTables(ms, fileNum)
	d.mu.Lock()
	if err != nil {
		unrefAll() // the lists still hold them: no release under d.mu
		return fmt.Errorf("lsm: flushing memtable to table %s: %w", fileNum, err)
	}
	ve := &version.VersionEdit{}
	nextLog := d.mu.mem.logNum
	if len(d.mu.imm) > len(ms) {
		nextLog = d.mu.imm[len(ms)].logNum
	}
	ve.LogNumber = nextLog
	if meta != nil {
		ve.NewFiles = append(ve.NewFiles, version.NewFile{Level: 0, Meta: meta})
	}
	ve.NewBlobFiles = blobs
	if err := d.mu.versions.LogAndApply(&d.mu.Mutex, ve); err != nil {
		unrefAll()
		return fmt.Errorf("lsm: recording flush in manifest: %w", err)
	}
	for _, b := range blobs {
		d.mu.stats.blobBytesWritten += int64(b.Size)
	}
	d.mu.imm = d.mu.imm[len(ms):]
	for _, m := range ms {
		d.retiredMemFilter.checked.Add(m.bloomChecked.Load())
		d.retiredMemFilter.useful.Add(m.bloomUseful.Load())
	}
	d.mu.stats.flushes++
	if meta != nil {
		d.mu.stats.flushBytes += int64(meta.Size)
		d.mu.stats.levelBytesWritten[0] += int64(meta.Size)
	}
	d.updateReadStateLocked()
	d.mu.bgCond.Broadcast()
	d.maybeScheduleCompactionLocked()
	d.mu.Unlock()
	// Drop the flush's references and the lists' (the memtables left
	// d.mu.imm above): unless a reader still holds an older readState,
	// the arenas are released here, outside d.mu.
	unrefAll()
	unrefAll()
	d.flushInstalled(meta, time.Since(start))
	d.deleteObsoleteFiles()
	d.mu.Lock()
	return nil
}

// writeMemTable writes m's entries and range tombstones into table
// fileNum, syncs it and its directory entry. With key-value separation on,
// values of at least MinBlobSize go to blob files (returned), synced
// before the table. It returns nil metadata, and leaves no file, when m
// holds nothing.
func (d *DB) writeMemTable(m *memTable, fileNum base.FileNum) (*version.FileMetadata, []*version.BlobFileMetadata, error) {
	return d.writeMemTables([]*memTable{m}, fileNum)
}

// writeMemTables is writeMemTable of the merged contents of ms (their
// sequence numbers are disjoint).
func (d *DB) writeMemTables(ms []*memTable, fileNum base.FileNum) (*version.FileMetadata, []*version.BlobFileMetadata, error) {
	var it base.InternalIterator
	var raw []base.RangeTombstone
	for _, m := range ms {
		raw = append(raw, m.rawTombstones()...)
	}
	if len(ms) == 1 {
		it = ms[0].newIter()
	} else {
		iters := make([]base.InternalIterator, len(ms))
		for i, m := range ms {
			iters[i] = m.newIter()
		}
		it = newMergingIter(iters)
	}
	it.First()
	tombs := rangedel.FragmentTombstones(raw)
	if !it.Valid() && len(tombs) == 0 {
		return nil, nil, it.Close()
	}
	sep := d.newBlobSeparator()
	var blobs []*version.BlobFileMetadata
	// oneVersion: no user key repeats and nothing is deleted (see
	// FileMetadata.OneVersionPerKey), as after a fill of distinct keys.
	oneVersion := len(tombs) == 0
	var lastUkey []byte
	meta, err := d.writeTable(fileNum, func(w *sst.Writer) error {
		for ; it.Valid(); it.Next() {
			if oneVersion {
				ukey, _, kind, _ := base.ParseInternalKey(it.Key())
				if kind == base.KindDelete || (lastUkey != nil && bytes.Equal(ukey, lastUkey)) {
					oneVersion = false
				}
				lastUkey = append(lastUkey[:0], ukey...)
			}
			if err := sep.add(w, it.Key(), it.Value()); err != nil {
				return err
			}
		}
		if err := it.Close(); err != nil {
			return err
		}
		if err := addTombstones(w, tombs); err != nil {
			return err
		}
		var err error
		blobs, err = sep.finish()
		return err
	})
	if err != nil {
		sep.abandon()
		return nil, nil, err
	}
	meta.OneVersionPerKey = oneVersion
	sep.setTableRefs(meta)
	return meta, blobs, nil
}

func addTombstones(w *sst.Writer, frags []rangedel.Fragment) error {
	for _, f := range frags {
		for _, seq := range f.Seqs {
			if err := w.AddRangeTombstone(f.Start, f.End, seq); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeTable creates table fileNum, lets fill add its contents, and
// finishes it (see tableOutput.finish). On error the file is removed.
func (d *DB) writeTable(fileNum base.FileNum, fill func(w *sst.Writer) error) (*version.FileMetadata, error) {
	out, w, err := d.startTable(fileNum)
	if err != nil {
		return nil, err
	}
	if err := fill(w); err != nil {
		out.abandon(d)
		return nil, err
	}
	return out.finish(d, w)
}

// tableOutput is a table being written by a flush or a compaction.
type tableOutput struct {
	fileNum base.FileNum
	file    vfs.File
}

func (d *DB) startTable(n base.FileNum) (*tableOutput, *sst.Writer, error) {
	f, err := d.fs.Create(base.MakeFilepath(d.dirname, base.FileTypeTable, n))
	if err != nil {
		return nil, nil, err
	}
	return &tableOutput{fileNum: n, file: f}, sst.NewWriter(f, d.opts.sstWriterOptions()), nil
}

// finish completes the table, syncs and closes it and syncs the directory,
// so that a manifest edit naming it never outlives it. On error the file
// is removed.
func (t *tableOutput) finish(d *DB, w *sst.Writer) (*version.FileMetadata, error) {
	md, err := w.Finish()
	if err == nil {
		err = t.file.Sync()
	}
	if cerr := t.file.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.syncDir()
	}
	if err != nil {
		d.removeFile(base.FileTypeTable, t.fileNum)
		return nil, err
	}
	return tableFileMeta(t.fileNum, md), nil
}

// tableFileMeta is the version's record of the table fileNum, which a
// writer finished with md.
func tableFileMeta(fileNum base.FileNum, md sst.Metadata) *version.FileMetadata {
	return &version.FileMetadata{
		FileNum:           fileNum,
		Size:              md.Size,
		Smallest:          md.Smallest,
		Largest:           md.Largest,
		SmallestSeq:       md.SmallestSeq,
		LargestSeq:        md.LargestSeq,
		NumEntries:        md.NumEntries,
		NumDeletions:      md.NumDeletions,
		NumRangeDeletions: md.NumRangeDeletions,
	}
}

// abandon closes and removes an unfinished table.
func (t *tableOutput) abandon(d *DB) {
	t.file.Close()
	d.removeFile(base.FileTypeTable, t.fileNum)
}

package lsm

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/internal/rangedel"
	"github.com/cairnkv/cairn/lsm/sst"
	"github.com/cairnkv/cairn/lsm/version"
)

// A checkpoint is made in two steps, so that a caller that must stop its
// own writes to name the point it checkpoints (the FSM: the applied index
// of a raft snapshot) stops them only for the first:
//
//  1. PrepareCheckpoint captures the state: under d.mu, it takes the
//     visible sequence number S and references to the current version and
//     to every non-empty memtable. No I/O and no wait: when it is free
//     (no WAL to switch, no commit or flush in progress) it first freezes
//     the mutable memtable (switches it out and asks for its flush, as
//     Flush does) so that the writes after S land in a memtable of their
//     own; otherwise it captures the mutable memtable as it is.
//     Microseconds either way.
//  2. PreparedCheckpoint.Write writes that state into a directory while
//     writes go on. It first makes the DB hold the captured memtables in
//     tables (it waits for their flush, or flushes if one is still the
//     mutable memtable), so that the DB is durable up to S when it
//     returns. Then, if no table of the DB's current version holds a write
//     at or after S, the current version is exactly the captured state:
//     the checkpoint is hard links to its tables and blob files and a
//     manifest, as a checkpoint always was. That is the usual case when
//     the capture froze the memtable: the flush it asked for starts at
//     once and writes the frozen memtables alone. Otherwise (the flush
//     also took later writes: a memtable captured unfrozen, or switched
//     out before the flush began) the checkpoint is hard links to the
//     captured version's files plus one L0 table of its own: the entries
//     of the captured memtables below S (point entries and range
//     tombstones; later writes in them are skipped). Either way the
//     manifest says LastSeq S-1.
//
// Why the capture is exact. Under d.mu, every write below S was applied to
// a memtable that is d.mu.mem, in d.mu.imm, or flushed into the current
// version (a flush installs its table and drops its memtables from d.mu.imm
// in one critical section), and nothing at or above S is in the version
// (memtables are flushed only once switched out, and a switch happens only
// at the head of the commit queue, after every earlier group is visible).
// The captured memtables hold every entry newer than the version's, so
// their table is the newest L0 file. Referenced, the version's files
// outlive any compaction or blob GC that drops them meanwhile, and the
// memtables' arenas outlive their flush. A later version whose files are
// all older than S and into which every captured memtable was flushed
// holds every entry below S, less only what compactions dropped as
// shadowed or deleted by entries that are also below S: the same state.
//
// The write is crash safe as Checkpoint always was: every file is synced
// (links need no sync of their data), then the manifest, then the
// directory, and only then CURRENT is set; a directory without CURRENT does
// not open (with ErrorIfNotExists) and is removed by whoever made it.
//
// What the second form costs: the captured memtables are written once
// more, into the checkpoint's own table, on top of their flush in the DB,
// and that table's bytes are the checkpoint's alone (not shared with the
// DB). Values are kept inline in it, whatever MinBlobSize; a compaction of
// the opened checkpoint separates them.

// Checkpoint writes a consistent copy of the DB into destDir, which must not
// exist: every write acknowledged before the call is in it, and in the
// DB's tables (flushed) when it returns. It captures and writes the state
// as PrepareCheckpoint and PreparedCheckpoint.Write do (without writes
// during the call, the checkpoint is the DB's own files). Tables and blob files are hard links where the file system allows
// (copies otherwise), so a checkpoint costs little space until compaction
// rewrites the originals. The result is a DB directory that Open accepts,
// and the directory is fsynced before Checkpoint returns.
func (d *DB) Checkpoint(destDir string) error {
	if err := d.checkOpen(); err != nil {
		return err
	}
	if err := checkpointDirFree(d, destDir); err != nil {
		return err
	}
	p, err := d.PrepareCheckpoint()
	if err != nil {
		return err
	}
	defer p.Release()
	return p.Write(destDir)
}

// PreparedCheckpoint is the state of a DB captured by PrepareCheckpoint, to
// be written out by Write. Until Released it holds the captured version
// (its files are not deleted) and memtables (their arenas are not freed).
// Its methods are safe for concurrent use.
type PreparedCheckpoint struct {
	d *DB
	// seq is the visible sequence number at the capture: the checkpoint
	// holds exactly the writes below it.
	seq base.SeqNum

	mu struct {
		sync.Mutex
		// v and mems are the captured version and memtables (newest
		// first), referenced; nil once released.
		v    *version.Version
		mems []*memTable
		// writing counts the Writes in progress: Release waits for them.
		writing int
		cond    sync.Cond
	}
}

// PrepareCheckpoint captures the DB's current state (every write
// acknowledged before the call, none that starts after it returns) for
// Write. It holds d.mu for a few microseconds, does no I/O and waits for
// nothing, so a caller may call it while holding a lock its own writers
// wait on, and do the Write after releasing it. Release the result when
// done; Release it before Close (a PreparedCheckpoint released after Close
// only frees memory).
func (d *DB) PrepareCheckpoint() (*PreparedCheckpoint, error) {
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	p := &PreparedCheckpoint{d: d}
	p.mu.cond.L = &p.mu.Mutex
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.closing {
		return nil, ErrClosed
	}
	if d.mu.bgErr != nil {
		// The DB refuses writes: a checkpoint would be of a state whose
		// relation to what reached disk is unknown.
		return nil, d.mu.bgErr
	}
	if d.opts.DisableWAL && len(d.mu.writers) == 0 && !d.mu.flushing && !d.mu.mem.empty() {
		// Freeze the mutable memtable: commit leadership is free (the
		// queue is empty), and without a WAL the switch does no I/O.
		w := d.acquireCommitLeadershipLocked()
		err := d.switchMemTableLocked(0, 0)
		if err == nil {
			d.mu.imm[len(d.mu.imm)-1].forceFlush = true
			d.maybeScheduleFlushLocked()
		}
		d.releaseCommitLeadershipLocked(w)
		if err != nil {
			return nil, err
		}
	}
	p.seq = base.SeqNum(d.visibleSeq.Load())
	p.mu.v = d.mu.versions.Current()
	p.mu.v.Ref()
	// An empty memtable holds nothing below seq (an entry counts as soon
	// as it is applied, before it is visible).
	for i := len(d.mu.imm) - 1; i >= -1; i-- {
		m := d.mu.mem
		if i >= 0 {
			m = d.mu.imm[i]
		}
		if !m.empty() {
			m.ref() // d.mu holds the lists' reference
			p.mu.mems = append(p.mu.mems, m)
		}
	}
	return p, nil
}

// currentIsCapturedLocked reports whether the DB's current version holds
// exactly the captured state: every captured memtable has been flushed
// into it (none is d.mu.mem or queued any more), and none of its files
// holds a write at or after the capture. Then a checkpoint can be made of
// the DB's own files alone.
// REQUIRES: d.mu held; a Write in progress (p.mu.mems is set).
func (p *PreparedCheckpoint) currentIsCapturedLocked() bool {
	d := p.d
	for _, m := range p.mu.mems {
		if m == d.mu.mem || d.queuedLocked(m) {
			return false
		}
	}
	v := d.mu.versions.Current()
	for _, files := range v.Levels {
		for _, f := range files {
			if f.LargestSeq >= p.seq {
				return false
			}
		}
	}
	return true
}

// flushCaptured makes the DB hold every captured memtable in its tables:
// it waits for the flush of those switched out (asking for it), and
// flushes if one is still the mutable memtable.
// REQUIRES: a Write in progress (p.mu.mems is set).
func (p *PreparedCheckpoint) flushCaptured() error {
	d := p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		if d.mu.bgErr != nil {
			return d.mu.bgErr
		}
		if d.mu.closing {
			return ErrClosed
		}
		var newest *memTable // the newest captured memtable still queued
		for _, m := range p.mu.mems {
			if m == d.mu.mem {
				// Captured unfrozen: switch it out and flush.
				d.mu.Unlock()
				err := d.Flush()
				d.mu.Lock()
				return err
			}
			if newest == nil && d.queuedLocked(m) {
				newest = m // p.mu.mems is newest first
			}
		}
		if newest == nil {
			return nil
		}
		newest.forceFlush = true
		d.maybeScheduleFlushLocked()
		d.mu.bgCond.Wait()
	}
}

// Release drops the captured state. It waits for a Write in progress;
// later calls do nothing, and a Write after it fails.
func (p *PreparedCheckpoint) Release() {
	p.mu.Lock()
	for p.mu.writing > 0 {
		p.mu.cond.Wait()
	}
	v, mems := p.mu.v, p.mu.mems
	p.mu.v, p.mu.mems = nil, nil
	p.mu.Unlock()
	if v == nil {
		return
	}
	v.Unref()
	for _, m := range mems {
		m.unref()
	}
}

// Write writes the captured state into destDir, which must not exist, as a
// DB directory that Open accepts, fsynced before Write returns. Writes to
// the DB go on meanwhile and are not in it. When Write returns, the DB's
// own tables hold every captured write (it waits for, or makes, their
// flush). On error nothing is left in destDir. Write may be called more
// than once (into other directories), but not concurrently with Close.
func (p *PreparedCheckpoint) Write(destDir string) (err error) {
	d := p.d
	if err := d.checkOpen(); err != nil {
		return err
	}
	if err := checkpointDirFree(d, destDir); err != nil {
		return err
	}
	p.mu.Lock()
	v, mems := p.mu.v, p.mu.mems
	if v != nil {
		p.mu.writing++
	}
	p.mu.Unlock()
	if v == nil {
		return fmt.Errorf("lsm: checkpoint: %w (prepared checkpoint released)", ErrClosed)
	}
	defer func() {
		p.mu.Lock()
		p.mu.writing--
		p.mu.cond.Broadcast()
		p.mu.Unlock()
	}()
	if err := p.flushCaptured(); err != nil {
		return err
	}
	d.mu.Lock()
	if p.currentIsCapturedLocked() {
		// The DB's own files alone: no table of the memtables.
		v, mems = d.mu.versions.Current(), nil
		v.Ref()
		defer v.Unref()
	}
	tableNum := d.mu.versions.NewFileNum()
	manifestNum := d.mu.versions.NewFileNum()
	nextFileNum := d.mu.versions.NewFileNum()
	d.mu.Unlock()

	if err := mkdirAllDurable(d.fs, destDir); err != nil {
		return fmt.Errorf("lsm: checkpoint: %w", err)
	}
	defer func() {
		if err != nil {
			d.fs.RemoveAll(destDir)
		}
	}()
	ve := &version.VersionEdit{
		ComparerName: version.DefaultComparerName,
		LogNumber:    nextFileNum,
		NextFileNum:  nextFileNum,
		LastSeq:      p.seq - 1,
	}
	meta, err := d.writeCheckpointTable(filepath.Join(destDir, base.MakeFilename(base.FileTypeTable, tableNum)), tableNum, mems, p.seq)
	if err != nil {
		return fmt.Errorf("lsm: checkpoint of the memtables into table %s: %w", tableNum, err)
	}
	for level, files := range v.Levels {
		for _, f := range files {
			name := base.MakeFilename(base.FileTypeTable, f.FileNum)
			if err := d.linkOrCopy(filepath.Join(d.dirname, name), filepath.Join(destDir, name)); err != nil {
				return fmt.Errorf("lsm: checkpoint of table %s: %w", f.FileNum, err)
			}
			ve.AddFile(level, f)
		}
	}
	if meta != nil {
		// The newest L0 file: the memtables hold only writes newer than
		// every table of the version.
		ve.AddFile(0, meta)
	}
	for n := range v.BlobFiles {
		name := base.MakeFilename(base.FileTypeBlob, n)
		if err := d.linkOrCopy(filepath.Join(d.dirname, name), filepath.Join(destDir, name)); err != nil {
			return fmt.Errorf("lsm: checkpoint of blob file %s: %w", n, err)
		}
	}
	ve.AddBlobSnapshot(v)
	if err := version.WriteManifest(d.fs, destDir, manifestNum, ve); err != nil {
		return fmt.Errorf("lsm: checkpoint manifest: %w", err)
	}
	return nil
}

// writeCheckpointTable writes into the table at path (number fileNum) the
// entries of mems (point entries and range tombstones) with a sequence
// number below seq, and syncs it; the caller syncs its directory. The
// memtables may still take writes (at or above seq), which it skips. It
// returns nil metadata, and leaves no file, when there is no such entry.
func (d *DB) writeCheckpointTable(path string, fileNum base.FileNum, mems []*memTable, seq base.SeqNum) (_ *version.FileMetadata, err error) {
	var raw []base.RangeTombstone
	for _, m := range mems {
		for _, t := range m.rawTombstones() {
			if t.Seq < seq {
				raw = append(raw, t)
			}
		}
	}
	tombs := rangedel.FragmentTombstones(raw)
	iters := make([]base.InternalIterator, len(mems))
	for i, m := range mems {
		iters[i] = m.newIter()
	}
	it := newMergingIter(iters)
	defer func() {
		if cerr := it.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	visible := func() bool {
		for ; it.Valid(); it.Next() {
			if base.DecodeTrailer(it.Key()).SeqNum() < seq {
				return true
			}
		}
		return false
	}
	it.First()
	if !visible() && len(tombs) == 0 {
		return nil, it.Error()
	}
	f, err := d.fs.Create(path)
	if err != nil {
		return nil, err
	}
	w := sst.NewWriter(f, d.opts.sstWriterOptions())
	for ok := it.Valid(); ok; ok = visible() {
		if err := w.Add(it.Key(), it.Value()); err != nil {
			f.Close()
			return nil, err
		}
		it.Next()
	}
	if err := it.Error(); err != nil {
		f.Close()
		return nil, err
	}
	if err := addTombstones(w, tombs); err != nil {
		f.Close()
		return nil, err
	}
	md, err := w.Finish()
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return tableFileMeta(fileNum, md), nil
}

// checkpointDirFree returns an error unless dir does not exist.
func checkpointDirFree(d *DB, dir string) error {
	if _, err := d.fs.Stat(dir); err == nil {
		return fmt.Errorf("lsm: checkpoint directory %s already exists", dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("lsm: checkpoint: %w", err)
	}
	return nil
}

// linkOrCopy hard-links src to dst, or copies it (synced) if the file
// system refuses the link.
func (d *DB) linkOrCopy(src, dst string) error {
	if err := d.fs.Link(src, dst); err == nil {
		return nil
	}
	in, err := d.fs.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return d.writeFileSynced(dst, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// writeFileSynced creates name, lets fill write it, syncs and closes it.
func (d *DB) writeFileSynced(name string, fill func(w io.Writer) error) error {
	f, err := d.fs.Create(name)
	if err != nil {
		return err
	}
	err = fill(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

package lsm

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/record"
	"github.com/cairnkv/cairn/lsm/version"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// Open opens the DB in dirname, creating it if needed, and recovers it:
// the manifest gives the tables, and the WALs not yet flushed are replayed
// into a memtable that is written to L0 before Open returns (so that a WAL
// is never replayed twice). Only one DB, in any process, may have a
// directory open at a time.
func Open(dirname string, opts *Options) (db *DB, err error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	fs := o.FS
	if err := mkdirAllDurable(fs, dirname); err != nil {
		return nil, fmt.Errorf("lsm: creating directory %s: %w", dirname, err)
	}
	lock, err := fs.Lock(base.MakeFilepath(dirname, base.FileTypeLock, 0))
	if err != nil {
		return nil, fmt.Errorf("lsm: directory %s is in use (another DB holds its lock): %w", dirname, err)
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()

	d := &DB{
		dirname: dirname,
		opts:    o,
		fs:      fs,
		lock:    lock,
		cleanCh: make(chan struct{}, 1),
		closeCh: make(chan struct{}),
		sweptCh: make(chan struct{}),
	}
	d.cache = o.Cache
	if d.cache == nil {
		d.cache = cache.New(o.CacheSizeBytes)
	}
	d.cacheID = d.cache.NewID()
	d.tables = newTableCache(fs, dirname, d.cache, d.cacheID)
	d.tables.ownCache = o.Cache == nil
	d.tables.tracer = &d.tracer
	d.initBlobStore()
	d.mu.bgCond.L = &d.mu.Mutex

	_, statErr := fs.Stat(base.MakeFilepath(dirname, base.FileTypeCurrent, 0))
	exists := statErr == nil
	switch {
	case statErr != nil && !errors.Is(statErr, os.ErrNotExist):
		return nil, fmt.Errorf("lsm: %w", statErr)
	case exists && o.ErrorIfExists:
		return nil, fmt.Errorf("lsm: DB %s already exists", dirname)
	case !exists && o.ErrorIfNotExists:
		return nil, fmt.Errorf("lsm: DB %s does not exist", dirname)
	}
	vopts := version.Options{OnObsolete: d.signalCleaner}
	var vs *version.VersionSet
	if exists {
		vs, err = version.Load(fs, dirname, vopts)
	} else {
		vs, err = version.Create(fs, dirname, vopts)
	}
	if err != nil {
		return nil, fmt.Errorf("lsm: opening manifest: %w", err)
	}
	d.mu.versions = vs
	defer func() {
		if err != nil {
			vs.Close()
			d.tables.close()
			d.closeBlobStore()
		}
	}()

	names, err := fs.List(dirname)
	if err != nil {
		return nil, err
	}
	var logs []base.FileNum
	staleLogsBelow := vs.LogNumber()
	for _, name := range names {
		ft, n, ok := base.ParseFilename(name)
		if !ok {
			continue
		}
		vs.MarkFileNumUsed(n)
		if ft == base.FileTypeLog && n >= vs.LogNumber() {
			logs = append(logs, n)
		}
	}
	slices.Sort(logs)

	// WALs the manifest records a synced size of must be there, and intact
	// up to that size. One that is missing is corruption; with
	// point-in-time recovery, the replay stops before it instead.
	d.mu.Lock()
	synced := vs.WALsSynced()
	d.mu.Unlock()
	for _, n := range slices.Sorted(maps.Keys(synced)) {
		if slices.Contains(logs, n) {
			continue
		}
		if o.WALRecovery != WALRecoverPointInTime {
			return nil, base.CorruptionErrorf("lsm: WAL %s is missing, but the manifest records it synced at %d bytes and not yet flushed",
				n, synced[n])
		}
		o.Logger.Printf("lsm: WAL %s is missing (the manifest records it synced at %d bytes): recovering up to it", n, synced[n])
		logs = slices.DeleteFunc(logs, func(l base.FileNum) bool { return l > n })
		break
	}

	// Replay the WALs into memtables, flushing each one that fills.
	ve := &version.VersionEdit{}
	maxSeq := vs.LastSeq()
	// Recovery holds the one reference to mem; the memtable is dropped as
	// soon as it is written (or recovery fails).
	mem := d.newMemTable(o.MemTableSizeBytes, 0)
	defer func() { mem.unref() }()
	flushMem := func() error {
		if mem.empty() {
			return nil
		}
		meta, blobs, err := d.writeMemTable(mem, vs.NewFileNum())
		if err != nil {
			return fmt.Errorf("lsm: flushing recovered memtable: %w", err)
		}
		if meta != nil {
			ve.NewFiles = append(ve.NewFiles, version.NewFile{Level: 0, Meta: meta})
		}
		ve.NewBlobFiles = append(ve.NewBlobFiles, blobs...)
		mem.unref()
		mem = d.newMemTable(o.MemTableSizeBytes, 0)
		return nil
	}
	for _, n := range logs {
		// Untracked WALs have size 0: no check. A recorded size past
		// what an int64 holds cannot be met and reports the WAL corrupt.
		stop, err := d.replayWAL(n, int64(min(synced[n], math.MaxInt64)), &mem, &maxSeq, flushMem)
		if err != nil {
			return nil, err
		}
		if stop {
			break // point-in-time recovery: nothing after the damage
		}
	}
	if err := flushMem(); err != nil {
		return nil, err
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	newLogNum := vs.NewFileNum()
	ve.LogNumber = newLogNum
	if maxSeq > vs.LastSeq() {
		vs.SetLastSeq(maxSeq)
	}
	if err := vs.LogAndApply(&d.mu.Mutex, ve); err != nil {
		return nil, fmt.Errorf("lsm: recording recovery in manifest: %w", err)
	}
	for l := range version.NumLevels {
		d.mu.stats.bytesAtOpen += levelSize(vs.Current(), l)
	}
	if !o.DisableWAL {
		f, err := d.createWAL(newLogNum)
		if err != nil {
			return nil, fmt.Errorf("lsm: creating WAL: %w", err)
		}
		d.mu.log.num, d.mu.log.file, d.mu.log.w = newLogNum, f, record.NewWriter(f)
		d.mu.liveLogs = append(d.mu.liveLogs, newLogNum)
	}
	d.mu.liveLogs = append(logs, d.mu.liveLogs...)
	d.mu.mem = d.newMemTable(initialMemTableSize(o), newLogNum)
	d.mu.memNextSize = min(2*initialMemTableSize(o), o.MemTableSizeBytes)
	d.visibleSeq.Store(uint64(vs.LastSeq() + 1))
	d.updateReadStateLocked()

	// Files left behind, and the WALs just replayed, are deleted by the
	// cleaner after Open returns (see obsolete.go): unlinking large tables
	// is the slowest part of a reopen, and no durability rests on it.
	d.bgWG.Add(1)
	go d.cleanerLoop(names, staleLogsBelow)
	d.maybeScheduleCompactionLocked()
	d.maybeScheduleBlobGCLocked()
	return d, nil
}

// replayWAL applies the batches of WAL n to *mem, calling flushMem when the
// memtable is full. stop reports that point-in-time recovery met damage and
// later WALs must be ignored. syncedSize is the size up to which the
// manifest records the WAL as durable (0 if it records nothing): the
// records must cover at least that much, or the WAL is corrupt.
func (d *DB) replayWAL(n base.FileNum, syncedSize int64, mem **memTable, maxSeq *base.SeqNum, flushMem func() error) (stop bool, err error) {
	name := base.MakeFilepath(d.dirname, base.FileTypeLog, n)
	f, err := d.fs.Open(name)
	if err != nil {
		return false, fmt.Errorf("lsm: opening WAL %s: %w", n, err)
	}
	defer f.Close()
	var ropts []record.ReaderOption
	if d.opts.WALRecovery == WALRecoverPointInTime {
		ropts = append(ropts, record.WithPointInTimeRecovery())
	}
	r := record.NewReader(f, ropts...)
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return false, fmt.Errorf("lsm: replaying WAL %s: %w", n, err)
		}
		br, err := newBatchReader(rec)
		if err != nil {
			if d.opts.WALRecovery == WALRecoverPointInTime {
				d.opts.Logger.Printf("lsm: WAL %s: stopping recovery at a malformed batch: %v", n, err)
				return true, nil
			}
			return false, fmt.Errorf("lsm: replaying WAL %s: %w", n, err)
		}
		if br.count == 0 {
			continue
		}
		if !(*mem).fits(len(rec), int(br.count)) {
			if err := flushMem(); err != nil {
				return false, err
			}
			if !(*mem).fits(len(rec), int(br.count)) {
				size := int64(len(rec)) + int64(br.count)*memTableArenaOverheadBytes + 1<<16
				(*mem).unref() // empty: flushMem just wrote it
				*mem = d.newMemTable(size, 0)
			}
		}
		if err := (*mem).apply(br, br.seq); err != nil {
			return false, fmt.Errorf("lsm: replaying WAL %s: %w", n, err)
		}
		*maxSeq = max(*maxSeq, br.seq+base.SeqNum(br.count)-1)
	}
	if end := r.EndOffset(); end < syncedSize {
		// A crash tears only what was not yet synced: damage (or a
		// truncation) below the synced size is not a torn tail.
		if d.opts.WALRecovery == WALRecoverPointInTime {
			d.opts.Logger.Printf("lsm: WAL %s: damaged at offset %d, below its synced size %d: recovering up to the damage", n, end, syncedSize)
			return true, nil
		}
		return false, base.CorruptionErrorf("lsm: replaying WAL %s: its intact records end at offset %d, below the %d bytes the manifest records as synced (damaged or truncated durable data, not a torn tail)",
			n, end, syncedSize)
	}
	if r.TornTail() {
		d.opts.Logger.Printf("lsm: WAL %s: dropped a torn tail at offset %d", n, r.TornOffset())
		if d.opts.WALRecovery == WALRecoverPointInTime {
			return true, nil
		}
	}
	return false, nil
}

// mkdirAllDurable creates dir and any missing parents, and syncs the parent
// of every directory it created, so that the new directories survive a
// crash: a directory's entry is durable only once its parent is synced.
func mkdirAllDurable(fs vfs.FS, dir string) error {
	var created []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := fs.Stat(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		created = append(created, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Sync parents from the outermost new directory inwards.
	for i := len(created) - 1; i >= 0; i-- {
		if err := vfs.SyncDir(fs, filepath.Dir(created[i])); err != nil {
			return err
		}
	}
	return nil
}

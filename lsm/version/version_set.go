package version

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/record"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// DefaultComparerName is the name recorded in the manifest for the engine's
// bytewise user-key order.
const DefaultComparerName = "cairn.BytewiseComparator"

// DefaultMaxManifestFileSize is the manifest size past which LogAndApply
// starts a new manifest.
const DefaultMaxManifestFileSize = 64 << 20

// Options configure a VersionSet.
type Options struct {
	// ComparerName is recorded in every manifest; Load fails with
	// base.ErrInvalidArgument if the manifest names another. Default
	// DefaultComparerName.
	ComparerName string
	// MaxManifestFileSize: once the manifest is at least this large, the
	// next LogAndApply writes a new manifest starting with a snapshot of the
	// current version, and switches CURRENT to it. Default
	// DefaultMaxManifestFileSize.
	MaxManifestFileSize int64
	// BuildHashUnderLock builds each new version's file-location hash while
	// the DB mutex is held, as RocksDB did before the change this package is
	// modelled on. It exists only so that benchmarks can measure the
	// difference; leave it false.
	BuildHashUnderLock bool
	// OnObsolete, if set, is called when the release of a version's last
	// reference makes files obsolete (ObsoleteFiles, ObsoleteBlobFiles
	// have more to return), with no lock of the set held, from the
	// goroutine that released it: possibly a reader, or a caller holding
	// the DB mutex. It must not block. The DB wakes its file cleaner with
	// it, so that a file is deleted as soon as its last holder lets go
	// rather than at the next version change.
	OnObsolete func()
}

func (o Options) withDefaults() Options {
	if o.ComparerName == "" {
		o.ComparerName = DefaultComparerName
	}
	if o.MaxManifestFileSize <= 0 {
		o.MaxManifestFileSize = DefaultMaxManifestFileSize
	}
	return o
}

// ErrManifestFailed marks the sticky error of a VersionSet whose manifest
// write failed: what reached the disk is unknown, so the set refuses further
// edits and the DB must be reopened.
var ErrManifestFailed = errors.New("version: manifest write failed; reopen the DB")

// VersionSet owns the current version, the manifest and the DB's file-number
// and sequence-number counters.
//
// Locking. Three locks, always taken in this order:
//
//  1. the DB mutex ("mu"), owned by the caller and passed to LogAndApply;
//     it guards the fields under "Guarded by the DB mutex".
//  2. the writing flag (writing + writerCond, a condition on mu): one
//     LogAndApply at a time owns the manifest. The owner releases mu while
//     it writes; the fields under "Owned by the manifest writer" are touched
//     only by the owner (or before the set is shared: Create, Load, Close).
//  3. list.mu, a leaf: the list of live versions and the obsolete lists.
//     Version.Unref takes it without the DB mutex.
//
// nextFileNum and lastSeq are atomics and need no lock.
type VersionSet struct {
	fs   vfs.FS
	dir  string
	opts Options

	nextFileNum atomic.Uint64
	lastSeq     atomic.Uint64
	// lastInstallMuHoldNs is how long LogAndApply held the DB mutex during
	// its last successful run, in nanoseconds (a test and benchmark hook).
	lastInstallMuHoldNs atomic.Int64

	// Guarded by the DB mutex.
	current         *Version
	logNumber       base.FileNum
	compactPointers [NumLevels][]byte
	// walsSynced maps each WAL whose synced size the manifest records to
	// that size. Invariant: every key is at least logNumber (obsolete WALs
	// are forgotten when the log number passes them). Changed only by the
	// manifest writer with the DB mutex held, so the writer may read it
	// without the mutex.
	walsSynced map[base.FileNum]uint64
	writing    bool
	writerCond sync.Cond // L is the DB mutex, bound by the first LogAndApply
	// err is sticky: once set (a failed manifest write, or Close), every
	// LogAndApply returns it.
	err error

	// Owned by the manifest writer.
	manifest struct {
		num  base.FileNum
		file vfs.File
		w    *record.Writer
	}

	list struct {
		sync.Mutex
		// live is the sentinel of a circular list of the versions with a
		// non-zero reference count that the set installed.
		live Version
		// obsoleteTables are table files no live version contains;
		// obsoleteManifests are manifests CURRENT no longer names. Drained
		// by ObsoleteFiles and ObsoleteManifests.
		obsoleteTables []base.FileNum
		// obsoleteBlobs are blob files no live version contains.
		obsoleteBlobs     []base.FileNum
		obsoleteManifests []base.FileNum
	}
}

func newVersionSet(fs vfs.FS, dir string, opts Options) *VersionSet {
	vs := &VersionSet{fs: fs, dir: dir, opts: opts.withDefaults(), walsSynced: make(map[base.FileNum]uint64)}
	vs.list.live.prev, vs.list.live.next = &vs.list.live, &vs.list.live
	vs.nextFileNum.Store(1)
	return vs
}

// Create initializes the version set of a new, empty DB in dir: it writes
// MANIFEST-000001 holding one edit (comparer name, next file number) and
// points CURRENT at it. Create fails if dir already has a CURRENT file.
func Create(fs vfs.FS, dir string, opts Options) (*VersionSet, error) {
	vs := newVersionSet(fs, dir, opts)
	if _, err := fs.Stat(base.MakeFilepath(dir, base.FileTypeCurrent, 0)); err == nil {
		return nil, base.InvalidArgumentf("version: %s already holds a DB", dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// dir's own entry in its parent must be durable too.
	if err := vfs.SyncDir(fs, filepath.Dir(dir)); err != nil {
		return nil, err
	}
	empty := &Version{}
	empty.PrepareForInstall()
	num := vs.NewFileNum()
	if err := vs.createManifest(num, vs.snapshotEdit(empty, 0, vs.compactPointers, vs.walsSynced)); err != nil {
		return nil, err
	}
	vs.installInitial(empty)
	return vs, nil
}

// Load recovers the version set of the DB in dir: it reads CURRENT, replays
// the manifest it names from the empty version, and then writes a new
// manifest holding one snapshot edit of the recovered state and switches
// CURRENT to it, so that manifests do not grow across restarts. The old
// manifest is reported by ObsoleteManifests.
//
// A manifest that ends in a torn record (a crash during an append) is read
// up to the last whole record. Any other damage — an unreadable record in the
// middle, an edit that does not decode or does not apply, a version that
// breaks the ordering invariants, a CURRENT that names no manifest — fails
// with an error for which base.IsCorruption is true. A missing CURRENT fails
// with an error that wraps os.ErrNotExist.
func Load(fs vfs.FS, dir string, opts Options) (*VersionSet, error) {
	vs := newVersionSet(fs, dir, opts)
	oldNum, err := readCurrent(fs, dir)
	if err != nil {
		return nil, err
	}
	v, err := vs.replay(oldNum)
	if err != nil {
		return nil, err
	}
	v.PrepareForInstall()
	num := vs.NewFileNum()
	if err := vs.createManifest(num, vs.snapshotEdit(v, vs.logNumber, vs.compactPointers, vs.walsSynced)); err != nil {
		return nil, err
	}
	v.takeFileRefs()
	vs.installInitial(v)
	vs.list.obsoleteManifests = append(vs.list.obsoleteManifests, oldNum)
	return vs, nil
}

// replay reads MANIFEST-num and returns the version it describes, setting
// the set's counters as it goes.
func (vs *VersionSet) replay(num base.FileNum) (*Version, error) {
	name := base.MakeFilepath(vs.dir, base.FileTypeManifest, num)
	f, err := vs.fs.Open(name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, base.CorruptionErrorf("version: CURRENT names %s, which does not exist", name)
		}
		return nil, err
	}
	defer f.Close()

	empty := &Version{}
	empty.PrepareForInstall()
	b := newBuilder(empty, corruptionf)
	var (
		haveNextFileNum bool
		records         int
		e               VersionEdit
	)
	r := record.NewReader(f)
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("version: reading %s: %w", name, err)
		}
		records++
		if err := e.Decode(rec); err != nil {
			return nil, fmt.Errorf("version: %s record %d: %w", name, records, err)
		}
		if e.ComparerName != "" && e.ComparerName != vs.opts.ComparerName {
			return nil, base.InvalidArgumentf("version: %s was written with comparer %q, not %q",
				name, e.ComparerName, vs.opts.ComparerName)
		}
		if err := b.apply(&e); err != nil {
			return nil, fmt.Errorf("version: %s record %d: %w", name, records, err)
		}
		if e.LogNumber != 0 {
			vs.logNumber = e.LogNumber
		}
		if e.NextFileNum != 0 {
			vs.nextFileNum.Store(uint64(e.NextFileNum))
			haveNextFileNum = true
		}
		if e.LastSeq != 0 {
			vs.lastSeq.Store(uint64(e.LastSeq))
		}
		for _, cp := range e.CompactPointers {
			vs.compactPointers[cp.Level] = cp.Key
		}
		for _, w := range e.WALsSynced {
			if prev, ok := vs.walsSynced[w.Num]; ok && w.SyncedSize < prev {
				return nil, base.CorruptionErrorf("version: %s record %d: WAL %s synced size %d is below the %d recorded before",
					name, records, w.Num, w.SyncedSize, prev)
			}
		}
		vs.applyWALsSynced(e.WALsSynced)
	}
	if records == 0 {
		return nil, base.CorruptionErrorf("version: %s holds no edit", name)
	}
	if !haveNextFileNum {
		return nil, base.CorruptionErrorf("version: %s records no next file number", name)
	}
	v, err := b.version()
	if err != nil {
		return nil, fmt.Errorf("version: %s: %w", name, err)
	}
	if err := v.CheckOrdering(); err != nil {
		return nil, fmt.Errorf("version: %s: %w", name, err)
	}
	// File numbers in use must never be handed out again, whatever the
	// manifest says the next one is.
	vs.MarkFileNumUsed(num)
	vs.MarkFileNumUsed(vs.logNumber)
	for n := range vs.walsSynced {
		vs.MarkFileNumUsed(n)
	}
	for _, files := range v.Levels {
		for _, f := range files {
			vs.MarkFileNumUsed(f.FileNum)
		}
	}
	for n := range v.BlobFiles {
		vs.MarkFileNumUsed(n)
	}
	return v, nil
}

// installInitial makes v, whose file references are taken, the current
// version of a set no other goroutine sees yet.
func (vs *VersionSet) installInitial(v *Version) {
	v.vs = vs
	v.refs.Store(1)
	vs.list.Lock()
	vs.list.live.pushBack(v)
	vs.list.Unlock()
	vs.current = v
}

// applyWALsSynced records the synced sizes of ws and forgets every WAL
// below the log number.
// REQUIRES: the DB mutex held and the manifest writer owned, or the set not
// yet shared.
func (vs *VersionSet) applyWALsSynced(ws []WALSynced) {
	for _, w := range ws {
		if w.Num >= vs.logNumber {
			vs.walsSynced[w.Num] = max(vs.walsSynced[w.Num], w.SyncedSize)
		}
	}
	for n := range vs.walsSynced {
		if n < vs.logNumber {
			delete(vs.walsSynced, n)
		}
	}
}

// snapshotEdit returns an edit that recreates v and the set's bookkeeping
// from nothing: the first record of every manifest.
func (vs *VersionSet) snapshotEdit(v *Version, logNumber base.FileNum, cps [NumLevels][]byte, wals map[base.FileNum]uint64) *VersionEdit {
	e := &VersionEdit{
		ComparerName: vs.opts.ComparerName,
		LogNumber:    logNumber,
		NextFileNum:  base.FileNum(vs.nextFileNum.Load()),
		LastSeq:      vs.LastSeq(),
	}
	for level, key := range cps {
		if key != nil {
			e.CompactPointers = append(e.CompactPointers, CompactPointer{Level: level, Key: key})
		}
	}
	e.NewFiles = make([]NewFile, 0, v.NumFiles())
	for level, files := range v.Levels {
		for _, f := range files {
			e.NewFiles = append(e.NewFiles, NewFile{Level: level, Meta: f})
		}
	}
	e.addBlobSnapshot(v.BlobFiles)
	for n, size := range wals {
		if n >= logNumber {
			e.WALsSynced = append(e.WALsSynced, WALSynced{Num: n, SyncedSize: size})
		}
	}
	slices.SortFunc(e.WALsSynced, func(a, b WALSynced) int { return cmp.Compare(a.Num, b.Num) })
	return e
}

// LogAndApply applies edit to the current version, makes the edit durable in
// the manifest, and installs the resulting version as current.
//
// REQUIRES: mu (the DB mutex) held on entry. It is held again on return, but
// LogAndApply releases it while it waits for another LogAndApply, while it
// writes and syncs the manifest, while it builds the new version's
// file-location hash, and while it releases the previous version. Every
// LogAndApply must be passed the same mutex.
//
// LogAndApply sets edit.NextFileNum and edit.LastSeq from the set's
// counters, and edit.LogNumber to the set's if the caller left it zero
// (otherwise it must not decrease and must be below NextFileNum). Files the
// edit moves between levels must keep their *FileMetadata.
//
// An edit that does not apply to the current version (deleting a file the
// level does not hold, adding one the version holds, overlap in L1+) returns
// an error wrapping base.ErrInvalidArgument and changes nothing. If the
// manifest write or sync fails, the new version is not installed and the
// error (wrapping ErrManifestFailed) is returned by this and every later
// LogAndApply: the edit may or may not be durable, so the DB must be
// reopened to learn its state. The edit's new files are then not reported
// obsolete, since a reopened DB may need them.
func (vs *VersionSet) LogAndApply(mu *sync.Mutex, edit *VersionEdit) error {
	if vs.writerCond.L == nil {
		vs.writerCond.L = mu
	} else if vs.writerCond.L != mu {
		panic("version: LogAndApply called with a different mutex")
	}
	for vs.writing {
		vs.writerCond.Wait()
	}
	if vs.err != nil {
		return vs.err
	}
	start := time.Now()
	vs.writing = true
	finish := func() {
		vs.writing = false
		vs.writerCond.Broadcast()
	}

	nv, newManifestNum, err := vs.prepareLocked(edit)
	if err != nil {
		finish()
		return err
	}
	if vs.opts.BuildHashUnderLock {
		nv.PrepareForInstall()
	}
	// Only the writer changes these, so they may be read after mu is
	// released.
	prev, logNumber, compactPointers, wals := vs.current, vs.logNumber, vs.compactPointers, vs.walsSynced
	held := time.Since(start)

	mu.Unlock()
	nv.takeFileRefs()
	if invariantsEnabled {
		if err := nv.CheckOrdering(); err != nil {
			panic(err)
		}
	}
	if newManifestNum != 0 {
		snapshot := vs.snapshotEdit(prev, logNumber, compactPointers, wals)
		snapshot.NextFileNum, snapshot.LastSeq = edit.NextFileNum, edit.LastSeq
		err = vs.createManifest(newManifestNum, snapshot, edit)
	} else {
		err = vs.appendToManifest(edit)
	}
	if err == nil {
		// The point of this package: O(files) work, off the DB mutex, into a
		// map sized up front.
		nv.PrepareForInstall()
	} else {
		// The edit's new files may be in the durable manifest; never report
		// them obsolete. Files of the current version keep its references.
		nv.releaseFileRefs(nil)
		nv.releaseBlobRefs(nil)
	}
	mu.Lock()
	start = time.Now()

	if err != nil {
		vs.err = fmt.Errorf("%w: %w", ErrManifestFailed, err)
		finish()
		return vs.err
	}
	vs.logNumber = edit.LogNumber
	for _, cp := range edit.CompactPointers {
		vs.compactPointers[cp.Level] = slices.Clone(cp.Key)
	}
	vs.applyWALsSynced(edit.WALsSynced)
	nv.vs = vs
	nv.refs.Store(1)
	vs.list.Lock()
	vs.list.live.pushBack(nv)
	vs.list.Unlock()
	vs.current = nv
	vs.lastInstallMuHoldNs.Store(int64(held + time.Since(start)))
	finish()

	// Releasing the previous version is O(files) too when this was its last
	// reference; do it off the mutex.
	mu.Unlock()
	prev.Unref()
	mu.Lock()
	return nil
}

// prepareLocked validates edit, fills in its bookkeeping fields, and builds
// the levels of the version it produces (without file references or hash).
// It allocates the number of a new manifest when the set must roll to one
// (0 otherwise).
//
// REQUIRES: the DB mutex held and the writing flag owned.
func (vs *VersionSet) prepareLocked(edit *VersionEdit) (*Version, base.FileNum, error) {
	if edit.LogNumber != 0 {
		if edit.LogNumber < vs.logNumber || uint64(edit.LogNumber) >= vs.nextFileNum.Load() {
			return nil, 0, base.InvalidArgumentf("version: edit log number %d outside [%d, %d)",
				edit.LogNumber, vs.logNumber, vs.nextFileNum.Load())
		}
	} else {
		edit.LogNumber = vs.logNumber
	}
	for _, cp := range edit.CompactPointers {
		if cp.Level < 0 || cp.Level >= NumLevels || !base.ValidInternalKey(cp.Key) {
			return nil, 0, base.InvalidArgumentf("version: invalid compact pointer L%d %q", cp.Level, cp.Key)
		}
	}
	edit.ComparerName = ""
	seen := make(map[base.FileNum]bool, len(edit.WALsSynced))
	for _, w := range edit.WALsSynced {
		switch {
		case w.Num == 0 || uint64(w.Num) >= vs.nextFileNum.Load() || seen[w.Num]:
			return nil, 0, base.InvalidArgumentf("version: edit records the synced size of WAL %s, which is not allocated or recorded twice", w.Num)
		case w.Num >= edit.LogNumber && w.SyncedSize < vs.walsSynced[w.Num]:
			return nil, 0, base.InvalidArgumentf("version: edit records WAL %s synced at %d, below the %d recorded before",
				w.Num, w.SyncedSize, vs.walsSynced[w.Num])
		}
		seen[w.Num] = true
	}

	b := newBuilder(vs.current, invalidArgf)
	if err := b.apply(edit); err != nil {
		return nil, 0, err
	}
	nv, err := b.version()
	if err != nil {
		return nil, 0, err
	}

	// Roll to a new manifest when there is none or it has grown too big.
	var newManifestNum base.FileNum
	if vs.manifest.w == nil || vs.manifest.w.Size() >= vs.opts.MaxManifestFileSize {
		newManifestNum = vs.NewFileNum()
	}
	edit.NextFileNum = base.FileNum(vs.nextFileNum.Load())
	edit.LastSeq = vs.LastSeq()
	return nv, newManifestNum, nil
}

// Current returns the current version, without taking a reference.
//
// REQUIRES: the DB mutex held. Callers that keep the version past releasing
// the mutex must Ref it first.
func (vs *VersionSet) Current() *Version { return vs.current }

// LogNumber returns the number of the oldest WAL that is not obsolete.
//
// REQUIRES: the DB mutex held.
func (vs *VersionSet) LogNumber() base.FileNum { return vs.logNumber }

// WALsSynced returns a copy of the synced sizes the manifest records for the
// WALs that are not obsolete (numbered at least LogNumber). Recovery must
// find each of these WALs intact up to its size.
//
// REQUIRES: the DB mutex held.
func (vs *VersionSet) WALsSynced() map[base.FileNum]uint64 { return maps.Clone(vs.walsSynced) }

// CompactPointer returns where the next compaction of level should start,
// or nil.
//
// REQUIRES: the DB mutex held.
func (vs *VersionSet) CompactPointer(level int) []byte { return vs.compactPointers[level] }

// NewFileNum allocates a file number. Safe without locks.
func (vs *VersionSet) NewFileNum() base.FileNum {
	return base.FileNum(vs.nextFileNum.Add(1) - 1)
}

// NextFileNum returns the number NewFileNum would allocate next.
func (vs *VersionSet) NextFileNum() base.FileNum { return base.FileNum(vs.nextFileNum.Load()) }

// MarkFileNumUsed makes sure that n is never allocated. Safe without locks.
func (vs *VersionSet) MarkFileNumUsed(n base.FileNum) {
	for {
		cur := vs.nextFileNum.Load()
		if uint64(n) < cur || vs.nextFileNum.CompareAndSwap(cur, uint64(n)+1) {
			return
		}
	}
}

// LastSeq returns the last sequence number used. Safe without locks.
func (vs *VersionSet) LastSeq() base.SeqNum { return base.SeqNum(vs.lastSeq.Load()) }

// SetLastSeq records the last sequence number used. The next LogAndApply
// writes it to the manifest. It must never decrease.
func (vs *VersionSet) SetLastSeq(s base.SeqNum) {
	if invariantsEnabled && s < vs.LastSeq() {
		panic(fmt.Sprintf("version: last sequence number decreases from %d to %d", vs.LastSeq(), s))
	}
	vs.lastSeq.Store(uint64(s))
}

// ManifestFileNum returns the number of the manifest CURRENT names.
//
// REQUIRES: the DB mutex held, or no LogAndApply running.
func (vs *VersionSet) ManifestFileNum() base.FileNum { return vs.manifest.num }

// LastInstallMutexHold returns how long the last successful LogAndApply held
// the DB mutex: building the new version's levels, and installing it.
func (vs *VersionSet) LastInstallMutexHold() time.Duration {
	return time.Duration(vs.lastInstallMuHoldNs.Load())
}

// ObsoleteFiles returns, and forgets, the table files that no live version
// contains any more. The caller deletes them (unless it protects some for
// its own reasons, e.g. a checkpoint in progress). Safe without the DB mutex.
func (vs *VersionSet) ObsoleteFiles() []base.FileNum {
	vs.list.Lock()
	defer vs.list.Unlock()
	out := vs.list.obsoleteTables
	vs.list.obsoleteTables = nil
	return out
}

// ObsoleteBlobFiles returns, and forgets, the blob files that no live
// version contains any more. Safe without the DB mutex.
func (vs *VersionSet) ObsoleteBlobFiles() []base.FileNum {
	vs.list.Lock()
	defer vs.list.Unlock()
	out := vs.list.obsoleteBlobs
	vs.list.obsoleteBlobs = nil
	return out
}

// ObsoleteManifests returns, and forgets, the manifests that CURRENT no
// longer names. Safe without the DB mutex.
func (vs *VersionSet) ObsoleteManifests() []base.FileNum {
	vs.list.Lock()
	defer vs.list.Unlock()
	out := vs.list.obsoleteManifests
	vs.list.obsoleteManifests = nil
	return out
}

// LiveFiles returns the table and blob files of every live version: the current one
// and every one still pinned by a reader. Files of an edit that LogAndApply
// has not yet installed are not included; the DB must protect its own
// pending outputs. Safe without the DB mutex.
func (vs *VersionSet) LiveFiles() map[base.FileNum]struct{} {
	vs.list.Lock()
	defer vs.list.Unlock()
	live := make(map[base.FileNum]struct{})
	for v := vs.list.live.next; v != &vs.list.live; v = v.next {
		for _, files := range v.Levels {
			for _, f := range files {
				live[f.FileNum] = struct{}{}
			}
		}
		for n := range v.BlobFiles {
			live[n] = struct{}{}
		}
	}
	return live
}

// Close closes the manifest. Later LogAndApply calls fail with
// base.ErrClosed. The current version stays referenced (readers may still
// use it).
//
// REQUIRES: no LogAndApply running, and the DB mutex held or the set no
// longer shared.
func (vs *VersionSet) Close() error {
	if errors.Is(vs.err, base.ErrClosed) {
		return nil
	}
	err := vs.closeManifest()
	if vs.err == nil {
		vs.err = fmt.Errorf("version: %w", base.ErrClosed)
	} else {
		vs.err = fmt.Errorf("%w (%w)", base.ErrClosed, vs.err)
	}
	return err
}

// releaseVersion removes v, whose reference count reached zero, from the
// live list and drops its file references.
func (vs *VersionSet) releaseVersion(v *Version) {
	vs.list.Lock()
	v.remove()
	nt, nb := len(vs.list.obsoleteTables), len(vs.list.obsoleteBlobs)
	vs.list.obsoleteTables = v.releaseFileRefs(vs.list.obsoleteTables)
	vs.list.obsoleteBlobs = v.releaseBlobRefs(vs.list.obsoleteBlobs)
	grew := len(vs.list.obsoleteTables) > nt || len(vs.list.obsoleteBlobs) > nb
	vs.list.Unlock()
	if grew && vs.opts.OnObsolete != nil {
		vs.opts.OnObsolete()
	}
}

// pushBack links v at the end of the list whose sentinel is l.
func (l *Version) pushBack(v *Version) {
	v.prev, v.next = l.prev, l
	l.prev.next = v
	l.prev = v
}

// remove unlinks v from its list.
func (v *Version) remove() {
	v.prev.next = v.next
	v.next.prev = v.prev
	v.prev, v.next = nil, nil
}

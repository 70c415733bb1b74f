package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/internal/rangedel"
	"github.com/cairnkv/cairn/lsm/sst"
	"github.com/cairnkv/cairn/lsm/version"
)

// compactionsState is the DB's compaction bookkeeping, in d.mu.
//
// Several compactions may run at once (Options.MaxConcurrentCompactions),
// each on its own goroutine, if they do not conflict (see
// conflictsLocked): no file is an input of two of them (the inputs are
// marked FileMetadata.Compacting), and no two write, or one writes and
// another reads, overlapping key ranges of the same level. At most one
// L0 compaction runs at a time: every pick of L0 takes all of L0's files
// that overlap (and in practice all of them), so a second one finds them
// compacting. A manual Compact runs alone: it waits for the running
// compactions to end and none starts until it returns.
type compactionsState struct {
	// running counts the goroutines running compactions: background
	// loops (compactionLoop) and Compact calls.
	running int
	// inProgress are the compactions whose inputs are marked compacting,
	// from their pick to the end of runCompactionLocked.
	inProgress []*compaction
	// beforeWrite, set by tests, is called with d.mu released before a
	// compaction that rewrites its inputs writes its tables.
	beforeWrite func(*compaction)
}

// errCompactionCancelled is what a compaction returns when Close stops it
// (compactTablesInner checks d.closeCh every cancelCheckEntries entries).
// Its outputs are removed and nothing is installed: the inputs stay live,
// and the next Open's picker finds the same work again. It is not a
// failure, so it is never recorded as a background error; a Compact it
// cancels returns ErrClosed.
var errCompactionCancelled = errors.New("lsm: compaction cancelled by Close")

// cancelCheckEntries is how many input entries a compaction reads between
// two checks of d.closeCh: the check is a non-blocking select, cheap next
// to the merge of 64 entries, and a Close waits for at most that many.
const cancelCheckEntries = 64

// compactionDebtConcurrencyBytes is the pending compaction bytes per
// extra concurrent compaction, in LBaseMaxBytes (see
// compactionConcurrencyLocked).
const compactionDebtConcurrencyBytes = 2

// compactionConcurrencyLocked returns how many compactions may run at
// once now: 1, plus one for each L0CompactionThreshold tables L0 holds
// beyond its threshold and one for each compactionDebtConcurrencyBytes ×
// LBaseMaxBytes of pending compaction bytes (pendingCompactionBytes),
// whichever is more, at most MaxConcurrentCompactions. This is Pebble's
// rule (CompactionConcurrencyRange raised by L0 read amplification over
// L0CompactionConcurrency, or by compaction debt over
// CompactionDebtConcurrency) with cairn's thresholds: one compaction
// keeps up with a light load and leaves the cores to the writers; more
// start only when compactions fall behind.
// REQUIRES: d.mu held.
func (d *DB) compactionConcurrencyLocked() int {
	limit := d.opts.MaxConcurrentCompactions
	if limit <= 1 {
		return 1
	}
	v := d.mu.versions.Current()
	extra := (len(v.Levels[0]) - d.opts.L0CompactionThreshold) / d.opts.L0CompactionThreshold
	baseLevel, targets := levelTargets(v, d.opts)
	debt := pendingCompactionBytes(v, d.opts, baseLevel, targets)
	extra = max(extra, int(debt/(compactionDebtConcurrencyBytes*d.opts.LBaseMaxBytes)))
	return min(1+max(extra, 0), limit)
}

// maybeScheduleCompactionLocked starts compaction goroutines while levels
// need compacting, the picker finds compactions that do not conflict with
// the running ones, and fewer than compactionConcurrencyLocked run.
// REQUIRES: d.mu held.
func (d *DB) maybeScheduleCompactionLocked() {
	if d.mu.closing || d.mu.bgErr != nil || d.mu.manualCompactions > 0 {
		return
	}
	for d.mu.compactions.running < d.compactionConcurrencyLocked() {
		c := d.pickCompactionLocked()
		if c == nil {
			return
		}
		d.mu.compactions.running++
		d.bgWG.Add(1)
		go d.compactionLoop(c)
	}
}

// compactionLoop runs c, then whatever the picker finds next, while no
// more compactions run than compactionConcurrencyLocked allows.
func (d *DB) compactionLoop(c *compaction) {
	defer d.bgWG.Done()
	d.mu.Lock()
	defer d.mu.Unlock()
	for c != nil {
		if err := d.runCompactionLocked(c); err != nil {
			if !errors.Is(err, errCompactionCancelled) {
				d.setBackgroundErrorLocked(err)
			}
			break
		}
		if d.mu.closing || d.mu.bgErr != nil || d.mu.manualCompactions > 0 {
			break
		}
		if d.mu.compactions.running > d.compactionConcurrencyLocked() {
			break
		}
		c = d.pickCompactionLocked()
		if c != nil {
			// What c's predecessor installed may allow more.
			d.maybeScheduleCompactionLocked()
		}
	}
	d.mu.compactions.running--
	d.mu.bgCond.Broadcast()
}

// conflictsLocked reports whether a compaction of the user keys
// [smallest, largest] from startLevel into outputLevel conflicts with a
// running one (Pebble's and RocksDB's rule, beyond inputs that are
// already compacting, which newCompactionLocked checks): both write
// overlapping key ranges of the same level, where their outputs could
// overlap (a level below L0 must not hold overlapping tables), or one
// writes a key range of the level the other reads from. The outputs of a
// compaction lie within the key range of its inputs.
// REQUIRES: d.mu held.
func (d *DB) conflictsLocked(startLevel, outputLevel int, smallest, largest []byte) bool {
	for _, r := range d.mu.compactions.inProgress {
		if bytes.Compare(smallest, r.largest) > 0 || bytes.Compare(r.smallest, largest) > 0 {
			continue
		}
		if outputLevel == r.outputLevel || startLevel == r.outputLevel || outputLevel == r.startLevel {
			return true
		}
	}
	return false
}

// runCompactionLocked runs c and installs its result.
// REQUIRES: d.mu held (released while tables are written).
func (d *DB) runCompactionLocked(c *compaction) error {
	defer func() {
		for _, in := range c.inputs {
			for _, f := range in {
				f.Compacting = false
			}
		}
		d.mu.compactions.inProgress = slices.DeleteFunc(d.mu.compactions.inProgress, func(r *compaction) bool { return r == c })
		c.version.Unref()
		// That may have been the last reference to the inputs (the
		// deletion after the install found them still held): without
		// this they stayed on disk until the next flush or compaction.
		d.signalCleaner()
	}()
	start := time.Now()
	ve := &version.VersionEdit{}
	for i, in := range c.inputs {
		level := c.startLevel
		if i == 1 {
			level = c.outputLevel
		}
		for _, f := range in {
			ve.DeleteFile(level, f.FileNum)
		}
	}
	var outputs []*version.FileMetadata
	var res compactionResult
	if c.trivialMove {
		outputs = c.inputs[0]
	} else {
		snapshots := d.mu.snapshots.list()
		// One compaction at a time relocates blob records: two must not
		// relocate the same file (each would copy its records and count
		// them as its garbage), and GC leaves alone only the files
		// blobGC.relocating holds.
		if d.mu.blobGC.relocating == nil {
			if c.relocate == nil { // a full Compact sets its own (blob_compact.go)
				c.relocate = d.blobRelocationSetLocked(c.version)
			}
			if len(c.relocate) > 0 {
				d.mu.blobGC.relocating = c.relocate
				defer func() { d.mu.blobGC.relocating = nil }()
			}
		}
		hook := d.mu.compactions.beforeWrite
		d.mu.Unlock()
		if hook != nil {
			hook(c)
		}
		var err error
		res, err = d.compactTables(c, snapshots)
		d.mu.Lock()
		if err != nil {
			return fmt.Errorf("lsm: compacting L%d→L%d: %w", c.startLevel, c.outputLevel, err)
		}
		outputs = res.tables
		if c.bottommost && len(snapshots) == 0 {
			// One stripe, nothing below: only the newest version of
			// each key was written, and no deletion.
			for _, f := range outputs {
				f.OneVersionPerKey = true
			}
		}
	}
	c.outputs = outputs
	bytesRead := res.bytesRead
	for _, f := range outputs {
		ve.NewFiles = append(ve.NewFiles, version.NewFile{Level: c.outputLevel, Meta: f})
	}
	ve.NewBlobFiles = res.blobs
	ve.BlobGarbage = res.garbage
	if err := d.mu.versions.LogAndApply(&d.mu.Mutex, ve); err != nil {
		return fmt.Errorf("lsm: recording compaction in manifest: %w", err)
	}
	for _, b := range res.blobs {
		d.mu.stats.blobBytesWritten += int64(b.Size)
	}
	d.noteL0HiddenGarbageLocked(c, res)
	d.mu.stats.blobRelocatedBytesRead += res.relocatedRead
	d.mu.stats.blobRelocatedBytesWritten += res.relocatedWritten
	if c.forcedBlob {
		d.mu.stats.blobForcedCompactions++
	}
	for n := range res.relocFailed {
		if d.mu.blobGC.relocFailed == nil {
			d.mu.blobGC.relocFailed = map[base.FileNum]bool{}
		}
		d.mu.blobGC.relocFailed[n] = true
	}
	if c.startLevel > 0 {
		_, largest := userKeyRange(c.inputs[0])
		d.mu.compactPointer[c.startLevel] = base.MakeInternalKey(nil, largest, 0, 0)
	}
	if !c.trivialMove {
		d.mu.stats.compactions++
		if res.subcompactions > 1 {
			d.mu.stats.subcompactions++
		}
		d.mu.stats.compactionBytesRead += bytesRead
		d.mu.stats.levelBytesRead[c.startLevel] += sizeOf(c.inputs[0])
		d.mu.stats.levelBytesRead[c.outputLevel] += sizeOf(c.inputs[1])
		written := sizeOf(outputs)
		d.mu.stats.compactionBytesWritten += written
		d.mu.stats.levelBytesWritten[c.outputLevel] += written
	}
	d.updateReadStateLocked()
	d.mu.bgCond.Broadcast()
	d.maybeScheduleBlobGCLocked()
	d.mu.Unlock()
	d.compactionInstalled(c, time.Since(start))
	d.deleteObsoleteFiles()
	d.mu.Lock()
	return nil
}

func sizeOf(files []*version.FileMetadata) int64 {
	var n int64
	for _, f := range files {
		n += int64(f.Size)
	}
	return n
}

// compactTables merges c's inputs into new tables of the output level.
//
// For each user key, versions are grouped into snapshot stripes: stripe i
// holds the sequence numbers a snapshot s_i sees that s_(i-1) does not.
// Only the newest version in each stripe can be read, so the rest are
// dropped; a version covered by a range tombstone of the same stripe is
// dropped; a point deletion in the oldest stripe is dropped once nothing
// below the output level can hold the key (c.bottommost). Range tombstones
// are elided by the same rules (rangedel.Elide).
//
// Output tables are cut at TargetFileSizeBytes, only between user keys, so
// that a key's versions never straddle two tables; each table gets the
// tombstone fragments that fall within its key range.
// With key-value separation on, values that reach MinBlobSize and are still
// inline are separated as at flush; every blob index the compaction drops
// is reported as garbage of its blob file, and the records of the files in
// c.relocate that it keeps are relocated (blob_relocate.go).
func (d *DB) compactTables(c *compaction, snapshots []base.SeqNum) (res compactionResult, err error) {
	bounds, err := d.subcompactionBounds(c)
	if err != nil {
		return compactionResult{}, err
	}
	// Part i writes the user keys in [bounds[i-1], bounds[i]) (nil:
	// unbounded), the last one on this goroutine.
	type part struct {
		outputs []*version.FileMetadata
		sep     *blobSeparator
		reloc   *blobRelocator
		garbage blobGarbage
		err     error
	}
	parts := make([]part, len(bounds)+1)
	var wg sync.WaitGroup
	for i := range parts {
		p := &parts[i]
		p.sep, p.garbage = d.newBlobSeparator(), blobGarbage{}
		if len(c.relocate) > 0 && p.sep != nil {
			p.reloc = &blobRelocator{d: d, set: c.relocate}
		}
		var lo, hi []byte
		if i > 0 {
			lo = bounds[i-1]
		}
		if i < len(bounds) {
			hi = bounds[i]
		}
		run := func() { p.outputs, p.err = d.compactTablesInner(c, snapshots, p.sep, p.reloc, p.garbage, lo, hi) }
		if i == len(parts)-1 {
			run()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			run()
		}()
	}
	wg.Wait()
	// removeAll removes every output of every part: tables, and blob
	// files finished, rolled over or still open (a finished separator
	// still lists its files).
	removeAll := func() {
		for _, p := range parts {
			p.sep.abandon()
			for _, f := range p.outputs {
				d.removeFile(base.FileTypeTable, f.FileNum)
			}
		}
	}
	for _, p := range parts {
		if p.err != nil {
			removeAll()
			return compactionResult{}, p.err
		}
	}
	garbage := blobGarbage{}
	for i := range parts {
		p := &parts[i]
		blobs, err := p.sep.finish()
		if err != nil {
			removeAll()
			return compactionResult{}, err
		}
		res.tables = append(res.tables, p.outputs...)
		res.blobs = append(res.blobs, blobs...)
		if r := p.reloc; r != nil {
			res.relocatedRead += r.bytesRead
			res.relocatedWritten += r.bytesWritten
			for n := range r.failed {
				if res.relocFailed == nil {
					res.relocFailed = map[base.FileNum]bool{}
				}
				res.relocFailed[n] = true
			}
		}
		for n, g := range p.garbage {
			if e := garbage[n]; e != nil {
				e.Count += g.Count
				e.Bytes += g.Bytes
			} else {
				garbage[n] = g
			}
		}
	}
	res.garbage = garbage.list()
	res.bytesRead = sizeOf(c.inputs[0]) + sizeOf(c.inputs[1])
	res.subcompactions = len(parts)
	return res, nil
}

// compactionResult is what compactTables produced.
type compactionResult struct {
	tables    []*version.FileMetadata
	blobs     []*version.BlobFileMetadata
	garbage   []version.BlobGarbage
	bytesRead int64
	// subcompactions is the number of key ranges written in parallel.
	subcompactions int
	// relocatedRead and relocatedWritten count the blob records the
	// compaction relocated (blob_relocate.go); relocFailed are the files
	// it could not relocate a record of.
	relocatedRead, relocatedWritten int64
	relocFailed                     map[base.FileNum]bool
}

// compactTablesInner writes the part of c's output with user keys in
// [lo, hi) (nil: unbounded). Its first output table starts at lo and its
// last ends at hi, for the range tombstones they carry.
func (d *DB) compactTablesInner(c *compaction, snapshots []base.SeqNum, sep *blobSeparator, reloc *blobRelocator, garbage blobGarbage, lo, hi []byte) (outputs []*version.FileMetadata, err error) {
	var iters []base.InternalIterator
	var rawTombs []base.RangeTombstone
	var (
		w       *sst.Writer
		pending *tableOutput
	)
	defer func() {
		for _, it := range iters {
			it.Close()
		}
		if err != nil && w != nil {
			pending.abandon(d)
		}
		if err != nil {
			for _, f := range outputs {
				d.removeFile(base.FileTypeTable, f.FileNum)
			}
			outputs = nil
		}
	}()
	for i, in := range c.inputs {
		level := c.startLevel
		if i == 1 {
			level = c.outputLevel
		}
		for _, f := range in {
			r, err := d.tables.get(f)
			if err != nil {
				return nil, err
			}
			rawTombs = append(rawTombs, r.RangeTombstones()...)
			if level == 0 {
				it, err := d.newCompactionIter(f)
				if err != nil {
					return nil, err
				}
				iters = append(iters, it)
			}
		}
		if level > 0 && len(in) > 0 {
			li := newLevelIter(d.tables, in)
			li.newIter = d.newCompactionIter
			iters = append(iters, li)
		}
	}
	merged := newMergingIter(iters)
	iters = nil
	defer merged.Close()

	tombSet := rangedel.NewSet(rawTombs)
	var frags []rangedel.Fragment
	for _, f := range rangedel.Elide(rangedel.FragmentTombstones(rawTombs), snapshots, c.bottommost) {
		if t := f.Truncate(lo, hi); !t.Empty() {
			frags = append(frags, t)
		}
	}
	stripeOf := func(seq base.SeqNum) int {
		return sort.Search(len(snapshots), func(i int) bool { return snapshots[i] > seq })
	}
	stripeTop := func(stripe int) base.SeqNum {
		if stripe < len(snapshots) {
			return snapshots[stripe]
		}
		return base.SeqNumMax
	}

	var (
		curNum     base.FileNum
		curLower   []byte // user key at which the current output begins (nil: unbounded)
		lastUkey   []byte
		lastStripe = -1
	)
	gpCut := d.grandparentCutter(c)
	finish := func(upper []byte) error {
		if w == nil {
			return nil
		}
		var fileFrags []rangedel.Fragment
		for _, f := range frags {
			if t := f.Truncate(curLower, upper); !t.Empty() {
				fileFrags = append(fileFrags, t)
			}
		}
		if err := addTombstones(w, fileFrags); err != nil {
			return err
		}
		meta, err := pending.finish(d, w)
		w = nil
		if err != nil {
			return err
		}
		sep.setTableRefs(meta)
		outputs = append(outputs, meta)
		return nil
	}
	start := func(lower []byte) error {
		d.mu.Lock()
		curNum = d.mu.versions.NewFileNum()
		d.mu.Unlock()
		var err error
		pending, w, err = d.startTable(curNum)
		curLower = lower
		return err
	}

	if lo != nil {
		merged.SeekGE(base.MakeSearchKey(nil, lo, base.SeqNumMax))
	} else {
		merged.First()
	}
	for n := 0; merged.Valid(); merged.Next() {
		if n++; n%cancelCheckEntries == 0 {
			select {
			case <-d.closeCh:
				// The deferred cleanup removes this part's outputs,
				// compactTables those of the others and the blob files.
				return nil, errCompactionCancelled
			default:
			}
		}
		ukey, seq, kind, ok := base.ParseInternalKey(merged.Key())
		if !ok {
			return nil, base.CorruptionErrorf("malformed internal key %q in compaction input", merged.Key())
		}
		if hi != nil && bytes.Compare(ukey, hi) >= 0 {
			break
		}
		stripe := stripeOf(seq)
		newUkey := lastUkey == nil || !bytes.Equal(ukey, lastUkey)
		if !newUkey && stripe == lastStripe {
			// Shadowed by a newer version in the same stripe.
			if kind == base.KindBlobIndex {
				if err := garbage.add(merged.Value()); err != nil {
					return nil, err
				}
			}
			continue
		}
		if newUkey {
			lastUkey = append(lastUkey[:0], ukey...)
		}
		lastStripe = stripe
		if tombSet.MaxCoveringSeq(ukey, stripeTop(stripe)) > seq {
			// Deleted by a range tombstone in the same stripe.
			if kind == base.KindBlobIndex {
				if err := garbage.add(merged.Value()); err != nil {
					return nil, err
				}
			}
			continue
		}
		if kind == base.KindDelete && c.bottommost && stripe == 0 {
			continue // nothing older remains anywhere for it to hide
		}
		cut := newUkey && gpCut(ukey)
		if w != nil && newUkey && (cut || w.EstimatedSize() >= uint64(d.opts.TargetFileSizeBytes)) {
			split := bytes.Clone(ukey)
			if err := finish(split); err != nil {
				return nil, err
			}
			if err := start(split); err != nil {
				return nil, err
			}
		}
		if w == nil {
			if err := start(lo); err != nil {
				return nil, err
			}
		}
		if err := reloc.add(w, sep, garbage, merged.Key(), merged.Value(), kind); err != nil {
			return nil, err
		}
	}
	if err := merged.Error(); err != nil {
		return nil, err
	}
	if w == nil && len(frags) > 0 {
		if err := start(lo); err != nil {
			return nil, err
		}
	}
	if err := finish(hi); err != nil {
		return nil, err
	}
	return outputs, nil
}

// maxGrandparentOverlapFiles bounds, in TargetFileSizeBytes, how much of
// the level below its own one a compaction output may overlap (LevelDB's
// kMaxGrandParentOverlapBytes).
const maxGrandparentOverlapFiles = 10

// grandparentCutter returns a function that, called with each user key a
// compaction of c writes, in order, reports whether the output table must
// be cut before it: when the table would otherwise overlap more than
// maxGrandparentOverlapFiles target sizes of the level below the output
// level. Without it one output table may span the whole key space (every
// batch of cairn's state machine writes its applied index, a key below
// every user key, so every flushed table does) and the compaction that
// later pushes it down rewrites that whole level at once: in
// bench/restart, one L5→L6 compaction of a 4 MiB table rewrote 674 MiB of
// a 1 GiB engine.
func (d *DB) grandparentCutter(c *compaction) func(ukey []byte) bool {
	if c.outputLevel+1 >= version.NumLevels {
		return func([]byte) bool { return false }
	}
	gp := c.version.Levels[c.outputLevel+1]
	limit := maxGrandparentOverlapFiles * d.opts.TargetFileSizeBytes
	i, seen, overlap := 0, false, int64(0)
	return func(ukey []byte) bool {
		for i < len(gp) {
			_, largest, _ := gp[i].UserKeyBounds()
			if bytes.Compare(ukey, largest) <= 0 {
				break
			}
			if seen {
				overlap += int64(gp[i].Size)
			}
			i++
		}
		seen = true
		if overlap > limit {
			overlap = 0
			return true
		}
		return false
	}
}

// Compact compacts every level's data overlapping [start, end] (user keys,
// inclusive; nil means unbounded) down to the bottom level, level by level,
// and finally rewrites the bottom level's files in the range, dropping
// overwritten and deleted data that no open snapshot needs. It returns when
// done.
//
// Each level's data goes straight to the next level below that holds data
// in its key range (or the bottom level), not through the empty levels
// between, and moves there without a rewrite when nothing there overlaps
// it (L0 tables only when a merge would drop nothing from them): after a
// fill of distinct keys into an empty DB, Compact writes the data once
// (the flush), not once per level. A bottom-level table known to hold one
// version per key and no deletion (FileMetadata.OneVersionPerKey) is not
// rewritten. A Compact of the whole key range (nil, nil) then relocates
// the live records of the blob files that hold garbage, in batches
// (blob_compact.go), so that the blob files shrink to about their live
// bytes.
//
// Before it returns, Compact deletes the files its compactions made
// obsolete (those no open iterator or snapshot read still holds), rather
// than leaving them to the background cleaner: a caller compacts to
// reclaim space, and a Close right after would otherwise leave them on
// disk until the next Open's sweep.
//
// A Close during a Compact cancels its compaction (its outputs are
// removed, nothing is installed) and Compact returns ErrClosed; Close
// returns only after Compact is done with the DB's files.
func (d *DB) Compact(start, end []byte) error {
	if err := d.checkOpen(); err != nil {
		return err
	}
	if start != nil && end != nil && bytes.Compare(start, end) > 0 {
		return base.InvalidArgumentf("Compact start %q > end %q", start, end)
	}
	d.mu.Lock()
	if d.mu.closing {
		d.mu.Unlock()
		return ErrClosed
	}
	d.mu.compactCalls++
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.mu.compactCalls--
		d.mu.bgCond.Broadcast()
		d.mu.Unlock()
	}()
	if err := d.Flush(); err != nil {
		return err
	}
	if err := d.compactRange(start, end); err != nil {
		return err
	}
	d.deleteObsoleteFiles()
	return nil
}

// compactRange is Compact's work after the flush.
func (d *DB) compactRange(start, end []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.manualCompactions++
	defer func() {
		d.mu.manualCompactions--
		d.maybeScheduleCompactionLocked()
	}()
	for d.mu.compactions.running > 0 {
		d.mu.bgCond.Wait()
	}
	d.mu.compactions.running++
	defer func() {
		d.mu.compactions.running--
		d.mu.bgCond.Broadcast()
	}()
	lo, hi := start, end
	for level := 0; level < version.NumLevels; level++ {
		if d.mu.bgErr != nil {
			return d.mu.bgErr
		}
		if d.mu.closing {
			return ErrClosed
		}
		v := d.mu.versions.Current()
		files := overlapsUnbounded(v, level, lo, hi)
		if len(files) == 0 {
			continue
		}
		if level == version.NumLevels-1 && allOneVersionPerKey(files) {
			// The bottom level compacts into itself only to drop what
			// an earlier compaction had to keep; these tables have
			// nothing to drop.
			continue
		}
		// The bottom level compacts into itself.
		out := manualOutputLevel(v, level, files)
		c := d.newCompactionLocked(v, level, out, files)
		if c == nil {
			return fmt.Errorf("lsm: manual compaction found L%d files already compacting", level)
		}
		if c.trivialMove && out == version.NumLevels-1 && !allOneVersionPerKey(c.inputs[0]) {
			// Moved to the bottom, these tables would be rewritten
			// there at once to drop what they may hold twice;
			// merging them now writes the data once.
			c.trivialMove = false
		}
		if err := d.runCompactionLocked(c); err != nil {
			if errors.Is(err, errCompactionCancelled) {
				return ErrClosed
			}
			d.setBackgroundErrorLocked(err)
			return err
		}
	}
	if start == nil && end == nil {
		return d.compactBlobGarbageLocked()
	}
	return nil
}

// manualOutputLevel returns the level Compact writes files of level into:
// the bottom level compacts into itself; any other level into the first
// level below it holding data in the files' key range, or the bottom level
// if none does. Levels in between hold nothing of that range, so the data
// may skip them: every newer version of a key stays above every older one.
func manualOutputLevel(v *version.Version, level int, files []*version.FileMetadata) int {
	smallest, largest := userKeyRange(files)
	for out := level + 1; out < version.NumLevels-1; out++ {
		if len(v.Overlaps(out, smallest, largest)) > 0 {
			return out
		}
	}
	return version.NumLevels - 1
}

// allOneVersionPerKey reports whether every file is known to hold one
// version per key and no deletion.
func allOneVersionPerKey(files []*version.FileMetadata) bool {
	for _, f := range files {
		if !f.OneVersionPerKey {
			return false
		}
	}
	return true
}

// overlapsUnbounded is Version.Overlaps with nil meaning unbounded.
func overlapsUnbounded(v *version.Version, level int, start, end []byte) []*version.FileMetadata {
	files := v.Levels[level]
	if len(files) == 0 {
		return nil
	}
	s, e := start, end
	if s == nil || e == nil {
		fs, fe := userKeyRange(files)
		if s == nil {
			s = fs
		}
		if e == nil {
			e = fe
		}
	}
	if bytes.Compare(s, e) > 0 {
		return nil
	}
	return v.Overlaps(level, s, e)
}

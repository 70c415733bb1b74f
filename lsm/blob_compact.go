package lsm

import (
	"fmt"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/version"
)

// Blob garbage in a full manual compaction
//
// A full Compact (the whole key range) rewrites every table and so counts
// every shadowed blob index as garbage of its file, but a file that is
// only partly garbage stays until blob GC or a forced compaction
// relocates it: after an overwrite of every key, the blob files stayed at
// 1.4-1.6× their live bytes after Compact(nil, nil), where a caller
// compacts to reclaim space. So a full Compact ends by relocating the
// live records of every blob file that holds garbage, in batches, with
// the compactions' relocation (blob_relocate.go): each batch is a
// compaction of the bottom level's tables that reference its files into
// the bottom level, with c.relocate set to the batch. Its version edit
// installs the new tables, the copies and the garbage at once, so the
// batch's files leave the version (every record counted) and, once no
// version holds them, the disk, as soon as it is installed; a failed
// batch removes its outputs and leaves the version as it was (old files
// and all). A batch holds files of at most 1/relocateShareOfLive of the
// blob files' live bytes (or one file), so the copies on disk beside the
// files they replace stay bounded.
//
// The data is all in the bottom level once a full Compact's levels are
// done, but for what flushes made meanwhile: an index in L0 into a
// batch's file keeps it in the version (and its record is not counted),
// and the file is left to blob GC. Like the compactions' relocation, this
// needs key-value separation and automatic blob GC on and
// Options.DisableBlobCompactionGC off (compactionGCEnabled): with GC off
// a full Compact leaves the garbage for DB.BlobGC.

// compactBlobGarbageLocked relocates, batch by batch, the live records of
// the blob files with garbage (see above). Each file is tried once.
// REQUIRES: d.mu held, and the caller is a manual compaction counted in
// d.mu.compactions.running (it runs alone).
func (d *DB) compactBlobGarbageLocked() error {
	if !d.compactionGCEnabled() {
		return nil
	}
	tried := map[base.FileNum]bool{}
	for {
		if d.mu.bgErr != nil {
			return d.mu.bgErr
		}
		if d.mu.closing {
			return ErrClosed
		}
		v := d.mu.versions.Current()
		set := d.blobGarbageBatchLocked(v, tried)
		if len(set) == 0 {
			return nil
		}
		for n := range set {
			tried[n] = true
		}
		bottom := version.NumLevels - 1
		files := v.Levels[bottom]
		first, last := referencingRun(files, set)
		if first < 0 {
			continue // no table below L0 references the batch
		}
		c := d.newCompactionLocked(v, bottom, bottom, files[first:last+1])
		if c == nil {
			return fmt.Errorf("lsm: manual compaction found L%d files already compacting", bottom)
		}
		c.trivialMove = false
		c.relocate = set
		if err := d.runCompactionLocked(c); err != nil {
			if d.mu.closing {
				// Close stopped the batch (or it failed as the DB
				// closes): the next Open sorts out the manifest.
				return ErrClosed
			}
			d.setBackgroundErrorLocked(err)
			return err
		}
	}
}

// blobGarbageBatchLocked returns the next batch of blob files of v whose
// live records a full Compact relocates: settled files with garbage that
// no GC job holds or retires and that are not in skip, most garbage
// first, of at most 1/relocateShareOfLive of the blob files' live bytes
// (at least one file). nil if none.
// REQUIRES: d.mu held.
func (d *DB) blobGarbageBatchLocked(v *version.Version, skip map[base.FileNum]bool) map[base.FileNum]bool {
	cands := d.relocationCandidatesLocked(v, skip)
	if len(cands) == 0 {
		return nil
	}
	_, live := d.blobSizesLocked()
	limit := live / relocateShareOfLive
	out := map[base.FileNum]bool{}
	var batch uint64
	for _, m := range cands {
		if len(out) > 0 && batch+m.LiveBytes() > limit {
			break
		}
		out[m.FileNum] = true
		batch += m.LiveBytes()
	}
	return out
}

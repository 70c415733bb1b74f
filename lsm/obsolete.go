package lsm

import (
	"errors"
	"os"
	"slices"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// Deleting files is off every latency-critical path: Open and Close do
// not wait for it.
//
// Unlinking a table costs the kernel time in proportion to its size (the
// extents and the cached pages are freed in the unlink call: about 20 ms
// for a 40 MB table on ext4), and a compaction of the whole DB obsoletes
// every table at once. So:
//   - Open lists the directory, then returns; the cleaner goroutine
//     deletes what a crash or an earlier Close left behind (sweepOrphans)
//     after Open has returned, while the DB serves reads and writes.
//   - Close stops deleting at the next file boundary (deleteObsoleteFiles
//     checks d.closed between files) and leaves the rest on disk, for the
//     next Open's sweep. It waits for at most the unlink in progress.
//
// No durability rests on a deletion: the manifest, synced before any file
// leaves the version, is the record of which files are live, and a file
// left behind is only space, reclaimed by the next Open.

// signalCleaner asks the cleaner goroutine to delete obsolete files. It
// never blocks: the version set calls it (version.Options.OnObsolete)
// from whoever drops the last reference to a version holding files no
// other version holds, a reader, a compaction or blob GC, possibly with
// d.mu held.
func (d *DB) signalCleaner() {
	select {
	case d.cleanCh <- struct{}{}:
	default:
	}
}

// cleanerLoop first sweeps what Open found left behind (names, the
// directory listing Open took, and staleLogsBelow, see sweepOrphans), then
// deletes obsolete files when signalled, until Close.
func (d *DB) cleanerLoop(names []string, staleLogsBelow base.FileNum) {
	defer d.bgWG.Done()
	d.deleteObsoleteFiles()
	d.sweepOrphans(names, staleLogsBelow)
	close(d.sweptCh)
	for {
		select {
		case <-d.cleanCh:
			d.deleteObsoleteFiles()
		case <-d.closeCh:
			return
		}
	}
}

// deleteObsoleteFiles deletes tables and blob files no version references
// any more (a blob file leaves the versions when compactions have dropped
// every index into it, see version.BlobFileMetadata), and
// WALs below the manifest's log number. Deletion errors are logged, not
// returned: a file left behind is removed at the next Open. Once Close has
// begun it stops at the next file and leaves the rest to the next Open.
func (d *DB) deleteObsoleteFiles() {
	d.deleteMu.Lock()
	defer d.deleteMu.Unlock()
	d.mu.Lock()
	tables := d.mu.versions.ObsoleteFiles()
	blobs := d.mu.versions.ObsoleteBlobFiles()
	logNum := d.mu.versions.LogNumber()
	var logs []base.FileNum
	d.mu.liveLogs = slices.DeleteFunc(d.mu.liveLogs, func(n base.FileNum) bool {
		if n < logNum {
			logs = append(logs, n)
			return true
		}
		return false
	})
	d.mu.Unlock()
	for _, n := range tables {
		if d.closed.Load() {
			return // Close closes the readers; Open deletes the files
		}
		if err := d.tables.evict(n); err != nil {
			d.opts.Logger.Printf("lsm: closing obsolete table %s: %v", n, err)
		}
		d.removeFile(base.FileTypeTable, n)
	}
	for _, n := range blobs {
		if d.closed.Load() {
			return
		}
		d.evictBlobFile(n)
		d.removeFile(base.FileTypeBlob, n)
	}
	for _, n := range logs {
		if d.closed.Load() {
			return
		}
		d.removeFile(base.FileTypeLog, n)
	}
}

// sweepOrphans removes files a crash or an earlier Close left behind,
// among names (the directory as Open listed it, before this DB created
// any file): tables and blob files no live version references (outputs of
// an interrupted flush or compaction, inputs whose deletion Close cut
// short), temporary files, old manifests, and WALs numbered below
// staleLogsBelow (the log number the manifest had before this Open: WALs
// whose removal had not reached the disk when the machine crashed).
//
// It runs on the cleaner goroutine, concurrently with flushes,
// compactions and blob GC. That is safe because every file those create
// has a number above every name listed (Open marks each listed number
// used before it allocates one), and a listed file is deleted only when
// no live version, the current one or one a reader pins, holds it. A
// listed file that a compaction obsoletes meanwhile may be removed here
// and again by deleteObsoleteFiles: the second removal finds nothing,
// which removeFile accepts.
func (d *DB) sweepOrphans(names []string, staleLogsBelow base.FileNum) {
	d.deleteMu.Lock()
	defer d.deleteMu.Unlock()
	d.mu.Lock()
	live := d.mu.versions.LiveFiles()
	manifest := d.mu.versions.ManifestFileNum()
	d.mu.Unlock()
	for _, name := range names {
		if d.closed.Load() {
			return // the next Open sweeps again
		}
		ft, n, ok := base.ParseFilename(name)
		if !ok {
			continue
		}
		var obsolete bool
		switch ft {
		case base.FileTypeTable, base.FileTypeBlob:
			_, isLive := live[n]
			obsolete = !isLive
		case base.FileTypeTemp:
			obsolete = true
		case base.FileTypeManifest:
			obsolete = n != manifest
		case base.FileTypeLog:
			obsolete = n < staleLogsBelow
		}
		if obsolete {
			d.removeFile(ft, n)
		}
	}
}

// removeFile removes a file the DB no longer needs. One already gone is
// not an error: the aim, its absence, is met (see sweepOrphans).
func (d *DB) removeFile(ft base.FileType, n base.FileNum) {
	err := d.fs.Remove(base.MakeFilepath(d.dirname, ft, n))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		d.opts.Logger.Printf("lsm: removing obsolete file %s: %v", base.MakeFilename(ft, n), err)
	}
}

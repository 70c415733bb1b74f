package lsm

import (
	"slices"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

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

// cleanerLoop deletes obsolete files when signalled, until Close.
func (d *DB) cleanerLoop() {
	defer d.bgWG.Done()
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
// returned: a file left behind is removed at the next Open.
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
		if err := d.tables.evict(n); err != nil {
			d.opts.Logger.Printf("lsm: closing obsolete table %s: %v", n, err)
		}
		d.removeFile(base.FileTypeTable, n)
	}
	for _, n := range blobs {
		d.evictBlobFile(n)
		d.removeFile(base.FileTypeBlob, n)
	}
	for _, n := range logs {
		d.removeFile(base.FileTypeLog, n)
	}
}

func (d *DB) removeFile(ft base.FileType, n base.FileNum) {
	if err := d.fs.Remove(base.MakeFilepath(d.dirname, ft, n)); err != nil {
		d.opts.Logger.Printf("lsm: removing obsolete file %s: %v", base.MakeFilename(ft, n), err)
	}
}

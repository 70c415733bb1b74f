package version

import (
	"fmt"
	"maps"
	"sync/atomic"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// BlobFileMetadata describes one blob file of the LSM (key-value
// separation, lsm/blob) as of one version. It is immutable: an edit that
// adds garbage to a file produces a new *BlobFileMetadata for the next
// version, sharing the file's reference count with the old one.
//
// A blob file is referenced by the blob indexes of the tables. Compactions
// report the indexes they drop (overwritten, deleted, range-deleted
// values) as garbage; once a file's garbage count reaches its record count,
// no table of the version references it and the version drops it. The
// file is deleted from disk when no live version holds it (iterators pin
// versions, and snapshots keep the indexes they can see alive in tables).
type BlobFileMetadata struct {
	FileNum base.FileNum
	// Size is the file's length in bytes.
	Size uint64
	// Count and RecordBytes are the file's records and their total length.
	Count, RecordBytes uint64
	// GarbageCount and GarbageBytes are the records, and their bytes, whose
	// indexes compactions have dropped. Invariant: GarbageCount < Count
	// and GarbageBytes <= RecordBytes while the file is in a version.
	GarbageCount, GarbageBytes uint64
	// Unsettled marks a blob GC output whose index commit has not been
	// seen through: GC added the file, then failed (or the DB closed or
	// crashed) before it knew which of the file's records an index took.
	// Its garbage is then undercounted by an unknown amount, so blob GC
	// scans it first, whatever its ratio, and keeps only the records an
	// index still points at (see lsm/blob_gc.go).
	Unsettled bool

	// refs is shared by every *BlobFileMetadata of the same file.
	refs *atomic.Int32
}

// LiveBytes returns the record bytes not yet known to be garbage.
func (m *BlobFileMetadata) LiveBytes() uint64 {
	return m.RecordBytes - min(m.GarbageBytes, m.RecordBytes)
}

// GarbageRatio returns the fraction of the file's record bytes that is
// garbage.
func (m *BlobFileMetadata) GarbageRatio() float64 {
	if m.RecordBytes == 0 {
		return 0
	}
	return float64(m.GarbageBytes) / float64(m.RecordBytes)
}

func (m *BlobFileMetadata) String() string {
	s := fmt.Sprintf("%s: size=%d records=%d/%dB garbage=%d/%dB", m.FileNum, m.Size, m.Count, m.RecordBytes, m.GarbageCount, m.GarbageBytes)
	if m.Unsettled {
		s += " unsettled"
	}
	return s
}

// BlobGarbage records that compactions dropped Count indexes, of Bytes
// record bytes in total, into blob file FileNum.
type BlobGarbage struct {
	FileNum      base.FileNum
	Count, Bytes uint64
}

// validateBlob checks the invariants of a new blob file's metadata.
func (m *BlobFileMetadata) validate() error {
	if m.FileNum == 0 {
		return fmt.Errorf("version: blob file number 0")
	}
	if m.Count == 0 || m.RecordBytes < m.Count*12 || m.Size < m.RecordBytes || m.GarbageCount != 0 || m.GarbageBytes != 0 || m.Unsettled {
		return fmt.Errorf("version: impossible new blob file %s", m)
	}
	return nil
}

// applyBlobs applies the blob-file part of e to blobs (copied on first
// change, since the base version's map is shared) and returns the result.
// Garbage for a file the version no longer holds is ignored: it is the
// record of indexes into a file that blob GC already retired. So is the
// deletion of such a file.
func applyBlobs(blobs map[base.FileNum]*BlobFileMetadata, copied bool, e *VersionEdit,
	errorf func(format string, args ...any) error) (map[base.FileNum]*BlobFileMetadata, bool, error) {
	if len(e.DeletedBlobFiles) == 0 && len(e.NewBlobFiles) == 0 && len(e.BlobGarbage) == 0 &&
		len(e.UnsettledBlobFiles) == 0 && len(e.SettledBlobFiles) == 0 {
		return blobs, copied, nil
	}
	if !copied {
		blobs = maps.Clone(blobs)
		if blobs == nil {
			blobs = make(map[base.FileNum]*BlobFileMetadata)
		}
		copied = true
	}
	for _, n := range e.DeletedBlobFiles {
		// A deletion of a file already gone is ignored, like garbage for
		// it: blob GC decides to retire a file while a compaction may be
		// recording the garbage that removes it.
		delete(blobs, n)
	}
	for _, m := range e.NewBlobFiles {
		if err := m.validate(); err != nil {
			return nil, false, errorf("%v", err)
		}
		if _, ok := blobs[m.FileNum]; ok {
			return nil, false, errorf("version: edit adds blob file %s, which the version holds", m.FileNum)
		}
		nm := *m
		nm.refs = new(atomic.Int32)
		blobs[m.FileNum] = &nm
	}
	// Like garbage, a mark for a file no longer in the version is ignored.
	for _, n := range e.UnsettledBlobFiles {
		if old, ok := blobs[n]; ok {
			nm := *old
			nm.Unsettled = true
			blobs[n] = &nm
		}
	}
	for _, n := range e.SettledBlobFiles {
		if old, ok := blobs[n]; ok {
			nm := *old
			nm.Unsettled = false
			blobs[n] = &nm
		}
	}
	for _, g := range e.BlobGarbage {
		old, ok := blobs[g.FileNum]
		if !ok {
			continue
		}
		nm := *old
		nm.GarbageCount += g.Count
		nm.GarbageBytes += g.Bytes
		if nm.GarbageCount > nm.Count || nm.GarbageBytes > nm.RecordBytes {
			return nil, false, errorf("version: blob file %s: garbage %d/%dB exceeds its %d/%dB", g.FileNum,
				nm.GarbageCount, nm.GarbageBytes, nm.Count, nm.RecordBytes)
		}
		if nm.GarbageCount == nm.Count {
			delete(blobs, g.FileNum) // no index references it any more
			continue
		}
		blobs[g.FileNum] = &nm
	}
	return blobs, copied, nil
}

// BlobFile returns the metadata of blob file n in the version.
func (v *Version) BlobFile(n base.FileNum) (*BlobFileMetadata, bool) {
	m, ok := v.BlobFiles[n]
	return m, ok
}

package version

import (
	"bytes"
	"cmp"
	"fmt"
	"sync/atomic"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// FileMetadata describes one SST file of the LSM. Everything but refs and
// Compacting is immutable once the file is part of a version: a
// *FileMetadata may be shared by many versions and read without locks.
type FileMetadata struct {
	FileNum base.FileNum
	// Size is the size of the file in bytes.
	Size uint64
	// Smallest and Largest are the encoded internal keys bounding the file.
	// Largest may be a range-delete sentinel (base.MakeRangeDeleteSentinel),
	// in which case the file holds no point entry of Largest's user key: the
	// bound is exclusive on that user key.
	//
	// Invariant: base.InternalCompare(Smallest, Largest) <= 0.
	Smallest, Largest []byte
	// SmallestSeq and LargestSeq bound the sequence numbers of the file's
	// entries. Invariant: SmallestSeq <= LargestSeq.
	SmallestSeq, LargestSeq base.SeqNum
	// NumEntries counts the file's entries, NumDeletions its point and range
	// deletions. They are statistics for compaction scoring.
	NumEntries, NumDeletions uint64
	// NumRangeDeletions counts the file's range tombstones; readers skip
	// files without any when gathering tombstones.
	NumRangeDeletions uint64

	// Compacting is true while a compaction has picked the file as an input
	// (or output level overlap) and has not yet finished.
	//
	// Guarded by the DB mutex: read and write it only with the mutex that
	// is passed to VersionSet.LogAndApply held. It is not persisted.
	Compacting bool

	// OneVersionPerKey is true when the table is known to hold at most one
	// entry per user key and no point or range deletion: its writer saw
	// so. Compacting such a table alone (the bottom level into itself)
	// would drop nothing, whatever snapshots are open. Not persisted: a
	// table read from the manifest is not known to be so, which costs at
	// most one rewrite.
	//
	// Set before the table is installed in a version, never changed after.
	OneVersionPerKey bool

	// BlobRefs lists, sorted, the blob files the table's blob indexes
	// point into, when BlobRefsKnown: its writer recorded them. Blob GC by
	// compaction uses it to find the tables that reference a file it
	// wants to relocate. Not persisted: a table read from the manifest is
	// taken to reference any blob file until a compaction rewrites it.
	//
	// Set before the table is installed in a version, never changed after.
	BlobRefs      []base.FileNum
	BlobRefsKnown bool
	// BlobRefBytes sums the record lengths of the table's blob indexes
	// (0 when not known).
	BlobRefBytes uint64

	// refs counts the versions that contain the file. A version takes its
	// references before it is installed and drops them when its own count
	// reaches zero; the file is obsolete once refs reaches zero. Atomic,
	// because versions are released without the DB mutex.
	refs atomic.Int32
}

// Refs returns the number of versions that contain the file.
func (m *FileMetadata) Refs() int32 { return m.refs.Load() }

// ref adds a version's reference.
func (m *FileMetadata) ref() { m.refs.Add(1) }

// unref drops a version's reference and reports whether it was the last.
func (m *FileMetadata) unref() bool {
	n := m.refs.Add(-1)
	if n < 0 {
		panic(fmt.Sprintf("version: file %s: negative reference count %d", m.FileNum, n))
	}
	return n == 0
}

// UserKeyBounds returns the user keys bounding the file. start is always
// inclusive; end is exclusive when the file's largest key is a range-delete
// sentinel and inclusive otherwise. The slices alias the file's keys.
func (m *FileMetadata) UserKeyBounds() (start, end []byte, endExclusive bool) {
	return base.UserKey(m.Smallest), base.UserKey(m.Largest), base.IsRangeDeleteSentinel(m.Largest)
}

// Overlaps reports whether the file holds keys of the user-key range
// [start, end] (both inclusive). A nil start means no lower bound and a nil
// end no upper bound; the engine refuses empty user keys, so nil is never a
// real key.
func (m *FileMetadata) Overlaps(start, end []byte) bool {
	return m.overlaps(start, end, false)
}

// overlaps is Overlaps with an optionally exclusive end.
func (m *FileMetadata) overlaps(start, end []byte, endExclusive bool) bool {
	fStart, fEnd, fEndExclusive := m.UserKeyBounds()
	// The file lies entirely after the range?
	if end != nil {
		c := bytes.Compare(fStart, end)
		if c > 0 || (c == 0 && endExclusive) {
			return false
		}
	}
	// The file lies entirely before the range?
	if start != nil {
		c := bytes.Compare(fEnd, start)
		if c < 0 || (c == 0 && fEndExclusive) {
			return false
		}
	}
	return true
}

// ContainsUserKey reports whether ukey lies within the file's user-key
// bounds (the file may still not hold it).
func (m *FileMetadata) ContainsUserKey(ukey []byte) bool {
	return m.overlaps(ukey, ukey, false)
}

// validate checks the invariants of a file's metadata that do not depend on
// the level it is in. Decoded metadata goes through it; callers mark the
// error as corruption or invalid argument as fits.
func (m *FileMetadata) validate() error {
	if !base.ValidInternalKey(m.Smallest) {
		return fmt.Errorf("version: file %s: invalid smallest key %q", m.FileNum, m.Smallest)
	}
	if !base.ValidInternalKey(m.Largest) {
		return fmt.Errorf("version: file %s: invalid largest key %q", m.FileNum, m.Largest)
	}
	// This also refuses [k, k-sentinel): the sentinel sorts before every
	// real entry of k, so such a range would be empty.
	if base.InternalCompare(m.Smallest, m.Largest) > 0 {
		return fmt.Errorf("version: file %s: smallest key %s > largest key %s",
			m.FileNum, formatKey(m.Smallest), formatKey(m.Largest))
	}
	if m.SmallestSeq > m.LargestSeq {
		return fmt.Errorf("version: file %s: smallest seq %d > largest seq %d",
			m.FileNum, m.SmallestSeq, m.LargestSeq)
	}
	if m.LargestSeq > base.SeqNumMax {
		return fmt.Errorf("version: file %s: sequence number %d out of range", m.FileNum, m.LargestSeq)
	}
	return nil
}

// String renders the file as "000005:[a#5,SET-c#3,SET]".
func (m *FileMetadata) String() string {
	return fmt.Sprintf("%s:[%s-%s]", m.FileNum, formatKey(m.Smallest), formatKey(m.Largest))
}

// formatKey renders an internal key compactly: "a#5,SET", and "c#inf,RANGEDEL"
// for range-delete sentinels.
func formatKey(ikey []byte) string {
	ukey, seq, kind, ok := base.ParseInternalKey(ikey)
	if !ok {
		return fmt.Sprintf("invalid(%q)", ikey)
	}
	if seq == base.SeqNumMax {
		return fmt.Sprintf("%s#inf,%s", ukey, kind)
	}
	return fmt.Sprintf("%s#%d,%s", ukey, seq, kind)
}

// orderL0 is the order of L0: by LargestSeq, then SmallestSeq, then FileNum,
// ascending — oldest first, newest last.
func orderL0(a, b *FileMetadata) int {
	switch {
	case a.LargestSeq != b.LargestSeq:
		return cmp.Compare(a.LargestSeq, b.LargestSeq)
	case a.SmallestSeq != b.SmallestSeq:
		return cmp.Compare(a.SmallestSeq, b.SmallestSeq)
	}
	return cmp.Compare(a.FileNum, b.FileNum)
}

// orderByKey is the order of L1+: by smallest internal key (then FileNum so
// the order is total even on invalid input).
func orderByKey(a, b *FileMetadata) int {
	if c := base.InternalCompare(a.Smallest, b.Smallest); c != 0 {
		return c
	}
	return cmp.Compare(a.FileNum, b.FileNum)
}

// disjoint reports whether a, which sorts before b in L1+ order, ends before
// b begins in user-key space.
func disjoint(a, b *FileMetadata) bool {
	aEnd := base.UserKey(a.Largest)
	bStart := base.UserKey(b.Smallest)
	c := bytes.Compare(aEnd, bStart)
	return c < 0 || (c == 0 && base.IsRangeDeleteSentinel(a.Largest))
}

package version

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// NumLevels is the number of levels of the LSM: L0 through L6.
const NumLevels = 7

// FileLocation is where a file sits in a version: Levels[Level][Position].
type FileLocation struct {
	Level, Position int
}

// Version is an immutable set of files per level. Readers pin a version (Ref)
// for as long as they use its files; a file is obsolete once no version
// contains it.
//
// Levels[0] may hold overlapping files; it is sorted oldest first, newest
// last, by (LargestSeq, SmallestSeq, FileNum) ascending, so a read that wants
// the newest data first walks it backwards. Levels[1:] are sorted by Smallest
// and their files do not overlap in user-key space (a file whose Largest is a
// range-delete sentinel for user key k may be followed by a file starting at
// k). Level slices may be shared with other versions: never modify them.
type Version struct {
	Levels [NumLevels][]*FileMetadata

	// BlobFiles are the version's blob files (key-value separation), by
	// number; nil when there are none. The map may be shared with other
	// versions: never modify it.
	BlobFiles map[base.FileNum]*BlobFileMetadata

	// fileLocations maps every file of the version to its place. It is built
	// once by PrepareForInstall, before the version is installed, and is
	// read-only afterwards. See doc.go ("The file-location hash").
	fileLocations map[base.FileNum]FileLocation

	// refs counts the holders of the version: the version set while the
	// version is current, and every iterator, compaction or Get that pinned
	// it. Atomic: Unref runs without the DB mutex.
	refs atomic.Int32

	// vs receives the files that become obsolete when refs drops to zero.
	// nil for versions that no version set installed (tests, tools).
	vs *VersionSet

	// prev and next link the version into vs's list of live versions.
	// Guarded by vs.list.mu.
	prev, next *Version
}

// NewVersion returns a version holding files, which must be ordered as
// Version requires, with the file-location hash already built. The version
// belongs to no version set: it takes no file references and its Ref/Unref
// only count. It is meant for tests and tools.
func NewVersion(levels [NumLevels][]*FileMetadata) *Version {
	v := &Version{Levels: levels}
	v.refs.Store(1)
	v.PrepareForInstall()
	return v
}

// Ref pins the version. The caller must already hold a reference or hold the
// DB mutex while the version is current.
func (v *Version) Ref() {
	if v.refs.Add(1) <= 1 {
		panic("version: Ref of a released version")
	}
}

// Unref drops a reference. When the last one goes, every file of the version
// drops one reference, and files no longer in any version are handed to the
// version set's obsolete list (VersionSet.ObsoleteFiles). Unref does not need
// the DB mutex: it may be called from any goroutine, for example by an
// iterator's Close.
func (v *Version) Unref() {
	switch n := v.refs.Add(-1); {
	case n > 0:
		return
	case n < 0:
		panic(fmt.Sprintf("version: negative reference count %d", n))
	}
	if v.vs == nil {
		return
	}
	v.vs.releaseVersion(v)
}

// Refs returns the version's reference count.
func (v *Version) Refs() int32 { return v.refs.Load() }

// takeFileRefs adds the version's reference to each of its files.
func (v *Version) takeFileRefs() {
	for level := range v.Levels {
		for _, f := range v.Levels[level] {
			f.ref()
		}
	}
	for _, b := range v.BlobFiles {
		b.refs.Add(1)
	}
}

// releaseFileRefs drops the version's reference from each of its files and
// appends to obsolete the files whose count reached zero.
func (v *Version) releaseFileRefs(obsolete []base.FileNum) []base.FileNum {
	for level := range v.Levels {
		for _, f := range v.Levels[level] {
			if f.unref() {
				obsolete = append(obsolete, f.FileNum)
			}
		}
	}
	return obsolete
}

// releaseBlobRefs drops the version's reference from each of its blob
// files and appends to obsolete those whose count reached zero.
func (v *Version) releaseBlobRefs(obsolete []base.FileNum) []base.FileNum {
	for _, b := range v.BlobFiles {
		n := b.refs.Add(-1)
		if n < 0 {
			panic(fmt.Sprintf("version: blob file %s: negative reference count %d", b.FileNum, n))
		}
		if n == 0 {
			obsolete = append(obsolete, b.FileNum)
		}
	}
	return obsolete
}

// PrepareForInstall builds the version's file-location hash. It must run
// before the version is published to other goroutines, and — this is the
// point of doing it here — without the DB mutex held: the map is
// O(files) work that nothing else needs to wait for. The map is allocated
// with room for every file so that it never grows (no rehashing). Calling it
// again is a no-op.
func (v *Version) PrepareForInstall() {
	if v.fileLocations != nil {
		return
	}
	v.fileLocations = make(map[base.FileNum]FileLocation, v.NumFiles())
	for level, files := range v.Levels {
		for pos, f := range files {
			v.fileLocations[f.FileNum] = FileLocation{Level: level, Position: pos}
		}
	}
}

// FileLocation returns where file n sits in the version. The version must
// have been prepared (PrepareForInstall); every installed version has.
func (v *Version) FileLocation(n base.FileNum) (FileLocation, bool) {
	if v.fileLocations == nil {
		panic("version: FileLocation before PrepareForInstall")
	}
	loc, ok := v.fileLocations[n]
	return loc, ok
}

// File returns file n's metadata and level, if the version contains it.
func (v *Version) File(n base.FileNum) (*FileMetadata, int, bool) {
	loc, ok := v.FileLocation(n)
	if !ok {
		return nil, 0, false
	}
	return v.Levels[loc.Level][loc.Position], loc.Level, true
}

// NumFiles returns the number of files of the version.
func (v *Version) NumFiles() int {
	n := 0
	for _, files := range v.Levels {
		n += len(files)
	}
	return n
}

// NumLevelFiles returns the number of files of a level.
func (v *Version) NumLevelFiles(level int) int { return len(v.Levels[level]) }

// LevelSize returns the total size in bytes of a level's files.
func (v *Version) LevelSize(level int) uint64 {
	var n uint64
	for _, f := range v.Levels[level] {
		n += f.Size
	}
	return n
}

// Overlaps returns the files of level that hold keys of the user-key range
// [start, end] (both inclusive; nil start or end means unbounded).
//
// For L0 the range grows transitively, as LevelDB does: a file that overlaps
// the range widens it to the file's bounds, and every L0 file overlapping the
// widened range is included too, so that a compaction of the result never
// leaves an older version of a key behind in L0. The result is in L0 order.
//
// For L1+ the result is a sub-slice of the level: do not modify it.
func (v *Version) Overlaps(level int, start, end []byte) []*FileMetadata {
	files := v.Levels[level]
	if level == 0 {
		return overlapsL0(files, start, end)
	}
	// The first file that does not end before start.
	i := 0
	if start != nil {
		i = sort.Search(len(files), func(i int) bool {
			fEnd := base.UserKey(files[i].Largest)
			c := bytes.Compare(fEnd, start)
			return c > 0 || (c == 0 && !base.IsRangeDeleteSentinel(files[i].Largest))
		})
	}
	// The first file, from i on, that starts after end.
	j := len(files)
	if end != nil {
		j = i + sort.Search(len(files)-i, func(k int) bool {
			return bytes.Compare(base.UserKey(files[i+k].Smallest), end) > 0
		})
	}
	return files[i:j:j]
}

func overlapsL0(files []*FileMetadata, start, end []byte) []*FileMetadata {
	selected := make([]bool, len(files))
	n := 0
	endExclusive := false
	for changed := true; changed; {
		changed = false
		for i, f := range files {
			if selected[i] || !f.overlaps(start, end, endExclusive) {
				continue
			}
			selected[i] = true
			n++
			fStart, fEnd, fEndExclusive := f.UserKeyBounds()
			if start != nil && bytes.Compare(fStart, start) < 0 {
				start = fStart
				changed = true
			}
			if end != nil {
				c := bytes.Compare(fEnd, end)
				if c > 0 || (c == 0 && endExclusive && !fEndExclusive) {
					end, endExclusive = fEnd, fEndExclusive
					changed = true
				}
			}
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]*FileMetadata, 0, n)
	for i, f := range files {
		if selected[i] {
			out = append(out, f)
		}
	}
	return out
}

// FindFile returns the index of the first file of level (>= 1) whose largest
// key is >= ikey (an encoded internal key), or the number of files of the
// level if there is none. It is the file that may hold ikey. FindFile panics
// for L0, whose files are not ordered by key.
func (v *Version) FindFile(level int, ikey []byte) int {
	if level == 0 {
		panic("version: FindFile on L0")
	}
	files := v.Levels[level]
	return sort.Search(len(files), func(i int) bool {
		return base.InternalCompare(files[i].Largest, ikey) >= 0
	})
}

// CheckOrdering verifies the invariants of the version: every file's
// metadata is valid, no file appears twice, L0 is in (LargestSeq,
// SmallestSeq, FileNum) order and L1+ are sorted by smallest key and do not
// overlap. It costs O(files) and is run by tests, by Load and, under the
// invariants build tag, on every new version.
func (v *Version) CheckOrdering() error {
	seen := make(map[base.FileNum]int, v.NumFiles())
	for level, files := range v.Levels {
		for i, f := range files {
			if err := f.validate(); err != nil {
				return base.MarkCorruption(err)
			}
			if prev, dup := seen[f.FileNum]; dup {
				return base.CorruptionErrorf("version: file %s in L%d and L%d", f.FileNum, prev, level)
			}
			seen[f.FileNum] = level
			if i == 0 {
				continue
			}
			prev := files[i-1]
			if level == 0 {
				if orderL0(prev, f) >= 0 {
					return base.CorruptionErrorf("version: L0 files %s (seqs %d-%d) and %s (seqs %d-%d) out of order",
						prev.FileNum, prev.SmallestSeq, prev.LargestSeq, f.FileNum, f.SmallestSeq, f.LargestSeq)
				}
				continue
			}
			if orderByKey(prev, f) >= 0 {
				return base.CorruptionErrorf("version: L%d files %s and %s out of order", level, prev, f)
			}
			if !disjoint(prev, f) {
				return base.CorruptionErrorf("version: L%d files %s and %s overlap", level, prev, f)
			}
		}
	}
	return nil
}

// String renders the version one file per line under its level, for tests
// and debugging. Empty levels are left out.
func (v *Version) String() string {
	var sb strings.Builder
	for level, files := range v.Levels {
		if len(files) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "L%d:\n", level)
		for _, f := range files {
			fmt.Fprintf(&sb, "  %s seqs=[%d-%d]\n", f, f.SmallestSeq, f.LargestSeq)
		}
	}
	if sb.Len() == 0 {
		return "(empty)\n"
	}
	return sb.String()
}

package version

import (
	"fmt"
	"slices"
	"sort"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// builder applies a sequence of edits to a base version and produces the
// resulting version, like LevelDB's VersionSet::Builder. LogAndApply applies
// one edit to the current version; Load applies the whole manifest to the
// empty version.
//
// It validates as it goes: a file may not be added while the version holds
// it, deleted from a level that does not hold it, or added to L1+ where it
// would overlap a neighbour. The errors come from errorf: corruption errors
// when replaying a manifest, invalid-argument errors for a live edit.
//
// The base version must have its file-location hash (every installed version
// and the empty version do): it makes the membership checks O(1) per file.
type builder struct {
	base   *Version
	errorf func(format string, args ...any) error

	// added holds the files added by the edits so far and still present.
	added map[base.FileNum]NewFile
	// deletedBase holds the files of base deleted by the edits so far,
	// mapped to their position in their level.
	deletedBase map[base.FileNum]FileLocation
	// blobs is the blob files so far; blobsCopied says whether it is
	// still the base version's (shared) map.
	blobs       map[base.FileNum]*BlobFileMetadata
	blobsCopied bool
}

func newBuilder(v *Version, errorf func(format string, args ...any) error) *builder {
	return &builder{
		base:        v,
		errorf:      errorf,
		added:       make(map[base.FileNum]NewFile),
		deletedBase: make(map[base.FileNum]FileLocation),
		blobs:       v.BlobFiles,
	}
}

// apply folds edit into the builder. Deletions apply before additions, so an
// edit may move a file by deleting it from one level and adding it to another.
// On error the builder must be discarded.
func (b *builder) apply(e *VersionEdit) error {
	for _, d := range e.sortedDeletedFiles() {
		if d.Level < 0 || d.Level >= NumLevels {
			return b.errorf("version: edit deletes file %s from level %d", d.FileNum, d.Level)
		}
		if a, ok := b.added[d.FileNum]; ok {
			if a.Level != d.Level {
				return b.errorf("version: edit deletes file %s from L%d, but it is in L%d", d.FileNum, d.Level, a.Level)
			}
			delete(b.added, d.FileNum)
			continue
		}
		loc, ok := b.base.FileLocation(d.FileNum)
		if _, gone := b.deletedBase[d.FileNum]; !ok || gone || loc.Level != d.Level {
			return b.errorf("version: edit deletes file %s from L%d, which does not hold it", d.FileNum, d.Level)
		}
		b.deletedBase[d.FileNum] = loc
	}
	for _, nf := range e.NewFiles {
		if nf.Level < 0 || nf.Level >= NumLevels {
			return b.errorf("version: edit adds a file to level %d", nf.Level)
		}
		m := nf.Meta
		if m == nil {
			return b.errorf("version: edit adds a nil file to L%d", nf.Level)
		}
		if m.FileNum == 0 {
			return b.errorf("version: edit adds file number 0 to L%d", nf.Level)
		}
		if err := m.validate(); err != nil {
			return b.errorf("%v", err)
		}
		if a, ok := b.added[m.FileNum]; ok {
			return b.errorf("version: edit adds file %s to L%d, but it is already in L%d", m.FileNum, nf.Level, a.Level)
		}
		if loc, ok := b.base.FileLocation(m.FileNum); ok {
			if _, gone := b.deletedBase[m.FileNum]; !gone {
				return b.errorf("version: edit adds file %s to L%d, but it is already in L%d", m.FileNum, nf.Level, loc.Level)
			}
			// A move. Reference counts live in the metadata, so the
			// version must keep the same object.
			if b.base.Levels[loc.Level][loc.Position] != m {
				return b.errorf("version: edit moves file %s with a new *FileMetadata", m.FileNum)
			}
		}
		b.added[m.FileNum] = nf
	}
	blobs, copied, err := applyBlobs(b.blobs, b.blobsCopied, e, b.errorf)
	if err != nil {
		return err
	}
	b.blobs, b.blobsCopied = blobs, copied
	return nil
}

// levels returns the levels of the version the edits produce. Levels that
// no edit touched share the base version's slices; the others are new.
// Additions to L1+ are checked against their neighbours for overlap.
func (b *builder) levels() ([NumLevels][]*FileMetadata, error) {
	var addedPerLevel [NumLevels][]*FileMetadata
	for _, nf := range b.added {
		addedPerLevel[nf.Level] = append(addedPerLevel[nf.Level], nf.Meta)
	}
	var deletedPerLevel [NumLevels][]int
	for _, loc := range b.deletedBase {
		deletedPerLevel[loc.Level] = append(deletedPerLevel[loc.Level], loc.Position)
	}

	var out [NumLevels][]*FileMetadata
	for level := range out {
		baseFiles := b.base.Levels[level]
		adds, dels := addedPerLevel[level], deletedPerLevel[level]
		if len(adds) == 0 && len(dels) == 0 {
			out[level] = baseFiles
			continue
		}
		order := orderByKey
		if level == 0 {
			order = orderL0
		}
		slices.SortFunc(adds, order)
		slices.Sort(dels)
		files, addedAt := merge(baseFiles, dels, adds, order)
		if level > 0 {
			for _, i := range addedAt {
				if i > 0 && !disjoint(files[i-1], files[i]) {
					return out, b.errorf("version: L%d files %s and %s overlap", level, files[i-1], files[i])
				}
				if i+1 < len(files) && !disjoint(files[i], files[i+1]) {
					return out, b.errorf("version: L%d files %s and %s overlap", level, files[i], files[i+1])
				}
			}
		} else {
			for _, i := range addedAt {
				if (i > 0 && order(files[i-1], files[i]) >= 0) || (i+1 < len(files) && order(files[i], files[i+1]) >= 0) {
					return out, b.errorf("version: L0 file %s out of order", files[i])
				}
			}
		}
		if len(files) == 0 {
			files = nil
		}
		out[level] = files
	}
	return out, nil
}

// merge returns from without the files at the (sorted) positions dels and
// with the (sorted) files adds inserted in order, and the positions of the
// inserted files in the result. It copies runs of from with a binary search
// per insertion: O(len(from) + len(adds)·log len(from)) pointer copies and
// comparisons.
func merge(from []*FileMetadata, dels []int, adds []*FileMetadata, order func(a, b *FileMetadata) int) ([]*FileMetadata, []int) {
	out := make([]*FileMetadata, 0, len(from)-len(dels)+len(adds))
	addedAt := make([]int, 0, len(adds))
	pos, di, ai := 0, 0, 0
	for {
		nextDel := len(from)
		if di < len(dels) {
			nextDel = dels[di]
		}
		nextIns := len(from)
		if ai < len(adds) {
			a := adds[ai]
			nextIns = pos + sort.Search(len(from)-pos, func(i int) bool { return order(a, from[pos+i]) < 0 })
		}
		stop := min(nextDel, nextIns)
		out = append(out, from[pos:stop]...)
		pos = stop
		switch {
		case ai < len(adds) && nextIns <= nextDel:
			addedAt = append(addedAt, len(out))
			out = append(out, adds[ai])
			ai++
		case di < len(dels):
			pos++ // skip the deleted file at dels[di]
			di++
		default:
			return out, addedAt
		}
	}
}

// version returns the version the edits produce. It takes no file
// references and has no file-location hash yet.
func (b *builder) version() (*Version, error) {
	levels, err := b.levels()
	if err != nil {
		return nil, err
	}
	blobs := b.blobs
	if len(blobs) == 0 {
		blobs = nil
	}
	return &Version{Levels: levels, BlobFiles: blobs}, nil
}

// corruptionf and invalidArgf are the builder's error constructors for
// replayed and live edits.
func corruptionf(format string, args ...any) error {
	return base.CorruptionErrorf(format, args...)
}

func invalidArgf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", base.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

package lsm

import (
	"bytes"
	"slices"
	"sort"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/version"
)

// compaction describes one compaction: the input files of the start level
// and of the output level, and what the picker decided about them.
type compaction struct {
	startLevel, outputLevel int
	// inputs[0] are the start level's files, inputs[1] the output level's.
	inputs [2][]*version.FileMetadata
	// smallest and largest are the user-key bounds of all inputs.
	smallest, largest []byte
	// bottommost: no level below the output level holds a key in the
	// compaction's range, so tombstones may be dropped there.
	bottommost bool
	// trivialMove: the start level's inputs do not overlap one another
	// and nothing in the output level overlaps them; they move down by a
	// manifest edit alone (see newCompactionLocked for L0).
	trivialMove bool
	version     *version.Version
	score       float64
	// forcedBlob: the picker chose the compaction to relocate blob
	// records (pickBlobCompactionLocked), not for the levels' shape.
	forcedBlob bool
	// relocate are the blob files whose records the compaction relocates
	// (set by runCompactionLocked; see blob_relocate.go).
	relocate map[base.FileNum]bool
	// outputs: set by runCompactionLocked, the tables the compaction
	// installed (for the event listener).
	outputs []*version.FileMetadata
}

// levelTargets computes dynamic level sizes (RocksDB's
// level_compaction_dynamic_level_bytes): the bottom level's target is its
// actual size, each level above it is LevelMultiplier times smaller, and
// the base level, the one L0 compacts into, is the deepest level whose
// target is at most LBaseMaxBytes. A small DB therefore has one populated
// level below L0, and levels appear above it as the DB grows, which keeps
// space amplification near 1 + 1/multiplier.
func levelTargets(v *version.Version, o *Options) (baseLevel int, targets [version.NumLevels]int64) {
	bottom := int64(0)
	for l := 1; l < version.NumLevels; l++ {
		bottom = max(bottom, levelSize(v, l))
	}
	mult := int64(o.LevelMultiplier)
	baseLevel = version.NumLevels - 1
	cur := max(bottom, o.LBaseMaxBytes)
	targets[baseLevel] = cur
	for baseLevel > 1 && cur/mult >= o.LBaseMaxBytes {
		cur /= mult
		baseLevel--
		targets[baseLevel] = cur
	}
	return baseLevel, targets
}

// pendingCompactionBytes estimates the bytes compactions will rewrite to
// bring v's levels within their targets, as RocksDB's
// EstimateCompactionBytesNeeded does: an L0 at its compaction threshold is
// merged, whole, with the base level; then from L1 down, the bytes of a
// level above its target (those it holds, plus what the level above pushes
// into it) move down one level, rewriting with them their share of the
// next level (its size over this one's). Levels above the base level have
// no target: all their bytes move down. The bottom level is never pushed
// further.
func pendingCompactionBytes(v *version.Version, o *Options, baseLevel int, targets [version.NumLevels]int64) int64 {
	var pending, fromL0, incoming float64
	if len(v.Levels[0]) >= o.L0CompactionThreshold {
		fromL0 = float64(levelSize(v, 0))
		pending += fromL0 + float64(levelSize(v, baseLevel))
	}
	for l := 1; l < version.NumLevels-1; l++ {
		size := float64(levelSize(v, l)) + incoming
		if l == baseLevel {
			size += fromL0
		}
		incoming = 0
		if excess := size - float64(targets[l]); excess > 0 {
			incoming = excess
			pending += excess * (float64(levelSize(v, l+1))/size + 1)
		}
	}
	return int64(pending)
}

func levelSize(v *version.Version, level int) int64 {
	var n int64
	for _, f := range v.Levels[level] {
		n += int64(f.Size)
	}
	return n
}

// pickCompactionLocked returns the most urgent compaction that does not
// conflict with a running one, or nil. It marks the chosen inputs as
// compacting and takes a reference on the version.
//
// The levels are tried by score, the most urgent first, and in a level
// below L0 its files from the compaction pointer on, round robin, until a
// compaction's inputs are all free and it conflicts with none running.
// With no compaction running the first candidate is taken: one compaction
// at a time is picked exactly as before concurrent compactions.
// REQUIRES: d.mu held.
func (d *DB) pickCompactionLocked() *compaction {
	v := d.mu.versions.Current()
	baseLevel, targets := levelTargets(v, d.opts)

	type candidate struct {
		level int
		score float64
	}
	var cands []candidate
	if n := len(v.Levels[0]); n > 0 {
		if s := float64(n) / float64(d.opts.L0CompactionThreshold); s >= 1 {
			cands = append(cands, candidate{0, s})
		}
	}
	for l := 1; l < version.NumLevels-1; l++ {
		size := levelSize(v, l)
		if size == 0 {
			continue
		}
		var s float64
		if l < baseLevel {
			// A level above the base level holds data left from a
			// smaller DB: push it down first.
			s = 1e9
		} else {
			s = float64(size) / float64(targets[l])
		}
		if s > 1 {
			cands = append(cands, candidate{l, s})
		}
	}
	if len(cands) == 0 {
		return d.pickBlobCompactionLocked(v, baseLevel)
	}
	// By score, highest first; on a tie the upper level (L0 wins a tie
	// with any level, as before).
	slices.SortStableFunc(cands, func(a, b candidate) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return 0
	})
	l0Blocked := false
	for _, cand := range cands {
		var c *compaction
		if cand.level == 0 {
			c = d.newCompactionLocked(v, 0, l0OutputLevel(v, baseLevel), v.Levels[0])
			l0Blocked = c == nil
		} else if l0Blocked && cand.level == l0OutputLevel(v, baseLevel) {
			// L0 is more urgent and waits for this level's tables:
			// compacting more of them would keep it waiting.
			continue
		} else {
			for _, f := range d.levelFilesLocked(v, cand.level) {
				if c = d.newCompactionLocked(v, cand.level, cand.level+1, []*version.FileMetadata{f}); c != nil {
					break
				}
			}
		}
		if c != nil {
			c.score = cand.score
			return c
		}
		if len(d.mu.compactions.inProgress) == 0 {
			return nil // nothing runs that could have blocked it
		}
	}
	return nil
}

// levelFilesLocked returns the files of level that are not compacting in
// the order the picker tries them: the first one after the level's
// compaction pointer, round robin, as LevelDB does, so that every part of
// the key space is compacted in turn.
// REQUIRES: d.mu held.
func (d *DB) levelFilesLocked(v *version.Version, level int) []*version.FileMetadata {
	files := v.Levels[level]
	ptr := d.mu.compactPointer[level]
	i := 0
	if ptr != nil {
		i = sort.Search(len(files), func(i int) bool { return bytes.Compare(files[i].Smallest, ptr) > 0 })
	}
	out := make([]*version.FileMetadata, 0, len(files))
	for _, f := range append(files[i:len(files):len(files)], files[:i]...) {
		if !f.Compacting {
			out = append(out, f)
		}
	}
	return out
}

// newCompactionLocked builds a compaction of start (files of startLevel)
// into outputLevel. It returns nil if any needed file is already being
// compacted.
// REQUIRES: d.mu held.
func (d *DB) newCompactionLocked(v *version.Version, startLevel, outputLevel int, start []*version.FileMetadata) *compaction {
	if len(start) == 0 {
		return nil
	}
	c := &compaction{startLevel: startLevel, outputLevel: outputLevel, version: v}
	c.inputs[0] = append([]*version.FileMetadata(nil), start...)
	c.smallest, c.largest = userKeyRange(c.inputs[0])
	if startLevel == 0 {
		// L0 files overlap one another: take every L0 file touching
		// the range, repeatedly, so that no older version of a key is
		// left behind a newer one.
		c.inputs[0] = v.Overlaps(0, c.smallest, c.largest)
		c.smallest, c.largest = userKeyRange(c.inputs[0])
	}
	if outputLevel != startLevel {
		c.inputs[1] = v.Overlaps(outputLevel, c.smallest, c.largest)
	}
	all := append(append([]*version.FileMetadata(nil), c.inputs[0]...), c.inputs[1]...)
	for _, f := range all {
		if f.Compacting {
			return nil
		}
	}
	c.smallest, c.largest = userKeyRange(all)
	if d.conflictsLocked(startLevel, outputLevel, c.smallest, c.largest) {
		return nil
	}
	c.bottommost = true
	for l := outputLevel + 1; l < version.NumLevels; l++ {
		if len(v.Overlaps(l, c.smallest, c.largest)) > 0 {
			c.bottommost = false
			break
		}
	}
	// L0 tables move only when a merge would drop nothing: they do not
	// overlap one another (a sequential fill) and hold one version per
	// key, so shadowed data and tombstones, and the blob garbage they
	// reveal, are still found by the L0 compaction that merges them.
	// Nor does a table move that overlaps more than
	// maxGrandparentOverlapFiles target sizes of the level below the
	// output level (LevelDB's IsTrivialMove): the compaction that later
	// pushes it down would rewrite all of that at once; a merge cuts it
	// (grandparentCutter).
	c.trivialMove = startLevel != outputLevel && len(c.inputs[1]) == 0 &&
		(startLevel > 0 || (disjointFiles(c.inputs[0]) && allOneVersionPerKey(c.inputs[0]))) &&
		d.grandparentOverlapBounded(v, outputLevel, c.inputs[0])
	for _, f := range all {
		f.Compacting = true
	}
	d.mu.compactions.inProgress = append(d.mu.compactions.inProgress, c)
	v.Ref()
	return c
}

// grandparentOverlapBounded reports whether none of files overlaps more
// than maxGrandparentOverlapFiles target sizes of the level below
// outputLevel.
func (d *DB) grandparentOverlapBounded(v *version.Version, outputLevel int, files []*version.FileMetadata) bool {
	if outputLevel+1 >= version.NumLevels {
		return true
	}
	limit := maxGrandparentOverlapFiles * d.opts.TargetFileSizeBytes
	for _, f := range files {
		smallest, largest, _ := f.UserKeyBounds()
		var overlap int64
		for _, g := range v.Overlaps(outputLevel+1, smallest, largest) {
			overlap += int64(g.Size)
		}
		if overlap > limit {
			return false
		}
	}
	return true
}

// disjointFiles reports whether no two of files (L0 files) overlap in
// user-key space: then they may move into a lower level together.
func disjointFiles(files []*version.FileMetadata) bool {
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(a, b *version.FileMetadata) int {
		return bytes.Compare(base.UserKey(a.Smallest), base.UserKey(b.Smallest))
	})
	for i := 1; i < len(sorted); i++ {
		start, _, _ := sorted[i].UserKeyBounds()
		if sorted[i-1].Overlaps(start, start) {
			return false
		}
	}
	return true
}

// userKeyRange returns the smallest and largest user keys of files.
func userKeyRange(files []*version.FileMetadata) (smallest, largest []byte) {
	for i, f := range files {
		s, l, _ := f.UserKeyBounds()
		if i == 0 || bytes.Compare(s, smallest) < 0 {
			smallest = s
		}
		if i == 0 || bytes.Compare(l, largest) > 0 {
			largest = l
		}
	}
	return smallest, largest
}

// l0OutputLevel returns the level L0 compacts into: the base level, unless
// a level above it still holds data, which must stay below newer data.
func l0OutputLevel(v *version.Version, baseLevel int) int {
	for l := 1; l < baseLevel; l++ {
		if len(v.Levels[l]) > 0 {
			return l
		}
	}
	return baseLevel
}

package version

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// applyEdit applies e to v with the builder LogAndApply uses and returns the
// prepared result.
func applyEdit(v *Version, e *VersionEdit) (*Version, error) {
	b := newBuilder(v, invalidArgf)
	if err := b.apply(e); err != nil {
		return nil, err
	}
	nv, err := b.version()
	if err != nil {
		return nil, err
	}
	nv.PrepareForInstall()
	return nv, nil
}

func emptyVersion() *Version {
	v := &Version{}
	v.PrepareForInstall()
	return v
}

func optKey(c *ddCase, name string) []byte {
	s, ok := c.args[name]
	if !ok || s == "nil" {
		return nil
	}
	return []byte(s)
}

func TestVersionDataDriven(t *testing.T) {
	v := emptyVersion()
	runDataDriven(t, "testdata/version", func(t *testing.T, c *ddCase) string {
		switch c.cmd {
		case "reset":
			v = emptyVersion()
			return "ok"
		case "apply":
			e, err := parseEdit(v, c.input)
			if err != nil {
				t.Fatalf("%s: %v", c.pos, err)
			}
			nv, err := applyEdit(v, e)
			if err != nil {
				return "error: " + err.Error()
			}
			if err := nv.CheckOrdering(); err != nil {
				t.Fatalf("%s: builder produced a bad version: %v\n%s", c.pos, err, nv)
			}
			v = nv
			return v.String()
		case "overlaps":
			level, err := strconv.Atoi(c.args["level"])
			if err != nil {
				t.Fatalf("%s: %v", c.pos, err)
			}
			files := v.Overlaps(level, optKey(c, "start"), optKey(c, "end"))
			if len(files) == 0 {
				return "(none)"
			}
			var sb strings.Builder
			for _, f := range files {
				fmt.Fprintln(&sb, f)
			}
			return sb.String()
		case "find-file":
			level, err := strconv.Atoi(c.args["level"])
			if err != nil {
				t.Fatalf("%s: %v", c.pos, err)
			}
			key, err := parseKey(c.args["key"])
			if err != nil {
				t.Fatalf("%s: %v", c.pos, err)
			}
			i := v.FindFile(level, key)
			if i == len(v.Levels[level]) {
				return fmt.Sprintf("%d (past the end)", i)
			}
			return fmt.Sprintf("%d %s", i, v.Levels[level][i])
		case "locations":
			var sb strings.Builder
			for _, files := range v.Levels {
				for _, f := range files {
					loc, ok := v.FileLocation(f.FileNum)
					fmt.Fprintf(&sb, "%s: L%d pos %d (%t)\n", f.FileNum, loc.Level, loc.Position, ok)
				}
			}
			return sb.String()
		case "sizes":
			var sb strings.Builder
			for level := range NumLevels {
				if v.NumLevelFiles(level) > 0 {
					fmt.Fprintf(&sb, "L%d: %d files, %d bytes\n", level, v.NumLevelFiles(level), v.LevelSize(level))
				}
			}
			fmt.Fprintf(&sb, "total: %d files", v.NumFiles())
			return sb.String()
		}
		t.Fatalf("%s: unknown command %q", c.pos, c.cmd)
		return ""
	})
}

// randomFiles returns n non-overlapping files with user keys drawn from a
// keyspace of about span keys, numbered from *next. Some end in a range-delete
// sentinel.
func randomFiles(rng *rand.Rand, n int, next *base.FileNum, seq *base.SeqNum) []*FileMetadata {
	// Pick 2n distinct sorted keys; file i spans keys 2i..2i+1 (or a single
	// key, or ends at the next file's start with a sentinel).
	keys := make(map[string]bool)
	for len(keys) < 2*n {
		keys[fmt.Sprintf("k%06d", rng.IntN(100*n+10))] = true
	}
	sorted := slices.Sorted(func(yield func(string) bool) {
		for k := range keys {
			if !yield(k) {
				return
			}
		}
	})
	files := make([]*FileMetadata, n)
	for i := range files {
		lo, hi := sorted[2*i], sorted[2*i+1]
		s1, s2 := *seq+1, *seq+1+base.SeqNum(rng.IntN(5))
		*seq = s2
		m := &FileMetadata{
			FileNum:     *next,
			Size:        uint64(rng.IntN(1000) + 1),
			SmallestSeq: s1,
			LargestSeq:  s2,
			NumEntries:  uint64(rng.IntN(100)),
		}
		*next++
		m.Smallest = base.MakeInternalKey(nil, []byte(lo), s2, base.KindSet)
		switch rng.IntN(4) {
		case 0:
			// Exclusive end at the next file's first key.
			if i+1 < n {
				hi = sorted[2*i+2]
			}
			m.Largest = base.MakeRangeDeleteSentinel(nil, []byte(hi))
		case 1:
			m.Largest = base.MakeInternalKey(nil, []byte(lo), s1, base.KindSet)
		default:
			m.Largest = base.MakeInternalKey(nil, []byte(hi), s1, base.KindDelete)
		}
		files[i] = m
	}
	return files
}

// randomL0File returns a file with random bounds for L0 (which may overlap).
func randomL0File(rng *rand.Rand, next *base.FileNum, seq *base.SeqNum) *FileMetadata {
	a, b := rng.IntN(1000), rng.IntN(1000)
	if a > b {
		a, b = b, a
	}
	s1 := *seq + 1
	s2 := s1 + base.SeqNum(rng.IntN(3))
	*seq = s2
	m := &FileMetadata{FileNum: *next, Size: 10, SmallestSeq: s1, LargestSeq: s2}
	*next++
	m.Smallest = base.MakeInternalKey(nil, fmt.Appendf(nil, "k%06d", a), s2, base.KindSet)
	if a < b && rng.IntN(3) == 0 {
		m.Largest = base.MakeRangeDeleteSentinel(nil, fmt.Appendf(nil, "k%06d", b))
	} else {
		m.Largest = base.MakeInternalKey(nil, fmt.Appendf(nil, "k%06d", b), s1, base.KindSet)
	}
	return m
}

// randomVersion builds, through the builder, a version with random files in
// random levels.
func randomVersion(t testing.TB, rng *rand.Rand, maxPerLevel int, next *base.FileNum, seq *base.SeqNum) *Version {
	e := &VersionEdit{}
	for range rng.IntN(maxPerLevel + 1) {
		e.AddFile(0, randomL0File(rng, next, seq))
	}
	for level := 1; level < NumLevels; level++ {
		for _, f := range randomFiles(rng, rng.IntN(maxPerLevel+1), next, seq) {
			e.AddFile(level, f)
		}
	}
	v, err := applyEdit(emptyVersion(), e)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// randomEditFor returns an edit valid for v: some deletions, some moves of
// files from L(n) to an empty L(n+1) position, and some new L0 files.
func randomEditFor(rng *rand.Rand, v *Version, next *base.FileNum, seq *base.SeqNum) *VersionEdit {
	e := &VersionEdit{}
	for level, files := range v.Levels {
		for _, f := range files {
			if rng.IntN(8) == 0 {
				e.DeleteFile(level, f.FileNum)
			}
		}
	}
	for range rng.IntN(3) {
		e.AddFile(0, randomL0File(rng, next, seq))
	}
	// Move one file of the last non-empty level down into an empty L6
	// neighbourhood only if L6 is empty (keeps the edit valid cheaply).
	if len(v.Levels[NumLevels-1]) == 0 {
		for level := NumLevels - 2; level >= 1; level-- {
			if fs := v.Levels[level]; len(fs) > 0 {
				f := fs[rng.IntN(len(fs))]
				if _, del := e.DeletedFiles[DeletedFile{level, f.FileNum}]; !del {
					e.DeleteFile(level, f.FileNum)
					e.AddFile(NumLevels-1, f)
				}
				break
			}
		}
	}
	return e
}

// linearLocation is the dumb version of FileLocation.
func linearLocation(v *Version, n base.FileNum) (FileLocation, bool) {
	for level, files := range v.Levels {
		for pos, f := range files {
			if f.FileNum == n {
				return FileLocation{level, pos}, true
			}
		}
	}
	return FileLocation{}, false
}

// TestFileLocationHashMatchesScan checks the hash against a linear scan over
// random versions and chains of random edits, for present and absent files.
func TestFileLocationHashMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 50 {
		next, seq := base.FileNum(1), base.SeqNum(0)
		v := randomVersion(t, rng, 40, &next, &seq)
		for step := range 10 {
			for n := base.FileNum(0); n <= next; n++ {
				got, gotOK := v.FileLocation(n)
				want, wantOK := linearLocation(v, n)
				if got != want || gotOK != wantOK {
					t.Fatalf("iter %d step %d file %d: hash says %v,%t; scan says %v,%t", iter, step, n, got, gotOK, want, wantOK)
				}
				if gotOK && v.Levels[got.Level][got.Position].FileNum != n {
					t.Fatalf("file %d: location %v holds %s", n, got, v.Levels[got.Level][got.Position])
				}
			}
			if len(v.fileLocations) != v.NumFiles() {
				t.Fatalf("hash has %d entries, version %d files", len(v.fileLocations), v.NumFiles())
			}
			nv, err := applyEdit(v, randomEditFor(rng, v, &next, &seq))
			if err != nil {
				t.Fatalf("iter %d step %d: %v\n%s", iter, step, err, v)
			}
			v = nv
		}
	}
}

// TestBuilderMatchesModel checks the builder's merge against rebuilding each
// level from scratch: the same files, sorted, and a valid version.
func TestBuilderMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 200 {
		next, seq := base.FileNum(1), base.SeqNum(0)
		v := randomVersion(t, rng, 30, &next, &seq)
		e := randomEditFor(rng, v, &next, &seq)
		nv, err := applyEdit(v, e)
		if err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		if err := nv.CheckOrdering(); err != nil {
			t.Fatalf("iter %d: %v\n%s", iter, err, nv)
		}
		for level := range NumLevels {
			var want []*FileMetadata
			for _, f := range v.Levels[level] {
				if _, del := e.DeletedFiles[DeletedFile{level, f.FileNum}]; !del {
					want = append(want, f)
				}
			}
			for _, nf := range e.NewFiles {
				if nf.Level == level {
					want = append(want, nf.Meta)
				}
			}
			if level == 0 {
				slices.SortFunc(want, orderL0)
			} else {
				slices.SortFunc(want, orderByKey)
			}
			if !slices.Equal(want, nv.Levels[level]) {
				t.Fatalf("iter %d L%d: got %v want %v", iter, level, nv.Levels[level], want)
			}
		}
	}
}

// overlapsModel is the dumb version of Overlaps: filter every file, and for
// L0 widen the range to a fixpoint by brute force.
func overlapsModel(files []*FileMetadata, level int, start, end []byte) []*FileMetadata {
	in := make([]bool, len(files))
	endExclusive := false
	for {
		changed := false
		for i, f := range files {
			if in[i] || !f.overlaps(start, end, endExclusive) {
				continue
			}
			in[i] = true
			changed = true
			if level == 0 {
				s, e, ex := f.UserKeyBounds()
				if start != nil && bytes.Compare(s, start) < 0 {
					start = s
				}
				if end != nil && (bytes.Compare(e, end) > 0 || (bytes.Equal(e, end) && endExclusive && !ex)) {
					end, endExclusive = e, ex
				}
			}
		}
		if !changed || level != 0 {
			break
		}
	}
	var out []*FileMetadata
	for i, f := range files {
		if in[i] {
			out = append(out, f)
		}
	}
	return out
}

func TestOverlapsMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	key := func() []byte {
		switch rng.IntN(10) {
		case 0:
			return nil
		}
		return fmt.Appendf(nil, "k%06d", rng.IntN(3100))
	}
	for iter := range 300 {
		next, seq := base.FileNum(1), base.SeqNum(0)
		v := randomVersion(t, rng, 30, &next, &seq)
		for range 20 {
			start, end := key(), key()
			if start != nil && end != nil && bytes.Compare(start, end) > 0 {
				start, end = end, start
			}
			for level := range NumLevels {
				got := v.Overlaps(level, start, end)
				want := overlapsModel(v.Levels[level], level, start, end)
				if !slices.Equal(got, want) {
					t.Fatalf("iter %d: L%d overlaps [%s, %s]: got %v want %v\n%s", iter, level, start, end, got, want, v)
				}
			}
		}
	}
}

func TestFindFileMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		next, seq := base.FileNum(1), base.SeqNum(0)
		v := randomVersion(t, rng, 20, &next, &seq)
		for range 30 {
			ikey := base.MakeInternalKey(nil, fmt.Appendf(nil, "k%06d", rng.IntN(2100)), base.SeqNum(rng.IntN(int(seq)+2)), base.KindSet)
			for level := 1; level < NumLevels; level++ {
				files := v.Levels[level]
				want := len(files)
				for i, f := range files {
					if base.InternalCompare(f.Largest, ikey) >= 0 {
						want = i
						break
					}
				}
				if got := v.FindFile(level, ikey); got != want {
					t.Fatalf("L%d FindFile(%s) = %d, want %d", level, base.FormatInternalKey(ikey), got, want)
				}
			}
		}
	}
}

func TestCheckOrderingDetects(t *testing.T) {
	mk := func(n base.FileNum, lo, hi string, s1, s2 base.SeqNum) *FileMetadata {
		return &FileMetadata{
			FileNum: n, SmallestSeq: s1, LargestSeq: s2,
			Smallest: base.MakeInternalKey(nil, []byte(lo), s2, base.KindSet),
			Largest:  base.MakeInternalKey(nil, []byte(hi), s1, base.KindSet),
		}
	}
	cases := map[string][NumLevels][]*FileMetadata{
		"L1 overlap":      {1: {mk(1, "a", "c", 1, 1), mk(2, "c", "d", 2, 2)}},
		"L1 unsorted":     {1: {mk(1, "e", "f", 1, 1), mk(2, "a", "b", 2, 2)}},
		"L0 unsorted":     {0: {mk(1, "a", "b", 5, 6), mk(2, "a", "b", 1, 2)}},
		"duplicate":       {0: {mk(1, "a", "b", 5, 6)}, 2: {mk(1, "a", "b", 5, 6)}},
		"bad seqs":        {3: {mk(1, "a", "b", 6, 5)}},
		"smallest>larget": {3: {mk(1, "b", "a", 1, 1)}},
	}
	for name, levels := range cases {
		v := &Version{Levels: levels}
		if err := v.CheckOrdering(); !base.IsCorruption(err) {
			t.Errorf("%s: CheckOrdering = %v, want corruption", name, err)
		}
	}
	ok := &Version{Levels: [NumLevels][]*FileMetadata{
		0: {mk(5, "a", "z", 1, 2), mk(6, "a", "z", 3, 4)},
		1: {mk(1, "a", "c", 1, 1), mk(2, "d", "e", 2, 2)},
	}}
	// A sentinel end may touch the next file's start.
	ok.Levels[1][0].Largest = base.MakeRangeDeleteSentinel(nil, []byte("d"))
	if err := ok.CheckOrdering(); err != nil {
		t.Fatal(err)
	}
}

func TestFileOverlaps(t *testing.T) {
	f := &FileMetadata{
		FileNum:  1,
		Smallest: base.MakeInternalKey(nil, []byte("c"), 5, base.KindSet),
		Largest:  base.MakeRangeDeleteSentinel(nil, []byte("f")),
	}
	cases := []struct {
		start, end string
		want       bool
	}{
		{"a", "b", false}, {"a", "c", true}, {"d", "e", true}, {"e", "z", true},
		{"f", "z", false}, // f is excluded: the sentinel is exclusive
		{"g", "z", false}, {"", "c", true}, {"f", "", false}, {"", "", true},
	}
	b := func(s string) []byte {
		if s == "" {
			return nil
		}
		return []byte(s)
	}
	for _, c := range cases {
		if got := f.Overlaps(b(c.start), b(c.end)); got != c.want {
			t.Errorf("Overlaps(%q, %q) = %t, want %t", c.start, c.end, got, c.want)
		}
	}
	start, end, excl := f.UserKeyBounds()
	if string(start) != "c" || string(end) != "f" || !excl {
		t.Errorf("UserKeyBounds = %s %s %t", start, end, excl)
	}
	if f.ContainsUserKey([]byte("f")) || !f.ContainsUserKey([]byte("e")) {
		t.Error("ContainsUserKey wrong at the exclusive bound")
	}
}

// TestStandaloneVersionRefs: a version outside a set counts references and
// panics on misuse.
func TestStandaloneVersionRefs(t *testing.T) {
	v := NewVersion([NumLevels][]*FileMetadata{})
	v.Ref()
	v.Unref()
	v.Unref()
	if v.Refs() != 0 {
		t.Fatalf("refs = %d", v.Refs())
	}
	mustPanic(t, "double Unref", v.Unref)
	v2 := NewVersion([NumLevels][]*FileMetadata{})
	v2.Unref()
	mustPanic(t, "Ref after release", v2.Ref)
	mustPanic(t, "FileLocation unprepared", func() { (&Version{}).FileLocation(1) })
	mustPanic(t, "FindFile L0", func() { v.FindFile(0, nil) })
}

func mustPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: no panic", what)
		}
	}()
	fn()
}

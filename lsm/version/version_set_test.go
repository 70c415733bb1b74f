package version

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/cairnkv/cairn/lsm/vfs/errorfs"
)

const testDir = "db"

// setState is what a VersionSet must recover: its version and counters.
type setState struct {
	version   string
	logNumber base.FileNum
	lastSeq   base.SeqNum
	maxFile   base.FileNum // every file number at or below it is used
}

func (s setState) String() string {
	return fmt.Sprintf("log-num=%d last-seq=%d max-file=%d\n%s", s.logNumber, s.lastSeq, s.maxFile, s.version)
}

// stateOf captures vs's state. REQUIRES: no LogAndApply running.
func stateOf(vs *VersionSet) setState {
	return setState{
		version:   vs.Current().String() + metaSummary(vs.Current()) + walsSummary(vs.WALsSynced()),
		logNumber: vs.LogNumber(),
		lastSeq:   vs.LastSeq(),
		maxFile:   vs.NextFileNum() - 1,
	}
}

// metaSummary renders the metadata that Version.String leaves out.
func metaSummary(v *Version) string {
	var sb strings.Builder
	for _, files := range v.Levels {
		for _, f := range files {
			fmt.Fprintf(&sb, "%d:%d/%d/%d ", f.FileNum, f.Size, f.NumEntries, f.NumDeletions)
		}
	}
	return sb.String()
}

// walsSummary renders the WAL synced sizes a set records.
func walsSummary(wals map[base.FileNum]uint64) string {
	var sb strings.Builder
	for _, n := range slices.Sorted(maps.Keys(wals)) {
		fmt.Fprintf(&sb, " wal %s synced %d", n, wals[n])
	}
	return sb.String()
}

// checkRecovered verifies that the recovered set vs holds want, and that its
// file-number counter is past everything want used.
func checkRecovered(t *testing.T, what string, vs *VersionSet, want setState) {
	t.Helper()
	got := stateOf(vs)
	if got.version != want.version || got.logNumber != want.logNumber || got.lastSeq != want.lastSeq {
		t.Fatalf("%s: recovered\n%s\nwant\n%s", what, got, want)
	}
	if got.maxFile < want.maxFile {
		t.Fatalf("%s: next file number %d would reuse %d", what, vs.NextFileNum(), want.maxFile)
	}
	if err := vs.Current().CheckOrdering(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for _, files := range vs.Current().Levels {
		for _, f := range files {
			if f.Refs() != 1 {
				t.Fatalf("%s: file %s has %d refs, want 1", what, f.FileNum, f.Refs())
			}
		}
	}
}

// workload drives a VersionSet with random valid edits.
type workload struct {
	rng *rand.Rand
	vs  *VersionSet
	mu  *sync.Mutex
	seq base.SeqNum
	// wals is the model of the set's WAL synced sizes.
	wals map[base.FileNum]uint64
}

// step applies one random edit with LogAndApply.
func (w *workload) step() error {
	_, _, err := w.stepEdit()
	return err
}

// stepEdit applies one random edit — a flush (new L0 files and a new log
// number), a compaction (files replaced by a new one a level down, or a
// move), or bookkeeping only — after advancing the last sequence number. It
// returns the edit as LogAndApply completed it, and what the set's state
// would be after it.
func (w *workload) stepEdit() (*VersionEdit, setState, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.makeEditLocked()
	cur := w.vs.Current()
	err := w.vs.LogAndApply(w.mu, e)
	wals := maps.Clone(w.wals)
	if wals == nil {
		wals = make(map[base.FileNum]uint64)
	}
	for _, ws := range e.WALsSynced {
		wals[ws.Num] = ws.SyncedSize
	}
	maps.DeleteFunc(wals, func(n base.FileNum, _ uint64) bool { return n < e.LogNumber })
	var after setState
	if nv, aerr := applyEdit(cur, e); aerr == nil {
		after = setState{version: nv.String() + metaSummary(nv) + walsSummary(wals), logNumber: e.LogNumber, lastSeq: e.LastSeq, maxFile: e.NextFileNum - 1}
	}
	if err == nil {
		w.wals = wals
	}
	return e, after, err
}

// makeEditLocked returns a random edit valid for the current version.
// REQUIRES: w.mu held.
func (w *workload) makeEditLocked() *VersionEdit {
	v := w.vs.Current()
	next := w.vs.NextFileNum()
	e := &VersionEdit{}
	// The current WAL (numbered the log number, as in the DB) is synced
	// further now and then; a flush may record the final size of the WAL it
	// makes obsolete in the same edit.
	if log := w.vs.LogNumber(); log != 0 && w.rng.IntN(3) == 0 {
		e.WALsSynced = append(e.WALsSynced, WALSynced{Num: log, SyncedSize: w.wals[log] + w.rng.Uint64N(1<<20)})
	}
	switch w.rng.IntN(3) {
	case 0: // flush
		for range 1 + w.rng.IntN(2) {
			e.AddFile(0, randomL0File(w.rng, &next, &w.seq))
		}
		e.LogNumber = next
		next++
	case 1: // compact a level into the one below, or move
		level := w.rng.IntN(NumLevels - 1)
		if len(v.Levels[level]) == 0 {
			break
		}
		in := v.Levels[level][w.rng.IntN(len(v.Levels[level]))]
		start, end, _ := in.UserKeyBounds()
		inputs := v.Overlaps(level, start, end)
		lo, hi := start, end
		for _, f := range inputs {
			s, e, _ := f.UserKeyBounds()
			lo, hi = minBytes(lo, s), maxBytes(hi, e)
		}
		below := v.Overlaps(level+1, lo, hi)
		for _, f := range inputs {
			e.DeleteFile(level, f.FileNum)
		}
		if len(below) == 0 && len(inputs) == 1 && level > 0 {
			e.AddFile(level+1, inputs[0]) // trivial move
			break
		}
		for _, f := range below {
			e.DeleteFile(level+1, f.FileNum)
			lo, hi = minBytes(lo, base.UserKey(f.Smallest)), maxBytes(hi, base.UserKey(f.Largest))
		}
		out := &FileMetadata{
			FileNum:     next,
			Size:        uint64(w.rng.IntN(1 << 20)),
			Smallest:    base.MakeInternalKey(nil, lo, 1, base.KindSet),
			Largest:     base.MakeInternalKey(nil, hi, 0, base.KindSet),
			SmallestSeq: 0, LargestSeq: 1,
			NumEntries: uint64(w.rng.IntN(100)),
		}
		next++
		e.AddFile(level+1, out)
	case 2: // bookkeeping only
		if w.rng.IntN(2) == 0 {
			e.CompactPointers = append(e.CompactPointers, CompactPointer{
				Level: w.rng.IntN(NumLevels),
				Key:   base.MakeInternalKey(nil, fmt.Appendf(nil, "k%06d", w.rng.IntN(1000)), 3, base.KindSet),
			})
		}
	}
	w.vs.MarkFileNumUsed(next - 1)
	w.seq += base.SeqNum(w.rng.IntN(100))
	w.vs.SetLastSeq(w.seq)
	return e
}

func minBytes(a, b []byte) []byte {
	if string(a) < string(b) {
		return a
	}
	return b
}

func maxBytes(a, b []byte) []byte {
	if string(a) > string(b) {
		return a
	}
	return b
}

func mustCreate(t *testing.T, fs vfs.FS, opts Options) *VersionSet {
	t.Helper()
	vs, err := Create(fs, testDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func mustLoad(t *testing.T, fs vfs.FS, opts Options) *VersionSet {
	t.Helper()
	vs, err := Load(fs, testDir, opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return vs
}

func TestCreateLoadReproduces(t *testing.T) {
	for _, opts := range []Options{{}, {MaxManifestFileSize: 1 << 10}, {BuildHashUnderLock: true}} {
		t.Run(fmt.Sprintf("%+v", opts), func(t *testing.T) {
			fs := vfs.NewMem()
			var mu sync.Mutex
			vs := mustCreate(t, fs, opts)
			w := &workload{rng: rand.New(rand.NewPCG(21, 22)), vs: vs, mu: &mu}
			for i := range 200 {
				if err := w.step(); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			}
			mu.Lock()
			want := stateOf(vs)
			cps := vs.compactPointers
			mu.Unlock()
			if err := vs.Close(); err != nil {
				t.Fatal(err)
			}
			for reopen := range 3 {
				vs = mustLoad(t, fs, opts)
				checkRecovered(t, fmt.Sprintf("reopen %d", reopen), vs, want)
				if !slices.EqualFunc(vs.compactPointers[:], cps[:], func(a, b []byte) bool { return string(a) == string(b) }) {
					t.Fatalf("compact pointers: got %q want %q", vs.compactPointers, cps)
				}
				if err := vs.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestCrashAtEveryOperation takes a crash image of the FS before every file
// system operation of Create and a series of LogAndApply calls. Each image
// must load, and hold exactly the state of the last LogAndApply that had
// returned nil when it was taken, or of the one in flight: a LogAndApply that
// returned nil is never lost.
func TestCrashAtEveryOperation(t *testing.T) {
	for _, maxSize := range []int64{0, 600} {
		t.Run(fmt.Sprintf("max-manifest=%d", maxSize), func(t *testing.T) {
			mem := vfs.NewMem()
			type image struct {
				acked int // LogAndApply calls returned nil before the image
				fs    *vfs.MemFS
				torn  bool
			}
			var (
				images []image
				acked  = -1 // Create not returned yet
				rng    = rand.New(rand.NewPCG(31, 32))
			)
			inj := errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
				images = append(images, image{acked: acked, fs: mem.CrashClone()})
				images = append(images, image{acked: acked, fs: mem.CrashCloneTorn(rng), torn: true})
				return nil
			})
			fs := errorfs.Wrap(mem, inj)
			opts := Options{MaxManifestFileSize: maxSize}
			var mu sync.Mutex
			vs := mustCreate(t, fs, opts)
			states := []setState{stateOf(vs)}
			acked = 0
			w := &workload{rng: rand.New(rand.NewPCG(33, 34)), vs: vs, mu: &mu}
			for i := range 40 {
				if err := w.step(); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				mu.Lock()
				states = append(states, stateOf(vs))
				mu.Unlock()
				acked++
			}
			images = append(images, image{acked: acked, fs: mem.CrashClone()})
			if len(images) < 150 {
				t.Fatalf("only %d images", len(images))
			}
			for i, img := range images {
				what := fmt.Sprintf("image %d (acked %d, torn %t)", i, img.acked, img.torn)
				vs, err := Load(img.fs, testDir, opts)
				if img.acked < 0 {
					// Create had not returned: no DB, or an empty one.
					if err != nil {
						if !errors.Is(err, os.ErrNotExist) {
							t.Fatalf("%s: %v", what, err)
						}
						continue
					}
					checkRecovered(t, what, vs, states[0])
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				got := stateOf(vs)
				matched := false
				for _, k := range []int{img.acked, img.acked + 1} {
					if k < len(states) && got.version == states[k].version &&
						got.logNumber == states[k].logNumber && got.lastSeq == states[k].lastSeq {
						checkRecovered(t, what, vs, states[k])
						matched = true
						break
					}
				}
				if !matched {
					t.Fatalf("%s: recovered\n%s\nwant\n%s", what, got, states[img.acked])
				}
				vs.Close()
			}
		})
	}
}

// TestFaultSweep fails each write operation of a run in turn. A failure
// surfaces from Create, LogAndApply or Close (or is absorbed by a best-effort
// step); after a LogAndApply failure the set refuses further edits; and the
// files, crashed or not, reload to the last acknowledged state or to the
// failed edit's.
func TestFaultSweep(t *testing.T) {
	// run returns the states the files may hold: acknowledged ones, then
	// possibly the state of a failed edit. acked is the index of the last
	// acknowledged state (-1 if Create failed).
	run := func(fs vfs.FS) (states []setState, acked int, err error) {
		var mu sync.Mutex
		vs, err := Create(fs, testDir, Options{MaxManifestFileSize: 400})
		if err != nil {
			return nil, -1, err
		}
		states = append(states, stateOf(vs))
		w := &workload{rng: rand.New(rand.NewPCG(41, 42)), vs: vs, mu: &mu}
		for range 25 {
			e, after, err := w.stepEdit()
			if err != nil {
				// The failed edit's files may be in the manifest: they
				// must not be reported obsolete.
				obsolete := vs.ObsoleteFiles()
				for _, nf := range e.NewFiles {
					if slices.Contains(obsolete, nf.Meta.FileNum) {
						t.Fatalf("file %s of a failed edit reported obsolete", nf.Meta.FileNum)
					}
				}
				mu.Lock()
				err2 := vs.LogAndApply(&mu, &VersionEdit{})
				mu.Unlock()
				if !errors.Is(err, ErrManifestFailed) || !errors.Is(err2, ErrManifestFailed) {
					t.Fatalf("LogAndApply failed with %v, then %v: want the set poisoned", err, err2)
				}
				vs.Close()
				return append(states, after), len(states) - 1, err
			}
			states = append(states, after)
		}
		return states, len(states) - 1, vs.Close()
	}
	counter := errorfs.OnIndex(-1).WithOps(errorfs.WriteOps()...)
	if _, _, err := run(errorfs.Wrap(vfs.NewMem(), counter)); err != nil {
		t.Fatal(err)
	}
	n := counter.Count()
	if n < 50 {
		t.Fatalf("only %d write operations", n)
	}
	surfaced := 0
	for i := range n {
		mem := vfs.NewMem()
		states, acked, err := run(errorfs.Wrap(mem, errorfs.OnIndex(i).WithOps(errorfs.WriteOps()...)))
		if err != nil {
			if !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("op %d: %v", i, err)
			}
			surfaced++
		}
		for _, crash := range []bool{false, true} {
			fs := mem
			if crash {
				fs = mem.CrashClone()
			}
			what := fmt.Sprintf("op %d crash=%t", i, crash)
			vs, lerr := Load(fs, testDir, Options{})
			if acked < 0 {
				if lerr != nil && !errors.Is(lerr, os.ErrNotExist) {
					t.Fatalf("%s: %v", what, lerr)
				}
				if lerr == nil {
					checkRecovered(t, what, vs, setState{version: (&Version{}).String()})
					vs.Close()
				}
				continue
			}
			if lerr != nil {
				t.Fatalf("%s: %v", what, lerr)
			}
			got := stateOf(vs)
			ok := false
			for k := acked; k < len(states) && k <= acked+1; k++ {
				if got.version == states[k].version && got.lastSeq == states[k].lastSeq && got.logNumber == states[k].logNumber {
					checkRecovered(t, what, vs, states[k])
					ok = true
					break
				}
			}
			if !ok {
				t.Fatalf("%s: recovered\n%s\nwant\n%s", what, got, states[acked])
			}
			vs.Close()
		}
	}
	if surfaced < int(n)/2 {
		t.Fatalf("only %d of %d injected errors surfaced", surfaced, n)
	}
}

// TestWALsSynced: synced sizes survive reloads and manifest rolls, never
// decrease, and are forgotten once the log number passes their WAL.
func TestWALsSynced(t *testing.T) {
	fs := vfs.NewMem()
	var mu sync.Mutex
	vs := mustCreate(t, fs, Options{MaxManifestFileSize: 1})
	apply := func(e *VersionEdit) error {
		mu.Lock()
		defer mu.Unlock()
		return vs.LogAndApply(&mu, e)
	}
	for range 10 {
		vs.NewFileNum()
	}
	if err := apply(&VersionEdit{LogNumber: 4, WALsSynced: []WALSynced{{Num: 4, SyncedSize: 100}, {Num: 6, SyncedSize: 7}}}); err != nil {
		t.Fatal(err)
	}
	if err := apply(&VersionEdit{WALsSynced: []WALSynced{{Num: 4, SyncedSize: 250}, {Num: 3, SyncedSize: 9}}}); err != nil {
		t.Fatal(err)
	}
	check := func(what, want string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if got := walsSummary(vs.WALsSynced()); got != want {
			t.Fatalf("%s: WALs synced%s, want%s", what, got, want)
		}
	}
	check("after two edits", " wal 000004 synced 250 wal 000006 synced 7")
	for _, bad := range []*VersionEdit{
		{WALsSynced: []WALSynced{{Num: 4, SyncedSize: 249}}},
		{WALsSynced: []WALSynced{{Num: 99, SyncedSize: 1}}},
		{WALsSynced: []WALSynced{{Num: 6, SyncedSize: 8}, {Num: 6, SyncedSize: 9}}},
	} {
		if err := apply(bad); !errors.Is(err, base.ErrInvalidArgument) {
			t.Fatalf("LogAndApply(%s) = %v, want invalid argument", bad, err)
		}
	}
	check("after refused edits", " wal 000004 synced 250 wal 000006 synced 7")
	vs.Close()
	vs = mustLoad(t, fs, Options{})
	check("reloaded", " wal 000004 synced 250 wal 000006 synced 7")
	if err := apply(&VersionEdit{LogNumber: 5}); err != nil {
		t.Fatal(err)
	}
	check("log number 5", " wal 000006 synced 7")
	vs.Close()
	vs = mustLoad(t, fs, Options{})
	check("reloaded after log number 5", " wal 000006 synced 7")
	vs.Close()
}

package version

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
)

func formatNums(nums []base.FileNum) string {
	if len(nums) == 0 {
		return "(none)"
	}
	slices.Sort(nums)
	s := make([]string, len(nums))
	for i, n := range nums {
		s[i] = n.String()
	}
	return strings.Join(s, " ")
}

// TestVersionSetDataDriven drives a VersionSet on a MemFS: LogAndApply,
// pinning versions, obsolete and live files, reopening and crashing.
func TestVersionSetDataDriven(t *testing.T) {
	var (
		mu     sync.Mutex
		fs     *vfs.MemFS
		vs     *VersionSet
		pinned map[string]*Version
		opts   Options
	)
	header := func() string {
		return fmt.Sprintf("manifest=%s next-file=%d log-num=%d last-seq=%d\n%s",
			vs.ManifestFileNum(), vs.NextFileNum(), vs.LogNumber(), vs.LastSeq(), vs.Current())
	}
	runDataDriven(t, "testdata/version_set", func(t *testing.T, c *ddCase) string {
		mu.Lock()
		defer mu.Unlock()
		switch c.cmd {
		case "create":
			fs, pinned, opts = vfs.NewMem(), map[string]*Version{}, Options{}
			if s, ok := c.args["max-manifest"]; ok {
				n, _ := strconv.Atoi(s)
				opts.MaxManifestFileSize = int64(n)
			}
			vs = mustCreate(t, fs, opts)
			return header()
		case "apply":
			e, err := parseEdit(vs.Current(), c.input)
			if err != nil {
				t.Fatalf("%s: %v", c.pos, err)
			}
			for _, nf := range e.NewFiles {
				vs.MarkFileNumUsed(nf.Meta.FileNum)
			}
			if err := vs.LogAndApply(&mu, e); err != nil {
				return "error: " + err.Error()
			}
			return header()
		case "set-last-seq":
			n, _ := strconv.ParseUint(c.args["seq"], 10, 64)
			vs.SetLastSeq(base.SeqNum(n))
			return "ok"
		case "ref":
			v := vs.Current()
			v.Ref()
			pinned[c.args["name"]] = v
			return "ok"
		case "unref":
			pinned[c.args["name"]].Unref()
			delete(pinned, c.args["name"])
			return "ok"
		case "obsolete":
			return "tables: " + formatNums(vs.ObsoleteFiles()) + "\nmanifests: " + formatNums(vs.ObsoleteManifests())
		case "live":
			var nums []base.FileNum
			for n := range vs.LiveFiles() {
				nums = append(nums, n)
			}
			return formatNums(nums)
		case "refs":
			var sb strings.Builder
			for _, files := range vs.Current().Levels {
				for _, f := range files {
					fmt.Fprintf(&sb, "%s: %d\n", f.FileNum, f.Refs())
				}
			}
			return sb.String()
		case "reopen", "crash":
			if len(pinned) != 0 {
				t.Fatalf("%s: versions still pinned", c.pos)
			}
			if err := vs.Close(); err != nil {
				t.Fatal(err)
			}
			if c.cmd == "crash" {
				fs = fs.CrashClone()
			}
			vs = mustLoad(t, fs, opts)
			return header()
		case "files":
			names, err := fs.List(testDir)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(names)
			return strings.Join(names, "\n")
		}
		t.Fatalf("%s: unknown command %q", c.pos, c.cmd)
		return ""
	})
}

// TestObsoleteOnlyAfterLastUnref runs LogAndApply in a loop while readers pin
// and release versions from other goroutines (Unref without the DB mutex)
// and a collector drains ObsoleteFiles. A file must never be reported
// obsolete while a pinned version contains it, must be reported exactly
// once, and at the end every file ever added is either live or reported.
func TestObsoleteOnlyAfterLastUnref(t *testing.T) {
	fs := vfs.NewMem()
	var mu sync.Mutex
	vs := mustCreate(t, fs, Options{})

	var (
		repMu    sync.Mutex
		reported = map[base.FileNum]int{}
	)
	collect := func() {
		obs := vs.ObsoleteFiles()
		repMu.Lock()
		defer repMu.Unlock()
		for _, n := range obs {
			reported[n]++
		}
	}
	isReported := func(n base.FileNum) bool {
		repMu.Lock()
		defer repMu.Unlock()
		return reported[n] > 0
	}

	const steps = 300
	done := make(chan struct{})
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 99))
			var held []*Version
			for {
				select {
				case <-done:
					for _, v := range held {
						v.Unref()
					}
					return
				default:
				}
				if len(held) < 3 && rng.IntN(2) == 0 {
					mu.Lock()
					v := vs.Current()
					v.Ref()
					mu.Unlock()
					held = append(held, v)
				}
				// Every file of every pinned version is still unreported.
				for _, v := range held {
					for _, files := range v.Levels {
						for _, f := range files {
							if isReported(f.FileNum) {
								t.Errorf("file %s reported obsolete while pinned", f.FileNum)
								return
							}
						}
					}
				}
				if len(held) > 0 && rng.IntN(2) == 0 {
					i := rng.IntN(len(held))
					held[i].Unref() // without the DB mutex
					held = slices.Delete(held, i, i+1)
				}
				collect()
			}
		}()
	}

	added := map[base.FileNum]bool{}
	w := &workload{rng: rand.New(rand.NewPCG(51, 52)), vs: vs, mu: &mu}
	for i := range steps {
		e, _, err := w.stepEdit()
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		for _, nf := range e.NewFiles {
			added[nf.Meta.FileNum] = true
		}
	}
	close(done)
	wg.Wait()
	collect()

	live := vs.LiveFiles()
	mu.Lock()
	cur := vs.Current()
	mu.Unlock()
	if len(live) != cur.NumFiles() {
		t.Fatalf("%d live files, current version has %d", len(live), cur.NumFiles())
	}
	for n := range added {
		_, isLive := live[n]
		switch {
		case isLive && reported[n] > 0:
			t.Errorf("file %s live and reported obsolete", n)
		case !isLive && reported[n] != 1:
			t.Errorf("file %s reported obsolete %d times", n, reported[n])
		}
	}
	for n := range reported {
		if !added[n] {
			t.Errorf("file %s reported but never added", n)
		}
	}
	for _, files := range cur.Levels {
		for _, f := range files {
			if f.Refs() != 1 {
				t.Errorf("file %s has %d refs with only the current version live", f.FileNum, f.Refs())
			}
		}
	}
	if cur.Refs() != 1 {
		t.Errorf("current version has %d refs", cur.Refs())
	}
}

// TestConcurrentLogAndApply: LogAndApply calls from many goroutines are
// serialized; each edit lands once, and the manifest replays to the same
// version.
func TestConcurrentLogAndApply(t *testing.T) {
	fs := vfs.NewMem()
	var mu sync.Mutex
	vs := mustCreate(t, fs, Options{MaxManifestFileSize: 2 << 10})
	const writers, perWriter = 4, 30
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				n := vs.NewFileNum()
				seq := base.SeqNum(w*perWriter + i + 1)
				key := fmt.Appendf(nil, "w%d-%03d", w, i)
				e := &VersionEdit{}
				e.AddFile(0, &FileMetadata{
					FileNum: n, Size: 1, SmallestSeq: seq, LargestSeq: seq,
					Smallest: base.MakeInternalKey(nil, key, seq, base.KindSet),
					Largest:  base.MakeInternalKey(nil, key, seq, base.KindSet),
				})
				mu.Lock()
				err := vs.LogAndApply(&mu, e)
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	want := stateOf(vs)
	if n := vs.Current().NumFiles(); n != writers*perWriter {
		t.Fatalf("%d files, want %d", n, writers*perWriter)
	}
	if vs.LastInstallMutexHold() <= 0 {
		t.Fatal("no mutex hold time recorded")
	}
	mu.Unlock()
	vs.Close()
	checkRecovered(t, "reopen", mustLoad(t, fs, Options{}), want)
}

// TestLogAndApplyInvalidEdit: an edit that does not apply fails without
// poisoning the set or changing the version.
func TestLogAndApplyInvalidEdit(t *testing.T) {
	fs := vfs.NewMem()
	var mu sync.Mutex
	vs := mustCreate(t, fs, Options{})
	mu.Lock()
	defer mu.Unlock()
	apply := func(lines ...string) error {
		e, err := parseEdit(vs.Current(), lines)
		if err != nil {
			t.Fatal(err)
		}
		for _, nf := range e.NewFiles {
			vs.MarkFileNumUsed(nf.Meta.FileNum)
		}
		return vs.LogAndApply(&mu, e)
	}
	if err := apply("add L1 5: a#1,SET-c#1,SET", "log-num 3"); err != nil {
		t.Fatal(err)
	}
	before := vs.Current()
	for _, bad := range [][]string{
		{"del L1 9"},
		{"add L1 6: b#1,SET-d#1,SET"},
		{"add L2 5: a#1,SET-c#1,SET"},
		{"log-num 2"},  // log number going back
		{"log-num 99"}, // log number not allocated
	} {
		err := apply(bad...)
		if err == nil || !strings.Contains(err.Error(), "invalid argument") || base.IsCorruption(err) {
			t.Errorf("%v: LogAndApply = %v, want invalid argument", bad, err)
		}
		if vs.Current() != before {
			t.Errorf("%v: version changed", bad)
		}
	}
	// A move must keep the *FileMetadata.
	e := &VersionEdit{}
	e.DeleteFile(1, 5)
	e.AddFile(2, &FileMetadata{
		FileNum: 5, Smallest: before.Levels[1][0].Smallest, Largest: before.Levels[1][0].Largest,
	})
	if err := vs.LogAndApply(&mu, e); err == nil {
		t.Error("move with a new *FileMetadata accepted")
	}
	if err := apply("move L1 L2 5"); err != nil {
		t.Fatal(err)
	}
	if err := vs.Close(); err != nil {
		t.Fatal(err)
	}
	if err := apply("add L3 7: a#1,SET-c#1,SET"); err == nil {
		t.Error("LogAndApply after Close succeeded")
	}
}

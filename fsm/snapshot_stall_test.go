package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/cairnkv/cairn/lsm/vfs/errorfs"
	"github.com/hashicorp/raft"
)

// slowCheckpointFS wraps mem so that, while slow is set, every hard link
// and every creation of a directory or file under a checkpoints directory
// takes delay: a checkpoint made slow, as one of a large engine is.
func slowCheckpointFS(mem *vfs.MemFS, slow *atomic.Bool, delay time.Duration) vfs.FS {
	return errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if slow.Load() && (op == errorfs.OpLink ||
			(op == errorfs.OpCreate || op == errorfs.OpMkdirAll) && strings.Contains(path, "/"+checkpointsDirName)) {
			time.Sleep(delay)
		}
		return nil
	}))
}

// bgApplier applies batches of new Puts to f until stopped, timing each
// ApplyBatch.
type bgApplier struct {
	f       *FSM
	g       *logGen
	stop    atomic.Bool
	done    chan struct{}
	batches atomic.Int64
	mu      sync.Mutex
	spans   []span // guarded by mu
}

type span struct{ start, end time.Time }

func startApplier(t *testing.T, f *FSM, g *logGen) *bgApplier {
	a := &bgApplier{f: f, g: g, done: make(chan struct{})}
	value := strings.Repeat("v", 256)
	go func() {
		defer close(a.done)
		for i := 0; !a.stop.Load(); i++ {
			batch := make([]*raft.Log, 16)
			for j := range batch {
				batch[j] = g.cmd(t, put(fmt.Sprintf("key-%08d", i*16+j), value))
			}
			start := time.Now()
			for _, r := range f.ApplyBatch(batch) {
				if err, ok := r.(error); ok {
					t.Error(err)
					return
				}
			}
			a.mu.Lock()
			a.spans = append(a.spans, span{start, time.Now()})
			a.mu.Unlock()
			a.batches.Add(1)
		}
	}()
	return a
}

func (a *bgApplier) halt() {
	a.stop.Store(true)
	<-a.done
}

// during returns how many applies completed within [from, to] and the
// longest of those that overlapped it.
func (a *bgApplier) during(from, to time.Time) (completed int, longest time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.spans {
		if s.end.After(from) && s.end.Before(to) {
			completed++
		}
		if s.end.After(from) && s.start.Before(to) {
			longest = max(longest, s.end.Sub(s.start))
		}
	}
	return completed, longest
}

// TestCheckpointDoesNotStallApplies: while a checkpoint or a raft snapshot
// is made (slowed down to a few hundred milliseconds, as one of a large
// engine is), entries go on being applied, none waits for it, and raft's
// Snapshot call, made on the apply goroutine, returns at once.
func TestCheckpointDoesNotStallApplies(t *testing.T) {
	for _, path := range []string{"Checkpoint", "Snapshot+Persist"} {
		t.Run(path, func(t *testing.T) {
			mem := vfs.NewMem()
			var slow atomic.Bool
			fs := slowCheckpointFS(mem, &slow, 40*time.Millisecond)
			f := openTest(t, fs, "/fsm", nil)
			g := newLogGen()
			// An engine of several tables, with recent writes in its
			// memtables.
			for i := range 8 {
				for j := range 50 {
					applyOne(t, f, g.cmd(t, put(fmt.Sprintf("old-%d-%d", i, j), strings.Repeat("o", 200))))
				}
				if i < 7 {
					f.mu.RLock()
					err := f.mu.db.Flush()
					f.mu.RUnlock()
					if err != nil {
						t.Fatal(err)
					}
				}
			}
			a := startApplier(t, f, g)
			for a.batches.Load() < 20 {
				time.Sleep(time.Millisecond)
			}
			slow.Store(true)
			start := time.Now()
			var index uint64
			var snapshotCall time.Duration
			switch path {
			case "Checkpoint":
				c, err := f.Checkpoint()
				if err != nil {
					t.Fatal(err)
				}
				index = c.AppliedIndex
				defer c.Release()
			default:
				snap, err := f.Snapshot()
				snapshotCall = time.Since(start)
				if err != nil {
					t.Fatal(err)
				}
				var sink memSink
				if err := snap.Persist(&sink); err != nil {
					t.Fatal(err)
				}
				snap.Release()
				m, err := ReadSnapshotManifest(bytes.NewReader(sink.Bytes()))
				if err != nil {
					t.Fatal(err)
				}
				index = m.AppliedIndex
			}
			end := time.Now()
			slow.Store(false)
			a.halt()
			took := end.Sub(start)
			completed, longest := a.during(start, end)
			t.Logf("%s took %v (Snapshot call %v); %d batches applied meanwhile, the longest %v; checkpoint at %d, applied %d",
				path, took, snapshotCall, completed, longest, index, f.AppliedIndex())
			if took < 200*time.Millisecond {
				t.Fatalf("the checkpoint took %v: not slowed down, the test proves nothing", took)
			}
			if completed < 5 || longest > took/3 {
				t.Errorf("applies stalled by the checkpoint: %d batches applied in %v, the longest took %v", completed, took, longest)
			}
			if snapshotCall > took/3 {
				t.Errorf("Snapshot (on raft's apply goroutine) took %v of the %v", snapshotCall, took)
			}
			if index >= f.AppliedIndex() {
				t.Errorf("checkpoint at %d, applied %d: nothing applied after the capture", index, f.AppliedIndex())
			}
		})
	}
}

// TestCheckpointIsTheStateAtItsIndex takes checkpoints and raft snapshots
// while a random log is applied, and checks each against a reference FSM
// that applied the log up to the checkpoint's AppliedIndex: no entry
// applied after the capture leaks into it, none before is missing.
func TestCheckpointIsTheStateAtItsIndex(t *testing.T) {
	seeds := 3
	if testing.Short() {
		seeds = 1
	}
	variants := []struct {
		name string
		opts func(fs vfs.FS) *Options
	}{
		{"default", func(fs vfs.FS) *Options {
			o := testOptions(fs)
			o.Engine.MemTableSizeBytes = 64 << 10
			return o
		}},
		{"engine WAL, blobs", func(fs vfs.FS) *Options {
			o := testOptions(fs)
			o.Engine.MemTableSizeBytes = 64 << 10
			o.Engine.MinBlobSize = 8
			o.EngineWAL = true
			return o
		}},
	}
	for _, v := range variants {
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprintf("%s/seed=%d", v.name, seed), func(t *testing.T) {
				testCheckpointAtIndex(t, seed, v.opts)
			})
		}
	}
}

func testCheckpointAtIndex(t *testing.T, seed uint64, opts func(vfs.FS) *Options) {
	rng := newRand(seed)
	n := 2000
	logs, _ := genLog(t, rng, n)
	mem := vfs.NewMem()
	slow := &atomic.Bool{}
	slow.Store(true)
	fs := slowCheckpointFS(mem, slow, 200*time.Microsecond)
	f := openTest(t, fs, "/fsm", opts(fs))

	done := make(chan struct{})
	go func() {
		defer close(done)
		arng := newRand(seed + 1000)
		for i := 0; i < len(logs); {
			j := min(len(logs), i+1+arng.IntN(40))
			f.ApplyBatch(logs[i:j])
			i = j
			if arng.IntN(2) == 0 {
				time.Sleep(time.Duration(arng.IntN(500)) * time.Microsecond)
			}
		}
	}()
	type taken struct {
		index  uint64
		stream []byte
	}
	var snaps []taken
	var ownTable int
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		if len(snaps)%2 == 0 {
			c, err := f.Checkpoint()
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if _, err := c.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			for _, fi := range c.FileSizes() {
				if _, err := mem.Stat(filepath.Join("/fsm", engineDirName, fi.Name)); strings.HasSuffix(fi.Name, ".sst") && err != nil {
					ownTable++ // a table of the checkpoint's own
					break
				}
			}
			c.Release()
			snaps = append(snaps, taken{c.AppliedIndex, buf.Bytes()})
		} else {
			b := snapshotBytes(t, f)
			m, err := ReadSnapshotManifest(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			snaps = append(snaps, taken{m.AppliedIndex, b})
		}
		time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
	}
	assertNoLeftovers(t, mem, "/fsm")

	// The reference: the log applied up to each checkpoint's index.
	sort.SliceStable(snaps, func(i, j int) bool { return snaps[i].index < snaps[j].index })
	ref := openTest(t, vfs.NewMem(), "/ref", nil)
	var distinct, between int
	for i, s := range snaps {
		if s.index > ref.AppliedIndex() {
			ref.ApplyBatch(logs[ref.AppliedIndex():s.index])
		}
		if ref.AppliedIndex() != s.index {
			t.Fatalf("reference at %d, want %d", ref.AppliedIndex(), s.index)
		}
		if i == 0 || s.index != snaps[i-1].index {
			distinct++
		}
		if s.index > 0 && s.index < logs[len(logs)-1].Index {
			between++
		}
		want := mustSum(t, ref)
		g := openTest(t, vfs.NewMem(), fmt.Sprintf("/restored-%d", i), nil)
		if err := restoreBytes(g, s.stream); err != nil {
			t.Fatalf("checkpoint at %d: %v", s.index, err)
		}
		if sum, applied := checksum(t, g); applied != s.index || sum != want {
			t.Fatalf("checkpoint at %d: restored at %d, same state as the log applied up to it: %v", s.index, applied, sum == want)
		}
		g.Close()
	}
	t.Logf("%d checkpoints at %d distinct indexes, %d taken while the log was being applied; %d of the %d by Checkpoint had a table of their own",
		len(snaps), distinct, between, ownTable, (len(snaps)+1)/2)
	if between < 3 {
		t.Errorf("only %d checkpoints taken while applying", between)
	}
}

// TestCheckpointCrash crashes the machine at every file operation while a
// checkpoint is made with entries being applied: the FSM reopens (its
// engine at an index at least the one durable before the checkpoint), with
// no checkpoint left behind; once Checkpoint has returned, the engine is
// durable up to the checkpoint's index (raft relies on it: see doc.go,
// "Restart"). A checkpoint directory that a crash left opens, if at all,
// at exactly its index. (Checkpoints are not meant to survive a crash: New
// removes them, and fsm/snapstore links their files into its own
// directory.)
func TestCheckpointCrash(t *testing.T) {
	mem := vfs.NewMem()
	var recording atomic.Bool
	var mu sync.Mutex
	var clones []*vfs.MemFS
	var ops []string
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if recording.Load() {
			mu.Lock()
			clones = append(clones, mem.CrashClone())
			ops = append(ops, fmt.Sprintf("%v %s", op, path))
			mu.Unlock()
		}
		return nil
	}))
	f := openTest(t, fs, "/fsm", nil)
	g := newLogGen()
	for i := range 400 {
		applyOne(t, f, g.cmd(t, put(fmt.Sprintf("k%d", i%97), strings.Repeat("x", i%300))))
		if i%100 == 99 {
			f.mu.RLock()
			err := f.mu.db.Flush()
			f.mu.RUnlock()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	durable := f.AppliedIndex() - 1 // the last Flush was before the last put
	a := startApplier(t, f, g)
	for a.batches.Load() < 5 {
		time.Sleep(time.Millisecond)
	}
	recording.Store(true)
	c, err := f.Checkpoint()
	recording.Store(false)
	mu.Lock()
	final := mem.CrashClone()
	mu.Unlock()
	a.halt()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	clones = append(clones, final)
	ops = append(ops, "after Checkpoint returned")
	for i, cl := range clones {
		last := i == len(clones)-1
		// The checkpoint directory: not trusted unless complete.
		if db, err := lsm.Open(c.Dir(), &lsm.Options{FS: cl, ErrorIfNotExists: true}); err == nil {
			st, _, err := loadState(db, false)
			db.Close()
			if err != nil || st.index != c.AppliedIndex {
				t.Fatalf("crash before %s: the checkpoint opens at %d (%v), want %d", ops[i], st.index, err, c.AppliedIndex)
			}
		}
		r, err := New("/fsm", testOptions(cl))
		if err != nil {
			t.Fatalf("crash before %s: New: %v", ops[i], err)
		}
		applied := r.AppliedIndex()
		r.Close()
		if applied < durable || last && applied < c.AppliedIndex {
			t.Fatalf("crash before %s: engine at %d; durable before: %d, checkpoint at %d", ops[i], applied, durable, c.AppliedIndex)
		}
		if names, _ := cl.List(filepath.Join("/fsm", checkpointsDirName)); len(names) > 0 {
			t.Fatalf("crash before %s: New left checkpoints %v", ops[i], names)
		}
	}
	t.Logf("%d crash points", len(clones))
}

// TestSnapshotEngineReplacedBeforePersist: raft may restore (or the node
// close) between Snapshot and Persist. Persist then fails without touching
// the new engine, and Release cleans up.
func TestSnapshotEngineReplacedBeforePersist(t *testing.T) {
	fs := vfs.NewMem()
	other, _ := filledFSM(t, fs, "/other", 100)
	otherSnap := snapshotBytes(t, other)
	f, _ := filledFSM(t, fs, "/fsm", 200)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := restoreBytes(f, otherSnap); err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); !errors.Is(err, ErrClosed) || !sink.cancelled {
		t.Fatalf("Persist after a Restore: %v, cancelled %v", err, sink.cancelled)
	}
	snap.Release()
	if mustSum(t, f) != mustSum(t, other) {
		t.Fatal("state after the restore changed")
	}
	assertNoLeftovers(t, fs, "/fsm")

	// Close between Snapshot and Persist.
	snap, err = f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := snap.Persist(&memSink{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Persist after Close: %v", err)
	}
	snap.Release()
	// Release without Persist, twice.
	f = openTest(t, fs, "/fsm", nil)
	snap, err = f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	snap.Release()
	snap.Release()
	assertNoLeftovers(t, fs, "/fsm")
}

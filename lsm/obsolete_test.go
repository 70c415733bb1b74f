package lsm

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// gatedRemoveFS holds every Remove of a table file, once armed, until the
// test lets it through: a stand-in for the unlink of a large table, which
// takes tens of milliseconds. entered receives the name of each held
// Remove.
type gatedRemoveFS struct {
	vfs.FS
	mu      sync.Mutex
	armed   bool
	tokens  chan struct{} // one per Remove let through
	opened  chan struct{} // closed: every Remove goes through
	entered chan string
}

func newGatedRemoveFS(fs vfs.FS) *gatedRemoveFS {
	return &gatedRemoveFS{FS: fs, tokens: make(chan struct{}, 100), opened: make(chan struct{}), entered: make(chan string, 100)}
}

func (g *gatedRemoveFS) arm(on bool) {
	g.mu.Lock()
	g.armed = on
	g.mu.Unlock()
}

// openAll lets every held and later Remove through.
func (g *gatedRemoveFS) openAll() {
	select {
	case <-g.opened:
	default:
		close(g.opened)
	}
}

func (g *gatedRemoveFS) Remove(name string) error {
	g.mu.Lock()
	armed := g.armed
	g.mu.Unlock()
	if ft, _, ok := base.ParseFilename(name); armed && ok && (ft == base.FileTypeTable || ft == base.FileTypeBlob) {
		g.entered <- name
		select {
		case <-g.tokens:
		case <-g.opened:
		}
	}
	return g.FS.Remove(name)
}

// deadlockTimeout bounds a wait that only a hang can exceed.
const deadlockTimeout = 20 * time.Second

func waitSwept(t testing.TB, d *DB) {
	t.Helper()
	select {
	case <-d.sweptCh:
	case <-time.After(deadlockTimeout):
		t.Fatal("the cleaner did not finish the sweep of Open")
	}
}

func tableFilesOnDisk(t testing.TB, fs vfs.FS, dir string) []base.FileNum {
	t.Helper()
	return filesOnDisk(t, fs, dir, base.FileTypeTable)
}

func tablesInVersion(d *DB) []base.FileNum {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []base.FileNum
	for _, files := range d.mu.versions.Current().Levels {
		for _, f := range files {
			out = append(out, f.FileNum)
		}
	}
	slices.Sort(out)
	return out
}

// TestCloseDoesNotWaitForObsoleteDeletion: Close waits for the one table
// being unlinked, not for the rest of the tables a compaction obsoleted;
// they stay on disk until the next Open's sweep removes them, and no live
// table is ever removed.
func TestCloseDoesNotWaitForObsoleteDeletion(t *testing.T) {
	mem := vfs.NewMem()
	fs := newGatedRemoveFS(mem)
	o := testOptions(fs)
	o.L0CompactionThreshold = 100 // only the manual compaction below
	o.L0SlowdownWritesThreshold = 200
	o.L0StopWritesThreshold = 400
	d := mustOpen(t, "db", o)
	model := fillFlushedTables(t, d, 4)
	// The iterator pins the version of the flushed tables, so that the
	// compaction's inputs become obsolete only when it is closed, and
	// are deleted by the cleaner.
	it, err := d.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	fs.arm(true)
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fs.entered:
	case <-time.After(deadlockTimeout):
		t.Fatal("no obsolete table was deleted after the iterator closed")
	}
	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	for !d.closed.Load() {
		runtime.Gosched()
	}
	fs.tokens <- struct{}{} // the unlink in progress completes, after Close began
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(deadlockTimeout):
		fs.openAll()
		<-closed
		t.Fatal("Close waited for the deletion of every obsolete table")
	}
	fs.openAll()

	left := tableFilesOnDisk(t, mem, "db")
	d = mustOpen(t, "db", testOptions(mem))
	defer d.Close()
	live := tablesInVersion(d)
	if len(left) <= len(live) {
		t.Fatalf("tables on disk after Close %v, live %v: the test needs obsolete ones left behind", left, live)
	}
	waitSwept(t, d)
	if disk := tableFilesOnDisk(t, mem, "db"); !slices.Equal(disk, live) {
		t.Fatalf("after the sweep of Open, tables on disk %v, want the live ones %v", disk, live)
	}
	checkModel(t, d, model)
}

// TestOpenDoesNotWaitForSweep: Open returns before the files an earlier
// run left behind are unlinked; the cleaner removes them afterwards, and
// the DB reads and writes meanwhile.
func TestOpenDoesNotWaitForSweep(t *testing.T) {
	mem := vfs.NewMem()
	d := mustOpen(t, "db", testOptions(mem))
	model := map[string][]byte{"a": []byte("1"), "b": []byte("2")}
	for k, v := range model {
		if err := d.Put([]byte(k), v, NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// Orphans, as a crash during a compaction leaves them.
	var orphans []string
	for _, n := range []base.FileNum{900, 901} {
		name := base.MakeFilepath("db", base.FileTypeTable, n)
		f, err := mem.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte("half a table"))
		f.Close()
		orphans = append(orphans, name)
	}

	fs := newGatedRemoveFS(mem)
	fs.arm(true)
	o := testOptions(fs)
	opened := make(chan *DB, 1)
	go func() {
		d, err := Open("db", o)
		if err != nil {
			t.Error(err)
		}
		opened <- d
	}()
	select {
	case d = <-opened:
	case <-time.After(deadlockTimeout):
		fs.openAll()
		if d = <-opened; d != nil {
			d.Close()
		}
		t.Fatal("Open waited for the orphans to be unlinked")
	}
	if d == nil {
		t.FailNow()
	}
	defer d.Close()
	// The sweep is held in its first unlink: the DB works meanwhile.
	<-fs.entered
	if err := d.Put([]byte("c"), []byte("3"), NoSync); err != nil {
		t.Fatal(err)
	}
	model["c"] = []byte("3")
	checkModel(t, d, model)
	fs.openAll()
	waitSwept(t, d)
	for _, name := range orphans {
		if _, err := mem.Stat(name); err == nil {
			t.Fatalf("orphan %s survived the sweep", name)
		}
	}
	if disk, live := tableFilesOnDisk(t, mem, "db"), tablesInVersion(d); !slices.Equal(disk, live) {
		t.Fatalf("tables on disk %v, want the live ones %v", disk, live)
	}
}

// slowRemoveFS makes every Remove of a table take delay, as the unlink of
// a large table does.
type slowRemoveFS struct {
	vfs.FS
	delay time.Duration
}

func (s slowRemoveFS) Remove(name string) error {
	if ft, _, ok := base.ParseFilename(name); ok && ft == base.FileTypeTable {
		time.Sleep(s.delay)
	}
	return s.FS.Remove(name)
}

// TestCompactDeletesObsoleteTables: when Compact returns, the tables its
// compactions replaced are gone from disk (no reader holds them), however
// slow their unlinks: the space a caller compacts to reclaim is reclaimed,
// and a Close right after leaves nothing for the next Open.
func TestCompactDeletesObsoleteTables(t *testing.T) {
	mem := vfs.NewMem()
	o := testOptions(slowRemoveFS{FS: mem, delay: 50 * time.Millisecond})
	o.L0CompactionThreshold = 100 // only the manual compaction below
	o.L0SlowdownWritesThreshold = 200
	o.L0StopWritesThreshold = 400
	d := mustOpen(t, "db", o)
	defer d.Close()
	model := fillFlushedTables(t, d, 4)
	if before := tableFilesOnDisk(t, mem, "db"); len(before) < 4 {
		t.Fatalf("tables before Compact %v, want the 4 flushed", before)
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	if disk, live := tableFilesOnDisk(t, mem, "db"), tablesInVersion(d); !slices.Equal(disk, live) {
		t.Fatalf("when Compact returned, tables on disk %v, want the live ones %v", disk, live)
	}
	checkModel(t, d, model)
}

// fillFlushedTables writes n tables of interleaved keys, one flush each,
// and returns the model of what it wrote.
func fillFlushedTables(t testing.TB, d *DB, n int) map[string][]byte {
	t.Helper()
	model := make(map[string][]byte)
	for round := range n {
		for i := range 200 {
			k := fmt.Sprintf("k%04d", i*n+round)
			v := fmt.Appendf(nil, "v%d-%d", round, i)
			if err := d.Put([]byte(k), v, NoSync); err != nil {
				t.Fatal(err)
			}
			model[k] = v
		}
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	return model
}

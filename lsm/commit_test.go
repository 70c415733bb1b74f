package lsm

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm/vfs"
)

// slowSyncFS makes every file Sync take a while, as a disk's fsync does.
type slowSyncFS struct {
	vfs.FS
	delay time.Duration
}

type slowSyncFile struct {
	vfs.File
	delay time.Duration
}

func (fs slowSyncFS) Create(name string) (vfs.File, error) {
	f, err := fs.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return slowSyncFile{f, fs.delay}, nil
}

func (f slowSyncFile) Sync() error {
	time.Sleep(f.delay)
	return f.File.Sync()
}

// TestGroupCommitSharesFsync: concurrent synced writers share WAL writes
// and fsyncs, and every acknowledged write is readable.
func TestGroupCommitSharesFsync(t *testing.T) {
	fs := slowSyncFS{vfs.NewMem(), 2 * time.Millisecond}
	d := mustOpen(t, "db", &Options{FS: fs})
	defer d.Close()
	const writers, perWriter = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				k := fmt.Sprintf("w%d-%03d", w, i)
				if err := d.Put([]byte(k), []byte(k), Sync); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	m := d.Metrics()
	if m.Writes != writers*perWriter {
		t.Fatalf("Writes = %d, want %d", m.Writes, writers*perWriter)
	}
	// With 8 writers blocked on a 2 ms fsync, groups must form: far fewer
	// fsyncs than writes.
	if m.WALSyncs*2 > m.Writes {
		t.Fatalf("%d fsyncs for %d synced writes: group commit is not sharing fsyncs", m.WALSyncs, m.Writes)
	}
	t.Logf("%d writes in %d groups with %d fsyncs", m.Writes, m.CommitGroups, m.WALSyncs)
	for w := 0; w < writers; w++ {
		for i := 0; i < perWriter; i++ {
			k := fmt.Sprintf("w%d-%03d", w, i)
			if v, err := d.Get([]byte(k)); err != nil || string(v) != k {
				t.Fatalf("Get(%s) = %q, %v", k, v, err)
			}
		}
	}
}

// TestSyncedWritesAreFsynced: every write acknowledged with Sync survives a
// crash, even interleaved with unsynced writes (a group led by an unsynced
// write never takes a synced one).
func TestSyncedWritesAreFsynced(t *testing.T) {
	fs := vfs.NewMem()
	d := mustOpen(t, "db", &Options{FS: fs})
	for i := 0; i < 20; i++ {
		k := []byte(fmt.Sprintf("k%02d", i))
		wo := NoSync
		if i%2 == 0 {
			wo = Sync
		}
		if err := d.Put(k, k, wo); err != nil {
			t.Fatal(err)
		}
	}
	crashed := fs.CrashClone()
	d.Close()
	d = mustOpen(t, "db", &Options{FS: crashed})
	defer d.Close()
	// Every synced write (and every write before the last synced one, which
	// the same WAL fsync covered) survives.
	for i := 0; i <= 18; i++ {
		k := []byte(fmt.Sprintf("k%02d", i))
		if v, err := d.Get(k); err != nil || string(v) != string(k) {
			t.Fatalf("after crash Get(%s) = %q, %v", k, v, err)
		}
	}
}

// TestGroupFitsMemTable: a commit group of many-entry batches never
// overflows the memtable the leader made room in (the group's entries'
// arena overhead counts, not just the last batch's).
func TestGroupFitsMemTable(t *testing.T) {
	fs := slowSyncFS{vfs.NewMem(), time.Millisecond}
	d := mustOpen(t, "db", &Options{FS: fs, MemTableSizeBytes: 64 << 10})
	defer d.Close()
	const writers, batches, perBatch = 8, 40, 400
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < batches; i++ {
				b := NewBatch()
				// Mix many-entry and one-entry batches, so that a group's
				// leader and followers differ in entry counts.
				n := perBatch
				if (w+i)%2 == 1 {
					n = 1
				}
				for j := 0; j < n; j++ {
					b.Set([]byte(fmt.Sprintf("%d/%d/%d", w, i, j)), []byte("v"))
				}
				if err := d.Write(b, Sync); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	m := d.Metrics()
	if m.BackgroundErr != nil {
		t.Fatal(m.BackgroundErr)
	}
	if m.CommitGroups >= m.Writes {
		t.Fatalf("no groups formed (%d groups for %d writes): the test proves nothing", m.CommitGroups, m.Writes)
	}
}

// TestConcurrentFlushAndWrites: a Flush waiting for commit leadership sits
// in the commit queue without a batch; a write leader building its group
// must not take it along (it dereferenced the missing batch and panicked
// once blob GC started flushing from the background).
func TestConcurrentFlushAndWrites(t *testing.T) {
	fs := vfs.NewMem()
	d := mustOpen(t, "db", testOptions(fs))
	defer d.Close()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				if err := d.Put([]byte(fmt.Sprintf("g%d-%d", g, i)), []byte("v"), NoSync); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 50 {
			if err := d.Flush(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
}

// TestPutDoesNotAllocate: a NoSync Put into a memtable with room queues
// itself, writes the WAL and inserts into the memtable without a heap
// allocation (the commit queue used to be re-sliced from the front, so
// each write's append reallocated it).
func TestPutDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items: the pools allocate")
	}
	d := mustOpen(t, "db", &Options{FS: vfs.NewMem(), MemTableSizeBytes: 64 << 20})
	defer d.Close()
	key, value := make([]byte, 16), make([]byte, 100)
	i := 0
	put := func() {
		i++
		binary.BigEndian.PutUint64(key, uint64(i))
		if err := d.Put(key, value, NoSync); err != nil {
			t.Fatal(err)
		}
	}
	// Grow the first memtable (they start small and double) past what
	// the measured writes need, so that none of them switches memtables.
	memCapacity := func() int64 {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.mu.mem.capacityBytes
	}
	for memCapacity() < 32<<20 {
		put()
	}
	if allocs := testing.AllocsPerRun(2000, put); allocs != 0 {
		t.Fatalf("Put allocates %v times per call, want 0", allocs)
	}
}

package lsm

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/cairnkv/cairn/lsm/vfs/errorfs"
)

// ckptWorkload applies random writes to d and to model: puts (some values
// past MinBlobSize), deletes, range deletes and batches, with the
// occasional flush, compaction and blob GC.
type ckptWorkload struct {
	t     testing.TB
	d     *DB
	rng   *rand.Rand
	model map[string][]byte // nil: the writes are not modelled
	ver   int
}

func (w *ckptWorkload) key() string { return fmt.Sprintf("k%03d", w.rng.IntN(300)) }

func (w *ckptWorkload) value(k string) []byte {
	w.ver++
	n := 8 + w.rng.IntN(40)
	if w.rng.IntN(4) == 0 {
		n = 100 + w.rng.IntN(300) // separated when MinBlobSize is 64
	}
	return blobValueFor(k, w.ver, n)
}

func (w *ckptWorkload) run(ops int, background bool) {
	for range ops {
		var err error
		switch r := w.rng.IntN(100); {
		case r < 60:
			k := w.key()
			v := w.value(k)
			if err = w.d.Put([]byte(k), v, NoSync); err == nil && w.model != nil {
				w.model[k] = v
			}
		case r < 75:
			k := w.key()
			if err = w.d.Delete([]byte(k), NoSync); err == nil && w.model != nil {
				delete(w.model, k)
			}
		case r < 80:
			a, b := w.key(), w.key()
			if a > b {
				a, b = b, a
			}
			if a == b {
				continue
			}
			if err = w.d.DeleteRange([]byte(a), []byte(b), NoSync); err == nil && w.model != nil {
				for k := range w.model {
					if k >= a && k < b {
						delete(w.model, k)
					}
				}
			}
		case r < 92:
			b := NewBatch()
			puts := map[string][]byte{}
			var dels []string
			for range 1 + w.rng.IntN(8) {
				k := w.key()
				if w.rng.IntN(4) == 0 {
					b.Delete([]byte(k))
					dels = append(dels, k)
					delete(puts, k)
				} else {
					v := w.value(k)
					b.Set([]byte(k), v)
					puts[k] = v
					dels = slicesDelete(dels, k)
				}
			}
			if err = w.d.Write(b, NoSync); err == nil && w.model != nil {
				for _, k := range dels {
					delete(w.model, k)
				}
				maps.Copy(w.model, puts)
			}
		case background:
			// Background work is left to the DB.
		case r < 96:
			err = w.d.Flush()
		case r < 98:
			err = w.d.Compact(nil, nil)
		default:
			if w.d.opts.MinBlobSize > 0 {
				err = w.d.BlobGC(0)
			}
		}
		if err != nil {
			w.t.Errorf("workload: %v", err)
			return
		}
	}
}

func slicesDelete(s []string, k string) []string {
	out := s[:0]
	for _, x := range s {
		if x != k {
			out = append(out, x)
		}
	}
	return out
}

func checkpointOptions(fs vfs.FS, blobs bool) *Options {
	if blobs {
		return blobTestOptions(fs, 64)
	}
	return testOptions(fs)
}

// TestPreparedCheckpointIsThePreparedState: a checkpoint written after
// PrepareCheckpoint holds exactly the state at the capture, whatever
// happened in between (writes, flushes of the captured memtables,
// compactions and blob GC of the captured files) and whatever is written
// while it is written.
//
// Modes: busy (writes, flushes, compactions and blob GC between the capture
// and the write, and a writer during it); quiet (nothing written after the
// capture, a compaction for odd seeds: the checkpoint is the DB's own
// tables, and the DB is durable up to the capture). Each with
// the WAL, and without (the capture then freezes the memtable).
func TestPreparedCheckpointIsThePreparedState(t *testing.T) {
	seeds := 8
	if raceEnabled || testing.Short() {
		seeds = 3
	}
	for _, mode := range []string{"busy", "quiet"} {
		for _, wal := range []bool{true, false} {
			for _, blobs := range []bool{false, true} {
				var own atomic.Int64
				for seed := range uint64(seeds) {
					t.Run(fmt.Sprintf("%s/wal=%v/blobs=%v/seed=%d", mode, wal, blobs, seed), func(t *testing.T) {
						if testPreparedCheckpoint(t, mode, wal, blobs, seed) {
							own.Add(1)
						}
					})
				}
				t.Logf("%s/wal=%v/blobs=%v: %d of %d checkpoints were the DB's own tables", mode, wal, blobs, own.Load(), seeds)
			}
		}
	}
}

// testPreparedCheckpoint reports whether the checkpoint was made of the
// DB's own tables alone.
func testPreparedCheckpoint(t *testing.T, mode string, wal, blobs bool, seed uint64) (own bool) {
	fs := vfs.NewMem()
	o := checkpointOptions(fs, blobs)
	o.DisableWAL = !wal
	d := mustOpen(t, "db", o)
	defer d.Close()
	w := &ckptWorkload{t: t, d: d, rng: rand.New(rand.NewPCG(seed, 1)), model: map[string][]byte{}}
	w.run(200+w.rng.IntN(600), false)

	p, err := d.PrepareCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	want := maps.Clone(w.model)

	var wg sync.WaitGroup
	var stop atomic.Bool
	switch mode {
	case "quiet":
		if seed%2 == 1 { // (Compact flushes first)
			if err := d.Compact(nil, nil); err != nil {
				t.Fatal(err)
			}
		}
	case "busy":
		// Between the capture and the write: more writes, and flushes,
		// compactions and blob GC that replace the captured memtables
		// and files.
		w.run(w.rng.IntN(400), false)
		// During the write: a concurrent writer.
		wg.Add(1)
		go func() {
			defer wg.Done()
			cw := &ckptWorkload{t: t, d: d, rng: rand.New(rand.NewPCG(seed, 2))}
			for !stop.Load() {
				cw.run(10, true)
			}
		}()
	}
	err = p.Write("ckpt")
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	own = true
	for _, n := range filesOnDisk(t, fs, "ckpt", base.FileTypeTable) {
		if !slices.Contains(filesOnDisk(t, fs, "db", base.FileTypeTable), n) {
			own = false
		}
	}
	if mode == "quiet" {
		if !own {
			t.Errorf("without writes after the capture, the checkpoint has a table of its own")
		}
		// Write left the DB durable up to the capture: a crash (which
		// loses the memtables and unsynced WAL) keeps its state.
		crashed := mustOpen(t, "db", &Options{FS: fs.CrashClone(), ErrorIfNotExists: true, MinBlobSize: o.MinBlobSize})
		checkModel(t, crashed, want)
		crashed.Close()
	}
	if err := p.Write("ckpt"); err == nil {
		t.Fatal("Write into an existing directory succeeded")
	}
	c := mustOpen(t, "ckpt", &Options{FS: fs, ErrorIfNotExists: true, MinBlobSize: o.MinBlobSize})
	checkModel(t, c, want)
	// The checkpoint is a DB of its own: it takes writes and compacts
	// (its memtable table included).
	if err := c.Put([]byte("new"), []byte("v"), NoSync); err != nil {
		t.Fatal(err)
	}
	if err := c.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	want["new"] = []byte("v")
	checkModel(t, c, want)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return own
}

// TestPrepareCheckpointDoesNotWait: the capture waits neither for a flush
// nor for the commit queue, and writes go on while the checkpoint is
// written (here made slow: every link into it takes 50ms).
func TestPrepareCheckpointDoesNotWait(t *testing.T) {
	mem := vfs.NewMem()
	var slowFlush, slowLinks atomic.Bool
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		switch {
		case slowLinks.Load() && op == errorfs.OpLink: // path is the link's source
			time.Sleep(50 * time.Millisecond)
		case slowFlush.Load() && op == errorfs.OpCreate && strings.HasPrefix(path, "db/") && strings.HasSuffix(path, ".sst"):
			time.Sleep(200 * time.Millisecond)
		}
		return nil
	}))
	o := testOptions(fs)
	o.MemTableSizeBytes = 1 << 20 // no flush but ours
	d := mustOpen(t, "db", o)
	defer d.Close()
	w := &ckptWorkload{t: t, d: d, rng: rand.New(rand.NewPCG(1, 1)), model: map[string][]byte{}}
	for range 10 {
		w.run(100, true)
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	w.run(100, true)

	// A flush in progress (its table's creation is slow): the capture
	// does not wait for it.
	slowFlush.Store(true)
	flushed := make(chan error, 1)
	go func() { flushed <- d.Flush() }()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	p, err := d.PrepareCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	if el := time.Since(start); el > 100*time.Millisecond {
		t.Errorf("PrepareCheckpoint took %v during a slow flush", el)
	}
	want := maps.Clone(w.model)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	slowFlush.Store(false)

	// Writes during a slow Write.
	slowLinks.Store(true)
	var writes atomic.Int64
	var maxLatency atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			t0 := time.Now()
			if err := d.Put([]byte(fmt.Sprintf("k%03d", i%300)), []byte("late"), NoSync); err != nil {
				t.Error(err)
				return
			}
			if l := int64(time.Since(t0)); l > maxLatency.Load() {
				maxLatency.Store(l)
			}
			writes.Add(1)
		}
	}()
	start = time.Now()
	err = p.Write("ckpt")
	took := time.Since(start)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Write took %v; %d writes meanwhile, the slowest %v", took, writes.Load(), time.Duration(maxLatency.Load()))
	if took < 100*time.Millisecond {
		t.Fatalf("Write took %v: the links were not slowed", took)
	}
	if writes.Load() == 0 || time.Duration(maxLatency.Load()) > took/2 {
		t.Errorf("%d writes during a %v Write, the slowest %v", writes.Load(), took, time.Duration(maxLatency.Load()))
	}
	c := mustOpen(t, "ckpt", &Options{FS: mem, ErrorIfNotExists: true})
	defer c.Close()
	checkModel(t, c, want)
}

// TestPreparedCheckpointCrash crashes at every file system operation of a
// Write: the directory it leaves either does not open or holds exactly the
// captured state.
func TestPreparedCheckpointCrash(t *testing.T) {
	for _, blobs := range []bool{false, true} {
		t.Run(fmt.Sprintf("blobs=%v", blobs), func(t *testing.T) {
			mem := vfs.NewMem()
			var recording atomic.Bool
			var mu sync.Mutex
			var clones []*vfs.MemFS
			var ops []string
			fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
				if recording.Load() && (strings.HasPrefix(path, "ckpt") || op == errorfs.OpLink) {
					mu.Lock()
					clones = append(clones, mem.CrashClone())
					ops = append(ops, fmt.Sprintf("%v %s", op, path))
					mu.Unlock()
				}
				return nil
			}))
			o := checkpointOptions(fs, blobs)
			d := mustOpen(t, "db", o)
			defer d.Close()
			w := &ckptWorkload{t: t, d: d, rng: rand.New(rand.NewPCG(7, 1)), model: map[string][]byte{}}
			w.run(500, false)
			p, err := d.PrepareCheckpoint()
			if err != nil {
				t.Fatal(err)
			}
			defer p.Release()
			want := maps.Clone(w.model)
			w.run(200, false)
			recording.Store(true)
			if err := p.Write("ckpt"); err != nil {
				t.Fatal(err)
			}
			recording.Store(false)
			clones = append(clones, mem.CrashClone())
			ops = append(ops, "after Write")
			opened := 0
			for i, c := range clones {
				db, err := Open("ckpt", &Options{FS: c, ErrorIfNotExists: true, MinBlobSize: o.MinBlobSize})
				if err != nil {
					if i == len(clones)-1 {
						t.Fatalf("crash after Write returned: the checkpoint does not open: %v", err)
					}
					if _, serr := c.Stat("ckpt/CURRENT"); !errors.Is(serr, os.ErrNotExist) {
						t.Fatalf("crash before %s: CURRENT exists (%v) but Open fails: %v", ops[i], serr, err)
					}
					continue
				}
				opened++
				checkModel(t, db, want)
				db.Close()
			}
			t.Logf("%d crash points, the checkpoint opened at %d", len(clones), opened)
		})
	}
}

// TestPreparedCheckpointRelease: Write after Release fails; Release waits
// for nothing and is idempotent, also after Close.
func TestPreparedCheckpointRelease(t *testing.T) {
	fs := vfs.NewMem()
	d := mustOpen(t, "db", testOptions(fs))
	d.Put([]byte("a"), []byte("1"), NoSync)
	p, err := d.PrepareCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	p.Release()
	if err := p.Write("ckpt"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Release: %v", err)
	}
	if _, err := fs.Stat("ckpt"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Write after Release left %s: %v", "ckpt", err)
	}
	p, err = d.PrepareCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	d.Put([]byte("b"), []byte("2"), NoSync)
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Write("ckpt"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	p.Release() // after Close: frees memory, deletes no file
	if _, err := d.PrepareCheckpoint(); !errors.Is(err, ErrClosed) {
		t.Fatalf("PrepareCheckpoint after Close: %v", err)
	}
	d = mustOpen(t, "db", testOptions(fs))
	defer d.Close()
	checkModel(t, d, map[string][]byte{"a": []byte("1"), "b": []byte("2")})
}

package errorfs

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cairnkv/cairn/lsm/vfs"
)

// workload exercises every FS and File operation once or more, stopping at
// the first error.
func workload(fs vfs.FS) error {
	if err := fs.MkdirAll("db", 0o755); err != nil {
		return err
	}
	l, err := fs.Lock("db/LOCK")
	if err != nil {
		return err
	}
	f, err := fs.Create("db/a.tmp")
	if err != nil {
		l.Close()
		return err
	}
	steps := []func() error{
		func() error { _, err := f.Write([]byte("hello")); return err },
		f.Sync,
		func() error { _, err := f.Stat(); return err },
		f.Close,
		func() error { return fs.Rename("db/a.tmp", "db/a") },
		func() error { return fs.Link("db/a", "db/b") },
		func() error {
			d, err := fs.OpenDir("db")
			if err != nil {
				return err
			}
			if err := d.Sync(); err != nil {
				d.Close()
				return err
			}
			return d.Close()
		},
		func() error {
			r, err := fs.Open("db/b")
			if err != nil {
				return err
			}
			b := make([]byte, 5)
			if _, err = r.Read(b); err == nil {
				_, err = r.ReadAt(b, 0)
			}
			if cerr := r.Close(); err == nil {
				err = cerr
			}
			return err
		},
		func() error { _, err := fs.List("db"); return err },
		func() error { _, err := fs.Stat("db/a"); return err },
		func() error { return fs.Remove("db/b") },
		func() error { return fs.RemoveAll("db/none") },
		l.Close,
	}
	for i, step := range steps {
		if err := step(); err != nil {
			if i < 3 {
				f.Close()
			}
			if i < len(steps)-1 {
				l.Close()
			}
			return err
		}
	}
	return nil
}

func TestWorkloadCoversEveryOp(t *testing.T) {
	seen := map[Op]int{}
	var mu sync.Mutex
	inj := InjectorFunc(func(op Op, path string) error {
		mu.Lock()
		seen[op]++
		mu.Unlock()
		return nil
	})
	if err := workload(Wrap(vfs.NewMem(), inj)); err != nil {
		t.Fatal(err)
	}
	for _, op := range AllOps() {
		if seen[op] == 0 {
			t.Errorf("workload never ran %s", op)
		}
	}
}

func TestOnIndexSweep(t *testing.T) {
	counter := OnIndex(-1)
	if err := workload(Wrap(vfs.NewMem(), counter)); err != nil {
		t.Fatal(err)
	}
	n := counter.Count()
	if n < int64(len(AllOps())) {
		t.Fatalf("counted %d ops", n)
	}
	for i := int64(0); i < n; i++ {
		inj := OnIndex(i)
		err := workload(Wrap(vfs.NewMem(), inj))
		if !errors.Is(err, ErrInjected) {
			t.Fatalf("index %d: err = %v", i, err)
		}
		if !inj.Injected() {
			t.Fatalf("index %d: Injected() false", i)
		}
		// The workload stops at the failure: it ran i+1 ops (plus the
		// cleanup Closes).
		if c := inj.Count(); c < i+1 {
			t.Fatalf("index %d: only %d ops ran", i, c)
		}
	}
	// Past the end nothing fails.
	inj := OnIndex(n)
	if err := workload(Wrap(vfs.NewMem(), inj)); err != nil || inj.Injected() {
		t.Fatalf("index %d (past the end): %v", n, err)
	}
}

func TestOnIndexWithOps(t *testing.T) {
	counter := OnIndex(-1).WithOps(OpSync)
	if err := workload(Wrap(vfs.NewMem(), counter)); err != nil {
		t.Fatal(err)
	}
	if counter.Count() != 2 { // the file's and the directory's
		t.Fatalf("counted %d syncs", counter.Count())
	}
	for i := int64(0); i < 2; i++ {
		var failed Op = numOps
		inj := OnIndex(i).WithOps(OpSync)
		spy := InjectorFunc(func(op Op, path string) error {
			err := inj.MaybeError(op, path)
			if err != nil {
				failed = op
			}
			return err
		})
		if err := workload(Wrap(vfs.NewMem(), spy)); !errors.Is(err, ErrInjected) || failed != OpSync {
			t.Fatalf("sync %d: err=%v failed op=%s", i, err, failed)
		}
	}
}

func TestFailedOpsHaveNoEffect(t *testing.T) {
	mem := vfs.NewMem()
	var fail atomic.Bool
	fs := Wrap(mem, InjectorFunc(func(op Op, path string) error {
		if fail.Load() {
			return ErrInjected
		}
		return nil
	}))
	f, err := fs.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	d, _ := mem.OpenDir("")
	d.Sync()
	d.Close()
	f.Write([]byte("abc"))
	fail.Store(true)
	if n, err := f.Write([]byte("def")); n != 0 || !errors.Is(err, ErrInjected) {
		t.Fatalf("injected Write = %d, %v", n, err)
	}
	if err := f.Sync(); !errors.Is(err, ErrInjected) {
		t.Fatal(err)
	}
	if err := fs.Rename("f", "g"); !errors.Is(err, ErrInjected) {
		t.Fatal(err)
	}
	if err := fs.Remove("f"); !errors.Is(err, ErrInjected) {
		t.Fatal(err)
	}
	fi, err := mem.Stat("f")
	if err != nil || fi.Size() != 3 {
		t.Fatalf("after failed ops: %v %v", fi, err)
	}
	if fi, err := mem.CrashClone().Stat("f"); err != nil || fi.Size() != 0 {
		t.Fatalf("failed Sync synced: %v %v", fi, err)
	}
	// A failed Close still closes the file.
	if err := f.Close(); !errors.Is(err, ErrInjected) {
		t.Fatal(err)
	}
	fail.Store(false)
	if _, err := f.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Write after failed Close = %v", err)
	}
	// A failed lock Close releases the lock.
	l, err := fs.Lock("LOCK")
	if err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	if err := l.Close(); !errors.Is(err, ErrInjected) {
		t.Fatal(err)
	}
	if l2, err := mem.Lock("LOCK"); err != nil {
		t.Fatalf("lock not released by failed Close: %v", err)
	} else {
		l2.Close()
	}
}

func TestOnIndexConcurrent(t *testing.T) {
	mem := vfs.NewMem()
	inj := OnIndex(500)
	fs := Wrap(mem, inj)
	var failures atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if _, err := fs.Stat(""); errors.Is(err, ErrInjected) {
					failures.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if failures.Load() != 1 || inj.Count() != 1600 {
		t.Fatalf("failures=%d count=%d", failures.Load(), inj.Count())
	}
}

func TestRandom(t *testing.T) {
	run := func(inj Injector) []bool {
		fs := Wrap(vfs.NewMem(), inj)
		var out []bool
		for i := 0; i < 1000; i++ {
			_, err := fs.Stat("")
			out = append(out, err != nil)
		}
		return out
	}
	a, b := run(Random(0.1, 7)), run(Random(0.1, 7))
	fails := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different outcome at op %d", i)
		}
		if a[i] {
			fails++
		}
	}
	if fails < 50 || fails > 150 {
		t.Fatalf("p=0.1 failed %d of 1000", fails)
	}
	for _, f := range run(Random(0, 1)) {
		if f {
			t.Fatal("p=0 failed an op")
		}
	}
	r := Random(1, 1).WithOps(OpWrite)
	for _, f := range run(r) {
		if f {
			t.Fatal("op outside WithOps failed")
		}
	}
	if r.Injected() != 0 {
		t.Fatal(r.Injected())
	}
}

func TestFilter(t *testing.T) {
	inj := Filter(OnIndex(0), func(p string) bool { return p == "db/a" }, OpWrite, OpCreate)
	fs := Wrap(vfs.NewMem(), inj)
	fs.MkdirAll("db", 0o755)
	if _, err := fs.Create("db/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Create("db/a"); !errors.Is(err, ErrInjected) {
		t.Fatalf("Create db/a = %v", err)
	}
	if err := fs.Link("db/b", "db/a"); err != nil {
		t.Fatal(err)
	}
	if _, ok := fs.Unwrap().(*vfs.MemFS); !ok {
		t.Fatal("Unwrap did not return the wrapped FS")
	}
}

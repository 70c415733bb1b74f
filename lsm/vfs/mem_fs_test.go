package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
)

func writeFile(t *testing.T, fs FS, name, data string, sync bool) {
	t.Helper()
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func syncDir(t *testing.T, fs FS, dir string) {
	t.Helper()
	d, err := fs.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// readFile returns the contents of name, or "<missing>".
func readFile(t *testing.T, fs FS, name string) string {
	t.Helper()
	f, err := fs.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return "<missing>"
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMemFSFileBasics(t *testing.T) {
	fs := NewMem()
	if err := fs.MkdirAll("/a/b", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create("a/b/f")
	if err != nil {
		t.Fatal(err)
	}
	r, err := fs.Open("/a/b/./f")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if n, err := r.ReadAt(buf, 0); n != 0 || err != io.EOF {
		t.Fatalf("ReadAt on empty file = %d, %v", n, err)
	}
	if _, err := f.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	// The reader opened before the write sees the appended data.
	if n, err := r.ReadAt(buf, 2); n != 3 || err != io.EOF || string(buf[:n]) != "llo" {
		t.Fatalf("ReadAt past end = %d %q %v", n, buf[:n], err)
	}
	if n, err := r.ReadAt(buf, 1); n != 4 || err != nil || string(buf) != "ello" {
		t.Fatalf("ReadAt = %d %q %v", n, buf[:n], err)
	}
	if n, err := r.ReadAt(buf, 5); n != 0 || err != io.EOF {
		t.Fatalf("ReadAt at size = %d, %v", n, err)
	}
	if b, err := io.ReadAll(r); err != nil || string(b) != "hello" {
		t.Fatalf("ReadAll = %q, %v", b, err)
	}
	if _, err := r.Write([]byte("x")); err == nil {
		t.Fatal("Write on a file opened for reading succeeded")
	}
	fi, err := f.Stat()
	if err != nil || fi.Size() != 5 || fi.Name() != "f" || fi.IsDir() {
		t.Fatalf("Stat = %+v, %v", fi, err)
	}
	if fi, err := fs.Stat("a/b"); err != nil || !fi.IsDir() || fi.Name() != "b" {
		t.Fatalf("Stat dir = %+v, %v", fi, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Write after Close = %v", err)
	}
	r.Close()

	names, err := fs.List("a/b")
	if err != nil || !slices.Equal(names, []string{"f"}) {
		t.Fatalf("List = %v, %v", names, err)
	}
	// Errors a caller relies on.
	if _, err := fs.Open("a/nope"); !errors.Is(err, os.ErrNotExist) || !os.IsNotExist(err) {
		t.Fatalf("Open missing = %v", err)
	}
	if _, err := fs.OpenDir("a/b/f"); err == nil {
		t.Fatal("OpenDir of a file succeeded")
	}
	if _, err := fs.Create("a/b/f/g"); err == nil {
		t.Fatal("Create under a file succeeded")
	}
	if err := fs.Remove("a"); err == nil {
		t.Fatal("Remove of a non-empty directory succeeded")
	}
	if err := fs.Link("a/b/f", "a/b/f"); !errors.Is(err, os.ErrExist) {
		t.Fatalf("Link onto existing = %v", err)
	}
	if err := fs.Rename("a", "a/b/c"); err == nil {
		t.Fatal("Rename of a directory into itself succeeded")
	}
	if err := fs.Remove("a/b/nope"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Remove missing = %v", err)
	}
	if err := fs.RemoveAll("a/nope"); err != nil {
		t.Fatalf("RemoveAll missing = %v", err)
	}
	if err := fs.RemoveAll("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat("a/b/f"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Stat after RemoveAll = %v", err)
	}
}

func TestMemFSUnsyncedDataLost(t *testing.T) {
	fs := NewMem()
	f, err := fs.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	syncDir(t, fs, "")
	f.Write([]byte("abc"))
	if got := readFile(t, fs.CrashClone(), "f"); got != "" {
		t.Fatalf("after crash before Sync: %q", got)
	}
	f.Sync()
	f.Write([]byte("def"))
	if got := readFile(t, fs.CrashClone(), "f"); got != "abc" {
		t.Fatalf("after crash with unsynced tail: %q", got)
	}
	// The original keeps working and keeps its unsynced data.
	f.Write([]byte("g"))
	if got := readFile(t, fs, "f"); got != "abcdefg" {
		t.Fatalf("original: %q", got)
	}
	f.Sync()
	if got := readFile(t, fs.CrashClone(), "f"); got != "abcdefg" {
		t.Fatalf("after Sync: %q", got)
	}
}

func TestMemFSUnsyncedEntryLost(t *testing.T) {
	fs := NewMem()
	writeFile(t, fs, "f", "data", true)
	if got := readFile(t, fs.CrashClone(), "f"); got != "<missing>" {
		t.Fatalf("file synced, directory not: %q", got)
	}
	syncDir(t, fs, "/")
	if got := readFile(t, fs.CrashClone(), "f"); got != "data" {
		t.Fatalf("after directory Sync: %q", got)
	}
	// Remove is undone by a crash until the directory is synced.
	if err := fs.Remove("f"); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, fs.CrashClone(), "f"); got != "data" {
		t.Fatalf("unsynced remove: %q", got)
	}
	syncDir(t, fs, ".")
	if got := readFile(t, fs.CrashClone(), "f"); got != "<missing>" {
		t.Fatalf("synced remove: %q", got)
	}
}

func TestMemFSMkdirAllDurability(t *testing.T) {
	fs := NewMem()
	if err := fs.MkdirAll("db/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, fs, "db/sub/f", "x", true)
	syncDir(t, fs, "db/sub")
	if _, err := fs.CrashClone().Stat("db"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("new directory survived a crash without parent sync: %v", err)
	}
	syncDir(t, fs, "")
	c := fs.CrashClone()
	if _, err := c.Stat("db"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat("db/sub"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("db/sub survived without syncing db: %v", err)
	}
	syncDir(t, fs, "db")
	if got := readFile(t, fs.CrashClone(), "db/sub/f"); got != "x" {
		t.Fatalf("all synced: %q", got)
	}
}

func TestMemFSRenameDurability(t *testing.T) {
	fs := NewMem()
	fs.MkdirAll("d", 0o755)
	syncDir(t, fs, "")
	writeFile(t, fs, "d/CURRENT", "old", true)
	syncDir(t, fs, "d")
	writeFile(t, fs, "d/CURRENT.tmp", "new", true)
	if err := fs.Rename("d/CURRENT.tmp", "d/CURRENT"); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, fs, "d/CURRENT"); got != "new" {
		t.Fatalf("current view: %q", got)
	}
	c := fs.CrashClone()
	if got := readFile(t, c, "d/CURRENT"); got != "old" {
		t.Fatalf("rename before dir sync: %q", got)
	}
	if got := readFile(t, c, "d/CURRENT.tmp"); got != "<missing>" {
		t.Fatalf("tmp before dir sync: %q", got)
	}
	syncDir(t, fs, "d")
	c = fs.CrashClone()
	if got := readFile(t, c, "d/CURRENT"); got != "new" {
		t.Fatalf("rename after dir sync: %q", got)
	}
	if got := readFile(t, c, "d/CURRENT.tmp"); got != "<missing>" {
		t.Fatalf("tmp after dir sync: %q", got)
	}
}

func TestMemFSLinks(t *testing.T) {
	fs := NewMem()
	f, _ := fs.Create("a")
	f.Write([]byte("12"))
	f.Sync()
	if err := fs.Link("a", "b"); err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("34"))
	if got := readFile(t, fs, "b"); got != "1234" {
		t.Fatalf("link sees %q", got)
	}
	syncDir(t, fs, "")
	if err := fs.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, fs, "b"); got != "1234" {
		t.Fatalf("link after removing the original: %q", got)
	}
	c := fs.CrashClone()
	if a, b := readFile(t, c, "a"), readFile(t, c, "b"); a != "12" || b != "12" {
		t.Fatalf("after crash a=%q b=%q", a, b)
	}
	// The clone keeps the two names on one file.
	w, _ := c.Create("a") // truncates the shared file
	w.Write([]byte("z"))
	w.Close()
	if got := readFile(t, c, "b"); got != "z" {
		t.Fatalf("clone link sees %q", got)
	}
	// The original is untouched by the clone.
	if got := readFile(t, fs, "b"); got != "1234" {
		t.Fatalf("original after writing the clone: %q", got)
	}
	f.Close()
}

func TestMemFSTruncatingCreate(t *testing.T) {
	fs := NewMem()
	writeFile(t, fs, "f", "durable", true)
	syncDir(t, fs, "")
	f, _ := fs.Create("f")
	f.Write([]byte("xy"))
	if got := readFile(t, fs, "f"); got != "xy" {
		t.Fatalf("current: %q", got)
	}
	if got := readFile(t, fs.CrashCloneTorn(rand.New(rand.NewPCG(1, 2))), "f"); got != "durable" {
		t.Fatalf("crash after unsynced truncation: %q", got)
	}
	f.Sync()
	if got := readFile(t, fs.CrashClone(), "f"); got != "xy" {
		t.Fatalf("crash after synced truncation: %q", got)
	}
}

func TestMemFSCrashCloneTorn(t *testing.T) {
	fs := NewMem()
	f, _ := fs.Create("wal")
	syncDir(t, fs, "")
	f.Write([]byte("synced|"))
	f.Sync()
	tail := "0123456789abcdef"
	f.Write([]byte(tail))
	seen := map[int]bool{}
	for seed := uint64(0); seed < 200; seed++ {
		got := readFile(t, fs.CrashCloneTorn(rand.New(rand.NewPCG(seed, 0))), "wal")
		want := "synced|" + tail
		if len(got) < len("synced|") || got != want[:len(got)] {
			t.Fatalf("seed %d: torn clone %q is not a prefix of %q extending the synced data", seed, got, want)
		}
		again := readFile(t, fs.CrashCloneTorn(rand.New(rand.NewPCG(seed, 0))), "wal")
		if again != got {
			t.Fatalf("seed %d: not reproducible: %q vs %q", seed, got, again)
		}
		seen[len(got)-len("synced|")] = true
	}
	if len(seen) != len(tail)+1 {
		t.Fatalf("torn lengths seen: %v, want all of 0..%d", seen, len(tail))
	}
}

// TestMemFSModel runs random operations on one directory of a MemFS and on a
// simple model, and checks after each crash that the clone holds exactly the
// model's durable state.
func TestMemFSModel(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { testMemFSModel(t, seed) })
	}
}

func testMemFSModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed))
	type modelFile struct{ data, synced []byte }
	type handle struct {
		f  File
		id int // the model file it writes
	}
	var (
		files   []*modelFile                   // by id
		cur     = map[string]int{}             // name → file id
		durable = map[string]int{}             // name → file id, as of the last dir sync
		handles = map[string]handle{}          // the writer opened by Create(name)
		names   = []string{"a", "b", "c", "d"} // small name space: collisions
	)
	fs := NewMem()
	fs.MkdirAll("d", 0o755)
	syncDir(t, fs, "")
	path := func(n string) string { return "d/" + n }
	for step := 0; step < 600; step++ {
		name := names[rng.IntN(len(names))]
		other := names[rng.IntN(len(names))]
		h, hasHandle := handles[name]
		switch rng.IntN(9) {
		case 0: // create (truncating an existing file in place)
			if hasHandle {
				h.f.Close()
			}
			f, err := fs.Create(path(name))
			if err != nil {
				t.Fatal(err)
			}
			id, ok := cur[name]
			if ok {
				files[id].data = nil
			} else {
				files = append(files, &modelFile{})
				id = len(files) - 1
				cur[name] = id
			}
			handles[name] = handle{f, id}
		case 1, 2: // write
			if !hasHandle {
				continue
			}
			p := make([]byte, rng.IntN(10))
			for i := range p {
				p[i] = byte('a' + rng.IntN(26))
			}
			if _, err := h.f.Write(p); err != nil {
				t.Fatal(err)
			}
			m := files[h.id]
			m.data = append(m.data, p...)
			if fi, _ := h.f.Stat(); fi.Size() != int64(len(m.data)) {
				t.Fatalf("step %d: size %d, model %d", step, fi.Size(), len(m.data))
			}
		case 3: // sync a file
			if !hasHandle {
				continue
			}
			if err := h.f.Sync(); err != nil {
				t.Fatal(err)
			}
			files[h.id].synced = slices.Clone(files[h.id].data)
		case 4: // sync the directory
			syncDir(t, fs, "d")
			durable = maps.Clone(cur)
		case 5: // rename
			err := fs.Rename(path(name), path(other))
			if _, ok := cur[name]; !ok {
				if err == nil {
					t.Fatal("rename of a missing file succeeded")
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			// As rename(2): renaming a name onto a hard link of the same
			// file does nothing.
			if dst, ok := cur[other]; !ok || dst != cur[name] {
				cur[other] = cur[name]
				delete(cur, name)
			}
		case 6: // link
			err := fs.Link(path(name), path(other))
			_, srcOK := cur[name]
			_, dstExists := cur[other]
			if !srcOK || dstExists {
				if err == nil {
					t.Fatal("bad link succeeded")
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			cur[other] = cur[name]
		case 7: // remove
			err := fs.Remove(path(name))
			if _, ok := cur[name]; !ok {
				if err == nil {
					t.Fatal("remove of a missing file succeeded")
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			delete(cur, name)
		case 8: // crash: compare with the model, then go on with the clone
			c := fs.CrashClone()
			for _, n := range names {
				want := "<missing>"
				if id, ok := durable[n]; ok {
					want = string(files[id].synced)
				}
				if got := readFile(t, c, path(n)); got != want {
					t.Fatalf("step %d: after crash %s = %q, want %q\n%s", step, n, got, want, fs)
				}
			}
			for _, h := range handles {
				h.f.Close()
			}
			clear(handles)
			fs = c
			// Rebuild the model: durable names, synced contents, links kept.
			var survivors []*modelFile
			remap := map[int]int{}
			cur = map[string]int{}
			for _, n := range slices.Sorted(maps.Keys(durable)) {
				id := durable[n]
				nid, ok := remap[id]
				if !ok {
					synced := files[id].synced
					survivors = append(survivors, &modelFile{data: slices.Clone(synced), synced: slices.Clone(synced)})
					nid = len(survivors) - 1
					remap[id] = nid
				}
				cur[n] = nid
			}
			files = survivors
			durable = maps.Clone(cur)
		}
	}
	for _, h := range handles {
		h.f.Close()
	}
}

func TestMemFSConcurrent(t *testing.T) {
	fs := NewMem()
	const writers, writes = 4, 200
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			name := fmt.Sprintf("f%d", w)
			f, err := fs.Create(name)
			if err != nil {
				t.Error(err)
				return
			}
			r, err := fs.Open(name)
			if err != nil {
				t.Error(err)
				return
			}
			for i := 0; i < writes; i++ {
				f.Write([]byte{byte(i)})
				if i%10 == 0 {
					f.Sync()
				}
				var b [1]byte
				if n, err := r.ReadAt(b[:], int64(i)); n != 1 || err != nil || b[0] != byte(i) {
					t.Errorf("ReadAt(%d) = %d %v %d", i, n, err, b[0])
					return
				}
			}
			f.Sync()
			f.Close()
			r.Close()
		}(w)
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; i < 100; i++ {
			syncDir(t, fs, "")
			fs.List("")
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 50; i++ {
			c := fs.CrashClone()
			names, _ := c.List("")
			for _, n := range names {
				fi, err := c.Stat(n)
				if err != nil || fi.Size() > writes {
					t.Errorf("clone %s: %v %v", n, fi, err)
				}
			}
		}
	}()
	wg.Wait()
	syncDir(t, fs, "")
	c := fs.CrashClone()
	for w := 0; w < writers; w++ {
		got := readFile(t, c, fmt.Sprintf("f%d", w))
		want := make([]byte, writes)
		for i := range want {
			want[i] = byte(i)
		}
		if !bytes.Equal([]byte(got), want) {
			t.Fatalf("f%d: %d bytes", w, len(got))
		}
	}
}

func TestMemFSLock(t *testing.T) {
	fs := NewMem()
	fs.MkdirAll("db", 0o755)
	l, err := fs.Lock("db/LOCK")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Lock("/db/./LOCK"); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Lock = %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err == nil {
		t.Fatal("double Close of a lock succeeded")
	}
	l2, err := fs.Lock("db/LOCK")
	if err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
	// A crash releases every lock.
	syncDir(t, fs, "")
	if l3, err := fs.CrashClone().Lock("db/LOCK"); err != nil {
		t.Fatalf("Lock on a clone: %v", err)
	} else {
		l3.Close()
	}
	l2.Close()
}

package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm/internal/base"
	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/cairnkv/cairn/lsm/vfs/errorfs"
)

// gateFile is a WAL file for bufferedWAL's tests: it records what was
// written and what was synced, checks that what is written is always a
// prefix of what the test appended, and can hold a Sync until released.
type gateFile struct {
	vfs.File // nil: only Write, Sync and Close are used

	mu      sync.Mutex
	want    []byte // what the test appended to the bufferedWAL
	data    []byte // what reached the file
	durable []byte // data as of the last Sync
	// bad is set when data stopped being a prefix of want.
	bad string
	// syncEntered receives when a Sync starts; syncGate, if not nil,
	// holds the Sync until closed.
	syncEntered chan struct{}
	syncGate    chan struct{}
	closed      bool
}

func newGateFile() *gateFile { return &gateFile{syncEntered: make(chan struct{}, 1)} }

func (f *gateFile) appended(p []byte) {
	f.mu.Lock()
	f.want = append(f.want, p...)
	f.mu.Unlock()
}

func (f *gateFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.data = append(f.data, p...)
	if f.bad == "" && (len(f.data) > len(f.want) || !bytes.Equal(f.data, f.want[:len(f.data)])) {
		f.bad = fmt.Sprintf("after a write of %d bytes, the file's %d bytes are not a prefix of the %d appended", len(p), len(f.data), len(f.want))
	}
	return len(p), nil
}

func (f *gateFile) Sync() error {
	select {
	case f.syncEntered <- struct{}{}:
	default:
	}
	if f.syncGate != nil {
		<-f.syncGate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.durable = bytes.Clone(f.data)
	return nil
}

func (f *gateFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// waitFor waits on ch for up to a minute.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// TestBufferedWALSyncWaitsForFsync: Sync returns only after the fsync that
// covers every byte appended before it, and Close writes out the buffer.
func TestBufferedWALSyncWaitsForFsync(t *testing.T) {
	f := newGateFile()
	f.syncGate = make(chan struct{})
	w := newBufferedWAL(f)
	for i := range 3 {
		p := bytes.Repeat([]byte{byte('a' + i)}, 1000+i)
		f.appended(p)
		if _, err := w.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	res := make(chan error, 1)
	go func() { res <- w.Sync() }()
	waitFor(t, f.syncEntered, "the flusher's fsync")
	select {
	case err := <-res:
		t.Fatalf("Sync returned (%v) while the fsync was still running", err)
	default:
	}
	close(f.syncGate)
	if err := waitFor(t, res, "Sync"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	if !bytes.Equal(f.durable, f.want) {
		t.Fatalf("after Sync, %d bytes are durable, want the %d appended", len(f.durable), len(f.want))
	}
	f.mu.Unlock()

	// Unsynced bytes: Close writes them out (finish) before closing.
	p := []byte("tail")
	f.appended(p)
	if _, err := w.Write(p); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !bytes.Equal(f.data, f.want) || !f.closed || f.bad != "" {
		t.Fatalf("after Close: %d of %d bytes written, closed %v, %s", len(f.data), len(f.want), f.closed, f.bad)
	}
	if _, err := w.Write(p); err == nil {
		t.Fatal("Write after Close succeeded")
	}
	select {
	case <-w.done:
	default:
		t.Fatal("the flusher is still running after Close")
	}
}

// TestBufferedWALWritesOutUnsynced: a small unsynced append, too small to
// wake the flusher by its size, still reaches the file soon (the flush
// timer), without a Sync or a Close.
func TestBufferedWALWritesOutUnsynced(t *testing.T) {
	f := newGateFile()
	w := newBufferedWAL(f)
	defer w.Close()
	for round := range 3 {
		p := bytes.Repeat([]byte{byte('a' + round)}, 100)
		f.appended(p)
		if _, err := w.Write(p); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			f.mu.Lock()
			n, want := len(f.data), len(f.want)
			f.mu.Unlock()
			if n == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d of %d appended bytes reached the file after a minute", round, n, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestBufferedWALRandomized appends random amounts with random Syncs: the
// file is always a prefix of what was appended (the flusher writes in
// order), a Sync leaves everything appended before it durable, and no more
// than WALBufferBytes plus the last append are ever waiting in memory.
func TestBufferedWALRandomized(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	f := newGateFile()
	w := newBufferedWAL(f)
	for i := range 1500 {
		n := rng.IntN(4096)
		if rng.IntN(50) == 0 {
			n = rng.IntN(3 * WALBufferBytes / 2)
		}
		p := make([]byte, n)
		for j := range p {
			p[j] = byte(i + j)
		}
		f.appended(p)
		if _, err := w.Write(p); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		pending, bad := len(f.want)-len(f.data), f.bad
		f.mu.Unlock()
		if bad != "" {
			t.Fatal(bad)
		}
		if pending > WALBufferBytes+n {
			t.Fatalf("append %d: %d bytes not yet written, more than WALBufferBytes plus the append's %d", i, pending, n)
		}
		if rng.IntN(20) == 0 {
			if err := w.Sync(); err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			ok := len(f.durable) >= len(f.want) && bytes.Equal(f.durable[:len(f.want)], f.want)
			f.mu.Unlock()
			if !ok {
				t.Fatalf("append %d: after Sync, %d bytes are durable, want the %d appended", i, len(f.durable), len(f.want))
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.data, f.want) || f.bad != "" {
		t.Fatalf("after Close: %d of %d bytes written; %s", len(f.data), len(f.want), f.bad)
	}
	select {
	case <-w.done:
	default:
		t.Fatal("the flusher is still running after Close")
	}
}

// TestWALBufferedWritesError: a failed background WAL write becomes the
// DB's background error: the Sync write waiting for it fails, and so do
// every later write and Close.
func TestWALBufferedWritesError(t *testing.T) {
	var mu sync.Mutex
	failWAL := false
	inj := errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		mu.Lock()
		defer mu.Unlock()
		if ft, _, ok := base.ParseFilename(filepath.Base(path)); failWAL && ok && ft == base.FileTypeLog && op == errorfs.OpWrite {
			return fmt.Errorf("WAL write: %w", errorfs.ErrInjected)
		}
		return nil
	})
	o := testOptions(errorfs.Wrap(vfs.NewMem(), inj))
	o.WALBufferedWrites = true
	d := mustOpen(t, "/db", o)
	if err := d.Put([]byte("a"), []byte("1"), Sync); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	failWAL = true
	mu.Unlock()
	// Buffered: the NoSync write may be acknowledged before the flusher
	// meets the error; the Sync write cannot.
	_ = d.Put([]byte("b"), []byte("2"), NoSync)
	if err := d.Put([]byte("c"), []byte("3"), Sync); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("Sync write after a failed background WAL write: %v, want the injected error", err)
	}
	mu.Lock()
	failWAL = false
	mu.Unlock()
	if err := d.Put([]byte("d"), []byte("4"), NoSync); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("later write: %v, want the injected error (background error)", err)
	}
	if err := d.Close(); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("Close: %v, want the injected error", err)
	}
}

// TestWALBufferedWritesCrash runs random writes (single puts and batches,
// some synced) on a DB with WALBufferedWrites and, at random moments,
// reopens a copy of the file system as a power loss would leave it, with
// torn unsynced tails: the DB must hold the state after the first k writes
// for some k from the last synced write to the last acknowledged one.
// After a Close, every write must be there.
func TestWALBufferedWritesCrash(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	fs := vfs.NewMem()
	o := testOptions(fs)
	o.WALBufferedWrites = true
	d := mustOpen(t, "/db", o)
	type kv struct{ k, v string }
	var ops [][]kv // ops[i]: the puts of write i
	lastSynced := -1
	checks, lost := 0, 0
	check := func(clone vfs.FS, closed bool) {
		t.Helper()
		co := testOptions(clone)
		co.WALBufferedWrites = true
		cd := mustOpen(t, "/db", co)
		defer cd.Close()
		got := map[string]string{}
		it, err := cd.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			got[string(it.Key())] = string(it.Value())
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		lo := lastSynced + 1
		if closed {
			lo = len(ops)
		}
		m := map[string]string{}
		for k := 0; ; k++ {
			if k >= lo && mapsEqual(m, got) {
				lost += len(ops) - k
				return
			}
			if k == len(ops) {
				t.Fatalf("after %d writes (last synced %d, closed %v), the recovered DB (%d keys) is the state after no k writes with %d <= k <= %d", len(ops), lastSynced, closed, len(got), lo, len(ops))
			}
			for _, e := range ops[k] {
				m[e.k] = e.v
			}
		}
	}
	for i := range 4000 {
		var b Batch
		var puts []kv
		for range 1 + rng.IntN(3) {
			e := kv{fmt.Sprintf("key-%03d", rng.IntN(300)), fmt.Sprintf("v%d-%s", i, bytes.Repeat([]byte("x"), rng.IntN(200)))}
			b.Set([]byte(e.k), []byte(e.v))
			puts = append(puts, e)
		}
		sync := rng.IntN(10) == 0
		wo := NoSync
		if sync {
			wo = Sync
		}
		if err := d.Write(&b, wo); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, puts)
		if sync {
			lastSynced = i
		}
		if rng.IntN(100) == 0 {
			check(fs.CrashCloneTorn(rng), false)
			checks++
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	check(fs.CrashCloneTorn(rng), true)
	t.Logf("%d crash checks, %d acknowledged writes lost in all", checks, lost)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

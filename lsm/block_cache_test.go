package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/cairnkv/cairn/lsm/cache"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// blockCacheDB returns a DB on a memory FS holding n keys (key(i)) with
// random 100-byte values, flushed and compacted, and the values.
func blockCacheDB(t *testing.T, o *Options, n int) (*DB, [][]byte) {
	t.Helper()
	d := mustOpen(t, "db", o)
	rng := rand.New(rand.NewPCG(1, 2))
	vals := make([][]byte, n)
	b := NewBatch()
	for i := range vals {
		vals[i] = make([]byte, 100)
		for j := range vals[i] {
			vals[i][j] = byte(rng.Uint32())
		}
		b.Set(blockCacheKey(i), vals[i])
		if b.Count() >= 1000 {
			if err := d.Write(b, NoSync); err != nil {
				t.Fatal(err)
			}
			b = NewBatch()
		}
	}
	if err := d.Write(b, NoSync); err != nil {
		t.Fatal(err)
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	return d, vals
}

func blockCacheKey(i int) []byte { return []byte(fmt.Sprintf("key%012d", i)) }

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestBlockCacheOffHeap fills a 16 MiB block cache and measures the Go heap
// with the cache full and then emptied (every table's blocks evicted):
// the difference is what the cached blocks cost the heap. Off the heap it
// is the entries alone; with the blocks on the heap (before), it was the
// cache's size, which the garbage collector's headroom then doubled.
func TestBlockCacheOffHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 20 MB")
	}
	const cacheSize = 16 << 20
	o := &Options{FS: vfs.NewMem(), CacheSizeBytes: cacheSize}
	d, vals := blockCacheDB(t, o, 200_000)
	defer d.Close()
	for i := range vals {
		if err := d.GetFunc(blockCacheKey(i), func(v []byte) error {
			if !bytes.Equal(v, vals[i]) {
				return fmt.Errorf("key %d: wrong value", i)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	m := d.Metrics().BlockCache
	if m.Size < cacheSize*3/4 {
		t.Fatalf("cache only %d bytes full", m.Size)
	}
	full := heapInUse()
	rs := d.loadReadState()
	for _, level := range rs.version.Levels {
		for _, f := range level {
			d.cache.EvictFile(d.cacheID, f.FileNum)
		}
	}
	rs.unref()
	if n := d.Metrics().BlockCache.Count; n != 0 {
		t.Fatalf("%d blocks cached after evicting every table", n)
	}
	empty := heapInUse()
	cost := int64(full) - int64(empty)
	t.Logf("cache %d bytes full (%d blocks): heap %d bytes, %d emptied: the blocks cost the heap %d bytes", m.Size, m.Count, full, empty, cost)
	if cost > cacheSize/8 {
		t.Fatalf("the cached blocks cost the Go heap %d bytes (cache %d bytes full)", cost, m.Size)
	}
}

// TestGetFuncPinsBlock reads, inside GetFunc's callback, enough other keys
// through a tiny cache to evict every block many times over: the value the
// callback holds must stay intact until it returns (the block is pinned by
// its handle; released, its chunk would be reused by the other reads).
func TestGetFuncPinsBlock(t *testing.T) {
	o := testOptions(vfs.NewMem())
	o.CacheSizeBytes = 64 << 10
	d, vals := blockCacheDB(t, o, 5000)
	defer d.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	for q := 0; q < 20; q++ {
		i := rng.IntN(len(vals))
		if err := d.GetFunc(blockCacheKey(i), func(v []byte) error {
			for r := 0; r < 300; r++ {
				j := rng.IntN(len(vals))
				got, err := d.Get(blockCacheKey(j))
				if err != nil || !bytes.Equal(got, vals[j]) {
					return fmt.Errorf("nested Get(%d): %v", j, err)
				}
			}
			if !bytes.Equal(v, vals[i]) {
				return fmt.Errorf("key %d: the value changed under GetFunc's callback", i)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if m := d.Metrics().BlockCache; m.Pinned != 0 {
		t.Fatalf("%d block references held after every read returned", m.Pinned)
	}
}

// TestSharedBlockCache: two DBs share a cache; closing one drops its blocks
// and leaves the cache open for the other; the creator closes the cache
// last, with nothing left mapped. A DB that made its own cache closes it,
// and reports an iterator left open as a leak instead of unmapping memory
// the iterator still views.
func TestSharedBlockCache(t *testing.T) {
	c := cache.New(4 << 20)
	var dbs [2]*DB
	var vals [2][][]byte
	for i := range dbs {
		o := testOptions(vfs.NewMem())
		o.Cache = c
		dbs[i], vals[i] = blockCacheDB(t, o, 3000)
	}
	read := func(i int) {
		t.Helper()
		for j := 0; j < len(vals[i]); j += 7 {
			if got, err := dbs[i].Get(blockCacheKey(j)); err != nil || !bytes.Equal(got, vals[i][j]) {
				t.Fatalf("db %d: Get(%d): %v", i, j, err)
			}
		}
	}
	read(0)
	read(1)
	n1 := c.Metrics().Count
	if err := dbs[0].Close(); err != nil {
		t.Fatal(err)
	}
	if m := c.Metrics(); m.Count == 0 || m.Count >= n1 || m.Pinned != 0 {
		t.Fatalf("after closing one DB: %d of %d blocks cached, %d pinned", m.Count, n1, m.Pinned)
	}
	read(1) // The cache is still open.
	if err := dbs[1].Close(); err != nil {
		t.Fatal(err)
	}
	if m := c.Metrics(); m.Count != 0 || m.Buffers != 0 {
		t.Fatalf("after closing both DBs: %+v", m)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if m := c.Metrics(); m.MappedBytes != 0 {
		t.Fatalf("closed cache still maps %d bytes", m.MappedBytes)
	}

	// A DB's own cache: an iterator left open is reported at Close.
	d, _ := blockCacheDB(t, testOptions(vfs.NewMem()), 2000)
	it, err := d.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !it.First() {
		t.Fatal("empty DB")
	}
	var le *cache.LeakError
	if err := d.Close(); !errors.As(err, &le) {
		t.Fatalf("Close with an iterator open: %v, want a *cache.LeakError", err)
	}
	_ = it.Close() // The DB is closed; the iterator's handles still go.
}

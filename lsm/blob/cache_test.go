package blob

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"unsafe"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

func insert(t testing.TB, c *Cache, id uint64, fn base.FileNum, off uint64, val []byte) Handle {
	t.Helper()
	b, err := c.Alloc(len(val) + 10)
	if err != nil {
		t.Fatal(err)
	}
	copy(b.Bytes()[5:], val)
	return c.Insert(id, fn, off, b, 5, len(val))
}

func TestCacheHitMissRelease(t *testing.T) {
	c := NewCache(1 << 20)
	id := c.NewID()
	if _, ok := c.Get(id, 1, 16); ok {
		t.Fatal("hit in an empty cache")
	}
	h := insert(t, c, id, 1, 16, []byte("hello"))
	if string(h.Value()) != "hello" {
		t.Fatalf("inserted handle holds %q", h.Value())
	}
	h.Release()
	locks := c.Locks()
	for range 100 {
		h2, ok := c.Get(id, 1, 16)
		if !ok || string(h2.Value()) != "hello" {
			t.Fatal("miss after insert")
		}
		h2.Release()
	}
	if d := c.Locks() - locks; d != 0 {
		t.Fatalf("100 hits took %d shard locks, want 0", d)
	}
	if _, ok := c.Get(id+1, 1, 16); ok {
		t.Fatal("another id's key hit")
	}
	m := c.Metrics()
	if m.Hits != 100 || m.Misses != 2 || m.Count != 1 {
		t.Fatalf("metrics %+v", m)
	}
	// A handle outlives eviction of its file.
	h3, _ := c.Get(id, 1, 16)
	c.EvictFile(id, 1)
	if _, ok := c.Get(id, 1, 16); ok {
		t.Fatal("hit after EvictFile")
	}
	if string(h3.Value()) != "hello" {
		t.Fatal("handle lost its value at eviction")
	}
	if err := c.Close(); err == nil {
		t.Fatal("Close with a live handle succeeded")
	}
	h3.Release()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if m := c.Metrics(); m.MappedBytes != 0 || m.Outstanding != 0 {
		t.Fatalf("after Close: %+v", m)
	}
}

// TestCacheBounded inserts far more than the capacity: the charged size
// stays within it, and the allocator's mapped memory stays close to it.
func TestCacheBounded(t *testing.T) {
	const capacity = 8 << 20
	c := NewCache(capacity)
	id := c.NewID()
	val := make([]byte, 4096)
	for i := range 20000 {
		h := insert(t, c, id, base.FileNum(1+i%7), uint64(i), val)
		h.Release()
		if i%1000 == 0 {
			m := c.Metrics()
			if m.Size > capacity {
				t.Fatalf("size %d > capacity %d", m.Size, capacity)
			}
			if m.MappedBytes > capacity+capacity/2+int64(len(c.shards))*slabSize {
				t.Fatalf("mapped %d bytes for a %d-byte cache", m.MappedBytes, capacity)
			}
		}
	}
	// A value larger than a shard is not cached but its handle works.
	big := bytes.Repeat([]byte("x"), capacity)
	h := insert(t, c, id, 9, 0, big)
	if !bytes.Equal(h.Value(), big) {
		t.Fatal("big handle")
	}
	h.Release()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCacheConcurrent races hits, inserts and evictions; values must never
// be mixed up (each value encodes its key). Run it under -race.
func TestCacheConcurrent(t *testing.T) {
	c := NewCache(1 << 20)
	id := c.NewID()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for range 20000 {
				fn := base.FileNum(1 + rng.IntN(4))
				off := uint64(rng.IntN(200))
				want := fmt.Sprintf("%d/%d/%s", fn, off, bytes.Repeat([]byte("v"), int(off)*20))
				if h, ok := c.Get(id, fn, off); ok {
					if string(h.Value()) != want {
						panic(fmt.Sprintf("got %q want %q", h.Value()[:10], want[:10]))
					}
					h.Release()
					continue
				}
				if rng.IntN(100) == 0 {
					c.EvictFile(id, fn)
				}
				b, err := c.Alloc(len(want))
				if err != nil {
					panic(err)
				}
				copy(b.Bytes(), want)
				h := c.Insert(id, fn, off, b, 0, len(want))
				if string(h.Value()) != want {
					panic("inserted value differs")
				}
				h.Release()
			}
		}()
	}
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestAllocatorClasses(t *testing.T) {
	for _, n := range []int{1, 63, 64, 65, 4096, 4200, maxClass} {
		c := classOf(n)
		if c < 0 || classSizes[c] < n || (c > 0 && classSizes[c-1] >= n) {
			t.Fatalf("classOf(%d) = %d", n, c)
		}
		if w := classSizes[c] - n; n > 512 && w > n/8+64 {
			t.Fatalf("class of %d wastes %d bytes", n, w)
		}
	}
	if classOf(maxClass+1) != -1 {
		t.Fatal("no dedicated mapping above maxClass")
	}
	a := newAllocator()
	var bufs []*buffer
	for _, n := range []int{100, 5000, maxClass + 1, 100} {
		b, err := a.alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		for i := range b.b {
			b.b[i] = 1
		}
		bufs = append(bufs, b)
	}
	for _, b := range bufs {
		a.free(b)
	}
	// Each class keeps its last (empty) slab; the dedicated mapping goes.
	if m, o := a.stats(); m != 2*slabSize || o != 0 {
		t.Fatalf("after freeing everything: mapped %d, outstanding %d", m, o)
	}
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
}

// TestAllocatorSlabsAligned: slabs are whole huge pages (aligned to their
// size), every byte of them usable, and empty slabs beyond a class's last
// are unmapped (a wrong trim of the double mapping would fault or fail
// here).
func TestAllocatorSlabsAligned(t *testing.T) {
	a := newAllocator()
	const n = 4000
	per := slabSize / classSizes[classOf(n)]
	var bufs []*buffer
	for range 3 * per { // three slabs
		b, err := a.alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		for i := range b.b[:cap(b.b)] {
			b.b[:cap(b.b)][i] = 0xa5
		}
		bufs = append(bufs, b)
	}
	seen := map[*slab]bool{}
	for _, b := range bufs {
		if p := uintptr(unsafe.Pointer(&b.slab.mem[0])); p%slabSize != 0 || len(b.slab.mem) != slabSize {
			t.Fatalf("slab at %#x of %d bytes", p, len(b.slab.mem))
		}
		seen[b.slab] = true
	}
	if m, _ := a.stats(); len(seen) != 3 || m != 3*slabSize {
		t.Fatalf("%d slabs, %d bytes mapped", len(seen), m)
	}
	for _, b := range bufs {
		a.free(b)
	}
	if m, o := a.stats(); m != slabSize || o != 0 {
		t.Fatalf("after freeing everything: mapped %d, outstanding %d", m, o)
	}
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
}

// TestCacheTableGrows: a shard's table doubles while lookups run on other
// goroutines. No lookup returns another key's value, and once the inserts
// are done every inserted key is found (no entry was lost by a resize) and
// evicted ones are not. Run it under -race.
func TestCacheTableGrows(t *testing.T) {
	c := NewCache(64 << 20) // 16 shards of 4 MiB: 1,024 buckets each at first
	id := c.NewID()
	const n = 40000 // small records: ~2,500 per shard, two doublings
	val := func(off uint64) string { return fmt.Sprintf("value of %d", off) }
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for {
				select {
				case <-done:
					return
				default:
				}
				off := uint64(rng.IntN(n))
				if h, ok := c.Get(id, 1, off); ok {
					if string(h.Value()) != val(off) {
						panic(fmt.Sprintf("key %d: got %q", off, h.Value()))
					}
					h.Release()
				}
			}
		}()
	}
	for off := range uint64(n) {
		insert(t, c, id, 1, off, []byte(val(off))).Release()
	}
	close(done)
	wg.Wait()
	for i := range c.shards {
		if s := &c.shards[i]; len(s.table.Load().buckets) < len(s.ring) {
			t.Fatalf("shard %d: %d buckets for %d entries", i, len(s.table.Load().buckets), len(s.ring))
		}
	}
	for off := range uint64(n) {
		h, ok := c.Get(id, 1, off)
		if !ok {
			t.Fatalf("key %d lost", off)
		}
		if string(h.Value()) != val(off) {
			t.Fatalf("key %d: got %q", off, h.Value())
		}
		h.Release()
	}
	c.EvictFile(id, 1)
	for off := range uint64(n) {
		if h, ok := c.Get(id, 1, off); ok {
			h.Release()
			t.Fatalf("key %d found after its file was evicted", off)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

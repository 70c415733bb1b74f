package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// fillBlock writes into b (len >= 32) its key and a version, so that a
// reader can check it got the block it asked for, intact.
func fillBlock(b []byte, id uint64, fn base.FileNum, off, version uint64) {
	binary.LittleEndian.PutUint64(b[0:], id)
	binary.LittleEndian.PutUint64(b[8:], uint64(fn))
	binary.LittleEndian.PutUint64(b[16:], off)
	binary.LittleEndian.PutUint64(b[24:], version)
	for i := 32; i < len(b); i++ {
		b[i] = byte(off + uint64(i))
	}
}

// blockOK reports whether b is the block fillBlock wrote for the key, and
// returns its version.
func blockOK(b []byte, id uint64, fn base.FileNum, off uint64) (uint64, bool) {
	if len(b) < 32 || binary.LittleEndian.Uint64(b[0:]) != id ||
		binary.LittleEndian.Uint64(b[8:]) != uint64(fn) || binary.LittleEndian.Uint64(b[16:]) != off {
		return 0, false
	}
	for i := 32; i < len(b); i++ {
		if b[i] != byte(off+uint64(i)) {
			return 0, false
		}
	}
	return binary.LittleEndian.Uint64(b[24:]), true
}

func checkBlock(t testing.TB, b []byte, id uint64, fn base.FileNum, off uint64) {
	t.Helper()
	if _, ok := blockOK(b, id, fn, off); !ok {
		t.Fatalf("got a wrong or damaged block for (%d, %d, %d)", id, fn, off)
	}
}

// insert reads a block of n bytes into a buffer of c and inserts it,
// returning the handle.
func insert(t testing.TB, c *Cache, id uint64, fn base.FileNum, off uint64, n int, version uint64) Handle {
	t.Helper()
	b, err := c.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	fillBlock(b.Bytes(), id, fn, off, version)
	return c.Insert(id, fn, off, b)
}

// set inserts and releases at once.
func set(t testing.TB, c *Cache, id uint64, fn base.FileNum, off uint64, n int) {
	t.Helper()
	insert(t, c, id, fn, off, n, 0).Release()
}

// chargeOf is what the cache charges for a block of n bytes.
func chargeOf(n int) int64 {
	if c := classOf(n); c >= 0 {
		return int64(classSizes[c]) + EntryOverhead
	}
	return int64(n) + EntryOverhead
}

// checkInvariants verifies every shard's accounting and rings.
func checkInvariants(t *testing.T, c *Cache) {
	t.Helper()
	var total int64
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		if s.size > s.capacity {
			t.Fatalf("shard %d: size %d > capacity %d", i, s.size, s.capacity)
		}
		var n int
		var size int64
		for e := s.lru.next; e != &s.lru; e = e.next {
			if e.next.prev != e {
				t.Fatalf("shard %d: broken LRU ring", i)
			}
			if s.entries[e.key] != e {
				t.Fatalf("shard %d: LRU entry missing from map", i)
			}
			if e.refs.Load() < 1 {
				t.Fatalf("shard %d: cached entry with %d references", i, e.refs.Load())
			}
			n++
			size += e.charge
		}
		if n != len(s.entries) || size != s.size {
			t.Fatalf("shard %d: ring has %d entries / %d bytes, map %d / size %d", i, n, size, len(s.entries), s.size)
		}
		var inFiles int
		for fk, head := range s.files {
			e := head
			for {
				if e.key.id != fk.id || e.key.fileNum != fk.fileNum || s.entries[e.key] != e {
					t.Fatalf("shard %d: file ring holds a foreign or dead entry", i)
				}
				inFiles++
				e = e.fileNext
				if e == head {
					break
				}
			}
		}
		if inFiles != n {
			t.Fatalf("shard %d: file rings hold %d entries, want %d", i, inFiles, n)
		}
		total += s.size
		s.mu.Unlock()
	}
	if m := c.Metrics(); m.Size != total || m.Size > m.Capacity {
		t.Fatalf("metrics size %d, shards %d, capacity %d", m.Size, total, m.Capacity)
	}
}

// closeClean closes c and fails the test unless nothing was held and no
// memory stays mapped.
func closeClean(t *testing.T, c *Cache) {
	t.Helper()
	if m := c.Metrics(); m.Pinned != 0 || m.Buffers != m.Count {
		t.Fatalf("before Close: %d references pinned, %d buffers for %d cached blocks", m.Pinned, m.Buffers, m.Count)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if m := c.Metrics(); m.MappedBytes != 0 || m.LiveBytes != 0 || m.Buffers != 0 || m.Count != 0 {
		t.Fatalf("after Close: %+v", m)
	}
}

func TestCapacityRespected(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const capacity = 1 << 20
	c := New(capacity)
	for i := 0; i < 20000; i++ {
		n := 32 + rng.IntN(16<<10)
		off := uint64(rng.IntN(4096)) * 4096
		set(t, c, 1, base.FileNum(rng.IntN(8)), off, n)
		if m := c.Metrics(); m.Size > capacity {
			t.Fatalf("after %d sets: size %d > capacity %d", i, m.Size, capacity)
		}
	}
	checkInvariants(t, c)
	m := c.Metrics()
	if m.Size < capacity/2 {
		t.Fatalf("cache only %d bytes full after many sets", m.Size)
	}
	// The blocks' memory is what the cache charges for, less the entries'
	// overhead.
	if want := m.Size - m.Count*EntryOverhead; m.LiveBytes != want {
		t.Fatalf("live bytes %d, charged %d", m.LiveBytes, want)
	}
	closeClean(t, c)
}

func TestOversizedBlockNotCached(t *testing.T) {
	c := newWithShards(10_000, 1)
	h := insert(t, c, 1, 1, 0, 10_000, 0)
	if got, ok := c.Get(1, 1, 0); ok {
		got.Release()
		t.Fatal("a block larger than the shard was cached")
	}
	// The handle still works, and frees the block on Release.
	checkBlock(t, h.Value(), 1, 1, 0)
	if m := c.Metrics(); m.Buffers != 1 || m.Pinned != 1 || m.Count != 0 {
		t.Fatalf("metrics %+v with an uncached block held", m)
	}
	h.Release()
	// A block beyond the largest class has a mapping of its own.
	big := newWithShards(1<<30, 1)
	h = insert(t, big, 1, 1, 0, maxClass+1, 0)
	checkBlock(t, h.Value(), 1, 1, 0)
	h.Release()
	if hb, ok := big.Get(1, 1, 0); !ok {
		t.Fatal("big block not cached")
	} else {
		checkBlock(t, hb.Value(), 1, 1, 0)
		hb.Release()
	}
	checkInvariants(t, c)
	if m := c.Metrics(); m.Count != 0 || m.Size != 0 || m.Buffers != 0 {
		t.Fatalf("metrics %+v, want empty", m)
	}
	closeClean(t, c)
	closeClean(t, big)
}

func TestLRUOrder(t *testing.T) {
	const blockLen = 1000
	charge := chargeOf(blockLen)
	c := newWithShards(3*charge, 1)
	for off := uint64(0); off < 3; off++ {
		set(t, c, 1, 1, off, blockLen)
	}
	get := func(off uint64) bool {
		h, ok := c.Get(1, 1, off)
		if ok {
			checkBlock(t, h.Value(), 1, 1, off)
			h.Release()
		}
		return ok
	}
	// Touch 0, so 1 is now the least recently used.
	if !get(0) {
		t.Fatal("block 0 missing")
	}
	set(t, c, 1, 1, 3, blockLen)
	if get(1) {
		t.Fatal("block 1 should have been evicted")
	}
	for _, off := range []uint64{0, 2, 3} {
		if !get(off) {
			t.Fatalf("block %d evicted out of LRU order", off)
		}
	}
	// Order is now (most recent first) 3, 2, 0: a new block evicts 0.
	set(t, c, 1, 1, 4, blockLen)
	if get(0) {
		t.Fatal("block 0 should have been evicted")
	}
	checkInvariants(t, c)
	closeClean(t, c)
}

// lruModel is the obviously correct cache: a slice, most recent first, and
// the handles held.
type lruModel struct {
	capacity int64
	items    []modelItem
	held     []modelHandle
}

type modelItem struct {
	k       key
	version uint64
	charge  int64
}

type modelHandle struct {
	h       Handle
	k       key
	version uint64
}

func (m *lruModel) find(k key) int {
	for i, it := range m.items {
		if it.k == k {
			return i
		}
	}
	return -1
}

func (m *lruModel) get(k key) (uint64, bool) {
	i := m.find(k)
	if i < 0 {
		return 0, false
	}
	it := m.items[i]
	m.items = append(m.items[:i], m.items[i+1:]...)
	m.items = append([]modelItem{it}, m.items...)
	return it.version, true
}

// insert returns the version a handle on k shows after inserting version.
func (m *lruModel) insert(k key, version uint64, n int) uint64 {
	if v, ok := m.get(k); ok {
		return v // The cached block wins.
	}
	charge := chargeOf(n)
	if charge > m.capacity {
		return version
	}
	m.items = append([]modelItem{{k, version, charge}}, m.items...)
	var size int64
	for _, it := range m.items {
		size += it.charge
	}
	for size > m.capacity {
		size -= m.items[len(m.items)-1].charge
		m.items = m.items[:len(m.items)-1]
	}
	return version
}

func (m *lruModel) evictFile(id, fn uint64) {
	kept := m.items[:0]
	for _, it := range m.items {
		if it.k.id != id || it.k.fileNum != fn {
			kept = append(kept, it)
		}
	}
	m.items = kept
}

// pinned is what Metrics.Pinned should say: handles on cached blocks, and
// the blocks held out of the cache, each once.
func (m *lruModel) pinned() int64 {
	cached := map[uint64]bool{}
	for _, it := range m.items {
		cached[it.version] = true
	}
	var n int64
	out := map[uint64]bool{}
	for _, h := range m.held {
		if cached[h.version] {
			n++
		} else {
			out[h.version] = true
		}
	}
	return n + int64(len(out))
}

// buffers is the number of blocks alive: cached, or held after eviction.
func (m *lruModel) buffers() int64 {
	live := map[uint64]bool{}
	for _, it := range m.items {
		live[it.version] = true
	}
	for _, h := range m.held {
		live[h.version] = true
	}
	return int64(len(live))
}

func TestAgainstModel(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		capacity := int64(2000 + rng.IntN(20000))
		c := newWithShards(capacity, 1)
		m := &lruModel{capacity: capacity}
		var hits, misses int64
		var version uint64
		for op := 0; op < 3000; op++ {
			k := key{id: uint64(1 + rng.IntN(2)), fileNum: uint64(rng.IntN(4)), offset: uint64(rng.IntN(16))}
			fn := base.FileNum(k.fileNum)
			switch r := rng.IntN(20); {
			case r < 8:
				h, ok := c.Get(k.id, fn, k.offset)
				want, wok := m.get(k)
				if ok != wok {
					t.Fatalf("seed %d op %d: Get(%v) = %v, model %v", seed, op, k, ok, wok)
				}
				if ok {
					hits++
					if v, good := blockOK(h.Value(), k.id, fn, k.offset); !good || v != want {
						t.Fatalf("seed %d op %d: Get(%v) returned version %d (intact %v), model %d", seed, op, k, v, good, want)
					}
					m.held = append(m.held, modelHandle{h, k, want})
				} else {
					misses++
				}
			case r < 15:
				version++
				n := 32 + rng.IntN(3000)
				h := insert(t, c, k.id, fn, k.offset, n, version)
				want := m.insert(k, version, n)
				if v, good := blockOK(h.Value(), k.id, fn, k.offset); !good || v != want {
					t.Fatalf("seed %d op %d: Insert(%v) handle shows version %d (intact %v), model %d", seed, op, k, v, good, want)
				}
				m.held = append(m.held, modelHandle{h, k, want})
			case r < 17:
				c.EvictFile(k.id, fn)
				m.evictFile(k.id, k.fileNum)
			default:
				// Release a random held handle, checking first that
				// its block is still intact.
				if len(m.held) == 0 {
					continue
				}
				i := rng.IntN(len(m.held))
				x := m.held[i]
				if v, good := blockOK(x.h.Value(), x.k.id, base.FileNum(x.k.fileNum), x.k.offset); !good || v != x.version {
					t.Fatalf("seed %d op %d: held block of %v damaged before its release", seed, op, x.k)
				}
				x.h.Release()
				m.held = append(m.held[:i], m.held[i+1:]...)
			}
			if len(m.held) > 24 { // Bound what the test pins.
				x := m.held[0]
				if v, good := blockOK(x.h.Value(), x.k.id, base.FileNum(x.k.fileNum), x.k.offset); !good || v != x.version {
					t.Fatalf("seed %d op %d: held block of %v damaged before its release", seed, op, x.k)
				}
				x.h.Release()
				m.held = m.held[1:]
			}
			if got := c.Metrics(); got.Pinned != m.pinned() || got.Buffers != m.buffers() {
				t.Fatalf("seed %d op %d: %d pinned, %d buffers; model %d, %d", seed, op, got.Pinned, got.Buffers, m.pinned(), m.buffers())
			}
		}
		checkInvariants(t, c)
		got := c.Metrics()
		if got.Count != int64(len(m.items)) || got.Hits != hits || got.Misses != misses {
			t.Fatalf("seed %d: metrics %+v, model count %d hits %d misses %d", seed, got, len(m.items), hits, misses)
		}
		// The LRU order is the model's.
		s := &c.shards[0]
		i := 0
		for e := s.lru.next; e != &s.lru; e = e.next {
			if e.key != m.items[i].k {
				t.Fatalf("seed %d: LRU position %d holds %v, model %v", seed, i, e.key, m.items[i].k)
			}
			i++
		}
		// Closing with handles out fails and unmaps nothing.
		var le *LeakError
		if err := c.Close(); len(m.held) > 0 && (!errors.As(err, &le) || le.Buffers == 0) {
			t.Fatalf("seed %d: Close with %d handles out: %v", seed, len(m.held), err)
		}
		for _, x := range m.held {
			checkBlock(t, x.h.Value(), x.k.id, base.FileNum(x.k.fileNum), x.k.offset)
			x.h.Release()
		}
		closeClean(t, c)
	}
}

func TestEvictFile(t *testing.T) {
	c := New(64 << 20)
	a, b := c.NewID(), c.NewID()
	if a == b || a == 0 {
		t.Fatalf("NewID returned %d then %d", a, b)
	}
	for _, id := range []uint64{a, b} {
		for fn := base.FileNum(1); fn <= 3; fn++ {
			for off := uint64(0); off < 100; off++ {
				set(t, c, id, fn, off*4096, 100)
			}
		}
	}
	held, _ := c.Get(a, 2, 0)
	c.EvictFile(a, 2)
	checkInvariants(t, c)
	for _, id := range []uint64{a, b} {
		for fn := base.FileNum(1); fn <= 3; fn++ {
			for off := uint64(0); off < 100; off++ {
				got, ok := c.Get(id, fn, off*4096)
				if want := !(id == a && fn == 2); ok != want {
					t.Fatalf("(%d,%d,%d): cached %v, want %v", id, fn, off, ok, want)
				}
				if ok {
					checkBlock(t, got.Value(), id, fn, off*4096)
					got.Release()
				}
			}
		}
	}
	// New blocks take the freed chunks; the held one is not among them.
	for off := uint64(0); off < 100; off++ {
		set(t, c, a, 4, off*4096, 100)
	}
	// A block evicted while held stays intact for its holder.
	checkBlock(t, held.Value(), a, 2, 0)
	if m := c.Metrics(); m.Count != 600 || m.Pinned != 1 || m.Buffers != 601 {
		t.Fatalf("metrics %+v after evicting one of 7 files of 100 blocks, one held", m)
	}
	held.Release()
	// EvictAll drops one user's blocks.
	c.EvictAll(a)
	if m := c.Metrics(); m.Count != 300 || m.Buffers != 300 {
		t.Fatalf("metrics %+v after EvictAll of one of two users", m)
	}
	closeClean(t, c)
}

func TestHitMissCounters(t *testing.T) {
	c := New(1 << 20)
	if _, ok := c.Get(1, 1, 0); ok {
		t.Fatal("hit in an empty cache")
	}
	set(t, c, 1, 1, 0, 64)
	for i := 0; i < 3; i++ {
		h, _ := c.Get(1, 1, 0)
		h.Release()
	}
	c.Get(1, 1, 4096)
	m := c.Metrics()
	if m.Hits != 3 || m.Misses != 2 || m.Count != 1 || m.Size != 64+EntryOverhead || m.Capacity != 1<<20 || m.LiveBytes != 64 {
		t.Fatalf("metrics %+v", m)
	}
	closeClean(t, c)
}

// TestInsertKeepsCached: a second Insert of a cached key (a concurrent
// miss that lost) frees its buffer and returns the cached block.
func TestInsertKeepsCached(t *testing.T) {
	c := New(1 << 20)
	h1 := insert(t, c, 1, 1, 0, 100, 1)
	h2 := insert(t, c, 1, 1, 0, 300, 2)
	if v, _ := blockOK(h2.Value(), 1, 1, 0); v != 1 || len(h2.Value()) != 100 {
		t.Fatalf("second Insert returned version %d of %d bytes", v, len(h2.Value()))
	}
	if m := c.Metrics(); m.Count != 1 || m.Buffers != 1 || m.Pinned != 2 || m.Size != chargeOf(100) {
		t.Fatalf("metrics %+v after a losing Insert", m)
	}
	h1.Release()
	h2.Release()
	checkInvariants(t, c)
	closeClean(t, c)
}

func TestZeroAndNil(t *testing.T) {
	var nilCache *Cache
	b, err := nilCache.Alloc(40)
	if err != nil || len(b.Bytes()) != 40 {
		t.Fatalf("nil cache Alloc: %v", err)
	}
	fillBlock(b.Bytes(), 1, 1, 0, 0)
	h := nilCache.Insert(1, 1, 0, b)
	checkBlock(t, h.Value(), 1, 1, 0)
	h.Release()
	if _, ok := nilCache.Get(1, 1, 0); ok {
		t.Fatal("nil cache returned a block")
	}
	nilCache.EvictFile(1, 1)
	nilCache.EvictAll(1)
	if nilCache.Metrics() != (Metrics{}) || nilCache.NewID() != 0 || nilCache.Close() != nil {
		t.Fatal("nil cache has state")
	}
	c := New(0)
	h = insert(t, c, 1, 1, 0, 40, 0)
	checkBlock(t, h.Value(), 1, 1, 0)
	if _, ok := c.Get(1, 1, 0); ok {
		t.Fatal("zero-capacity cache returned a block")
	}
	h.Release()
	closeClean(t, c)
}

func TestShardCount(t *testing.T) {
	for _, tc := range []struct {
		capacity  int64
		minShards int
	}{{0, 1}, {64 << 10, 1}, {1 << 20, 16}, {1 << 30, 16}} {
		c := New(tc.capacity)
		n := len(c.shards)
		if n&(n-1) != 0 || n < tc.minShards || (tc.capacity > 0 && c.capacity/int64(n) < minShardBytes && n > 1) {
			t.Errorf("New(%d): %d shards", tc.capacity, n)
		}
		closeClean(t, c)
	}
}

func TestGetHitDoesNotAllocate(t *testing.T) {
	c := New(1 << 20)
	set(t, c, 1, 7, 4096, 4096)
	allocs := testing.AllocsPerRun(1000, func() {
		h, ok := c.Get(1, 7, 4096)
		if !ok {
			t.Fatal("miss")
		}
		h.Release()
	})
	if allocs != 0 {
		t.Fatalf("Get hit allocates %.1f times", allocs)
	}
	closeClean(t, c)
}

// TestBlocksOffHeap checks that the cache's blocks are not Go heap: its
// memory is mapped, and a full cache is not counted by the runtime.
func TestBlocksOffHeap(t *testing.T) {
	c := New(8 << 20)
	set(t, c, 1, 1, 0, 4200)
	h, _ := c.Get(1, 1, 0)
	m := c.Metrics()
	if m.MappedBytes < slabSize || m.LiveBytes != chargeOf(4200)-EntryOverhead {
		t.Fatalf("metrics %+v", m)
	}
	if cap(h.Value()) != classSizes[classOf(4200)] || classSizes[classOf(4200)] > 4200+4200/16+64 {
		t.Fatalf("a block of 4200 bytes got a chunk of %d", cap(h.Value()))
	}
	h.Release()
	closeClean(t, c)
}

func TestReleaseTwicePanics(t *testing.T) {
	c := New(1 << 20)
	h := insert(t, c, 1, 1, 0, 100, 0)
	h.Release()
	c.EvictAll(1) // The cache's reference goes: the block is freed.
	defer func() {
		if recover() == nil {
			t.Fatal("a second Release of one handle did not panic")
		}
	}()
	h.Release()
}

// TestPoisonFreed checks that builds with the invariants or race tags
// poison freed blocks, so a view kept past its Release reads garbage.
func TestPoisonFreed(t *testing.T) {
	if !poisonFreed {
		t.Skip("freed blocks are poisoned only with -tags invariants or -race")
	}
	c := New(1 << 20)
	h := insert(t, c, 1, 1, 0, 100, 0)
	view := h.Value()
	h.Release()
	checkBlock(t, view, 1, 1, 0) // Still cached: intact.
	c.EvictFile(1, 1)
	for i, b := range view {
		if b != poisonByte {
			t.Fatalf("byte %d of a freed block is %#x, not poisoned", i, b)
		}
	}
	closeClean(t, c)
}

// TestConcurrentAgainstModel runs gets, inserts, evictions of files and of
// users, and releases from many goroutines, each holding handles for a
// while. The model is what every holder can know: a handle shows its key's
// block, intact, until it is released (under -race freed memory is
// poisoned, so an early free shows as damage); at the end, with every
// handle released, nothing is pinned and Close unmaps everything.
func TestConcurrentAgainstModel(t *testing.T) {
	c := New(256 << 10)
	ids := []uint64{c.NewID(), c.NewID()}
	var wg sync.WaitGroup
	var version sync.Mutex
	var next uint64
	errc := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			type held struct {
				h   Handle
				id  uint64
				fn  base.FileNum
				off uint64
			}
			var hs []held
			fail := func(format string, args ...any) {
				select {
				case errc <- fmt.Errorf(format, args...):
				default:
				}
			}
			check := func(x held) {
				if _, ok := blockOK(x.h.Value(), x.id, x.fn, x.off); !ok {
					fail("goroutine %d: held block (%d, %d, %d) damaged", g, x.id, x.fn, x.off)
				}
			}
			for i := 0; i < 5000; i++ {
				id := ids[rng.IntN(len(ids))]
				fn := base.FileNum(rng.IntN(4))
				off := uint64(rng.IntN(64)) * 4096
				switch r := rng.IntN(100); {
				case r < 45:
					if h, ok := c.Get(id, fn, off); ok {
						x := held{h, id, fn, off}
						check(x)
						hs = append(hs, x)
					}
				case r < 75:
					version.Lock()
					next++
					v := next
					version.Unlock()
					b, err := c.Alloc(32 + rng.IntN(8192))
					if err != nil {
						fail("Alloc: %v", err)
						return
					}
					fillBlock(b.Bytes(), id, fn, off, v)
					x := held{c.Insert(id, fn, off, b), id, fn, off}
					check(x)
					hs = append(hs, x)
				case r < 77:
					c.EvictFile(id, fn)
				case r < 78:
					c.EvictAll(id)
				case r < 79:
					if m := c.Metrics(); m.Size > m.Capacity {
						fail("size %d > capacity %d", m.Size, m.Capacity)
					}
				default:
					if len(hs) == 0 {
						continue
					}
					j := rng.IntN(len(hs))
					check(hs[j])
					hs[j].h.Release()
					hs = append(hs[:j], hs[j+1:]...)
				}
				if len(hs) > 16 { // Bound what a goroutine pins.
					check(hs[0])
					hs[0].h.Release()
					hs = hs[1:]
				}
			}
			for _, x := range hs {
				check(x)
				x.h.Release()
			}
		}(g)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	checkInvariants(t, c)
	closeClean(t, c)
}

func BenchmarkGetParallel(b *testing.B) {
	for _, blocks := range []int{1 << 10, 1 << 14} {
		b.Run(fmt.Sprintf("blocks=%d", blocks), func(b *testing.B) {
			c := New(int64(blocks) * (4096 + EntryOverhead) * 2)
			defer c.Close()
			for i := 0; i < blocks; i++ {
				set(b, c, 1, base.FileNum(i%16), uint64(i)*4096, 4096)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
				for pb.Next() {
					i := rng.IntN(blocks)
					h, ok := c.Get(1, base.FileNum(i%16), uint64(i)*4096)
					if !ok {
						b.Fatal("miss")
					}
					h.Release()
				}
			})
		})
	}
}

// BenchmarkInsert is a miss's cache work on a full cache: a buffer for a
// 4.2 KiB block, its insertion (evicting, freeing the victim's chunk) and
// the handle's release. The old heap cache's equivalent is a make of the
// block and Set (BenchmarkInsertHeapEquivalent measures the make alone).
func BenchmarkInsert(b *testing.B) {
	c := New(64 << 20)
	defer c.Close()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf, err := c.Alloc(4200)
		if err != nil {
			b.Fatal(err)
		}
		buf.Bytes()[0] = byte(i)
		c.Insert(1, base.FileNum(i%16), uint64(i)*4096, buf).Release()
	}
}

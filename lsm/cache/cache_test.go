package cache

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// makeBlock returns a block of n bytes (n >= 24) whose head names its key, so
// a reader can check it got the block it asked for.
func makeBlock(id uint64, fn base.FileNum, off uint64, n int) []byte {
	b := make([]byte, n)
	binary.LittleEndian.PutUint64(b[0:], id)
	binary.LittleEndian.PutUint64(b[8:], uint64(fn))
	binary.LittleEndian.PutUint64(b[16:], off)
	return b
}

func checkBlock(t testing.TB, b []byte, id uint64, fn base.FileNum, off uint64) {
	t.Helper()
	if len(b) < 24 || binary.LittleEndian.Uint64(b[0:]) != id ||
		binary.LittleEndian.Uint64(b[8:]) != uint64(fn) || binary.LittleEndian.Uint64(b[16:]) != off {
		t.Fatalf("got the wrong block for (%d, %d, %d)", id, fn, off)
	}
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

func TestCapacityRespected(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const capacity = 1 << 20
	c := New(capacity)
	for i := 0; i < 20000; i++ {
		n := 24 + rng.IntN(16<<10)
		off := uint64(rng.IntN(4096)) * 4096
		c.Set(1, base.FileNum(rng.IntN(8)), off, makeBlock(1, 0, 0, n))
		if m := c.Metrics(); m.Size > capacity {
			t.Fatalf("after %d sets: size %d > capacity %d", i, m.Size, capacity)
		}
	}
	checkInvariants(t, c)
	if m := c.Metrics(); m.Size < capacity/2 {
		t.Fatalf("cache only %d bytes full after many sets", m.Size)
	}
}

func TestOversizedBlockNotCached(t *testing.T) {
	c := newWithShards(10_000, 1)
	c.Set(1, 1, 0, make([]byte, 10_000))
	if _, ok := c.Get(1, 1, 0); ok {
		t.Fatal("a block larger than the shard was cached")
	}
	// Replacing a cached block by an oversized one drops the old one.
	c.Set(1, 1, 8, make([]byte, 100))
	c.Set(1, 1, 8, make([]byte, 20_000))
	if _, ok := c.Get(1, 1, 8); ok {
		t.Fatal("stale block kept after an oversized replacement")
	}
	checkInvariants(t, c)
	if m := c.Metrics(); m.Count != 0 || m.Size != 0 {
		t.Fatalf("metrics %+v, want empty", m)
	}
}

func TestLRUOrder(t *testing.T) {
	const blockLen = 1000
	charge := blockLen + EntryOverhead
	c := newWithShards(3*charge, 1)
	for off := uint64(0); off < 3; off++ {
		c.Set(1, 1, off, makeBlock(1, 1, off, blockLen))
	}
	// Touch 0, so 1 is now the least recently used.
	if _, ok := c.Get(1, 1, 0); !ok {
		t.Fatal("block 0 missing")
	}
	c.Set(1, 1, 3, makeBlock(1, 1, 3, blockLen))
	if _, ok := c.Get(1, 1, 1); ok {
		t.Fatal("block 1 should have been evicted")
	}
	for _, off := range []uint64{0, 2, 3} {
		b, ok := c.Get(1, 1, off)
		if !ok {
			t.Fatalf("block %d evicted out of LRU order", off)
		}
		checkBlock(t, b, 1, 1, off)
	}
	// Order is now (most recent first) 3, 2, 0: a new block evicts 0.
	c.Set(1, 1, 4, makeBlock(1, 1, 4, blockLen))
	if _, ok := c.Get(1, 1, 0); ok {
		t.Fatal("block 0 should have been evicted")
	}
	checkInvariants(t, c)
}

// lruModel is the obviously correct cache: a slice, most recent first.
type lruModel struct {
	capacity int64
	items    []modelItem
}

type modelItem struct {
	k      key
	block  []byte
	charge int64
}

func (m *lruModel) find(k key) int {
	for i, it := range m.items {
		if it.k == k {
			return i
		}
	}
	return -1
}

func (m *lruModel) get(k key) ([]byte, bool) {
	i := m.find(k)
	if i < 0 {
		return nil, false
	}
	it := m.items[i]
	m.items = append(m.items[:i], m.items[i+1:]...)
	m.items = append([]modelItem{it}, m.items...)
	return it.block, true
}

func (m *lruModel) set(k key, b []byte) {
	if i := m.find(k); i >= 0 {
		m.items = append(m.items[:i], m.items[i+1:]...)
	}
	charge := int64(cap(b)) + EntryOverhead
	if charge > m.capacity {
		return
	}
	m.items = append([]modelItem{{k, b, charge}}, m.items...)
	var size int64
	for _, it := range m.items {
		size += it.charge
	}
	for size > m.capacity {
		size -= m.items[len(m.items)-1].charge
		m.items = m.items[:len(m.items)-1]
	}
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

func TestAgainstModel(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		capacity := int64(2000 + rng.IntN(20000))
		c := newWithShards(capacity, 1)
		m := &lruModel{capacity: capacity}
		var hits, misses int64
		for op := 0; op < 3000; op++ {
			k := key{id: uint64(1 + rng.IntN(2)), fileNum: uint64(rng.IntN(4)), offset: uint64(rng.IntN(16))}
			switch r := rng.IntN(10); {
			case r < 5:
				got, ok := c.Get(k.id, base.FileNum(k.fileNum), k.offset)
				want, wok := m.get(k)
				if ok != wok || !bytes.Equal(got, want) {
					t.Fatalf("seed %d op %d: Get(%v) = %v, model %v", seed, op, k, ok, wok)
				}
				if ok {
					hits++
				} else {
					misses++
				}
			case r < 9:
				b := makeBlock(k.id, base.FileNum(k.fileNum), k.offset, 24+rng.IntN(3000))
				c.Set(k.id, base.FileNum(k.fileNum), k.offset, b)
				m.set(k, b)
			default:
				c.EvictFile(k.id, base.FileNum(k.fileNum))
				m.evictFile(k.id, k.fileNum)
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
				c.Set(id, fn, off*4096, makeBlock(id, fn, off*4096, 100))
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
					checkBlock(t, got, id, fn, off*4096)
				}
			}
		}
	}
	// A block evicted while held stays intact for its holder.
	checkBlock(t, held, a, 2, 0)
	if m := c.Metrics(); m.Count != 500 {
		t.Fatalf("count %d after evicting one of 6 files of 100 blocks", m.Count)
	}
}

func TestHitMissCounters(t *testing.T) {
	c := New(1 << 20)
	c.Get(1, 1, 0)
	c.Set(1, 1, 0, makeBlock(1, 1, 0, 64))
	for i := 0; i < 3; i++ {
		c.Get(1, 1, 0)
	}
	c.Get(1, 1, 4096)
	m := c.Metrics()
	if m.Hits != 3 || m.Misses != 2 || m.Count != 1 || m.Size != 64+EntryOverhead || m.Capacity != 1<<20 {
		t.Fatalf("metrics %+v", m)
	}
}

func TestSetReplaces(t *testing.T) {
	c := New(1 << 20)
	c.Set(1, 1, 0, makeBlock(1, 1, 0, 100))
	c.Set(1, 1, 0, makeBlock(1, 1, 0, 300))
	b, ok := c.Get(1, 1, 0)
	if !ok || len(b) != 300 {
		t.Fatalf("Get after replace: ok=%v len=%d", ok, len(b))
	}
	if m := c.Metrics(); m.Count != 1 || m.Size != 300+EntryOverhead {
		t.Fatalf("metrics %+v after replace", m)
	}
	checkInvariants(t, c)
}

func TestZeroAndNil(t *testing.T) {
	var nilCache *Cache
	nilCache.Set(1, 1, 0, []byte("x"))
	if _, ok := nilCache.Get(1, 1, 0); ok {
		t.Fatal("nil cache returned a block")
	}
	nilCache.EvictFile(1, 1)
	if nilCache.Metrics() != (Metrics{}) || nilCache.NewID() != 0 {
		t.Fatal("nil cache has state")
	}
	c := New(0)
	c.Set(1, 1, 0, []byte("x"))
	if _, ok := c.Get(1, 1, 0); ok {
		t.Fatal("zero-capacity cache returned a block")
	}
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
	}
}

func TestGetHitDoesNotAllocate(t *testing.T) {
	c := New(1 << 20)
	c.Set(1, 7, 4096, makeBlock(1, 7, 4096, 4096))
	allocs := testing.AllocsPerRun(1000, func() {
		if _, ok := c.Get(1, 7, 4096); !ok {
			t.Fatal("miss")
		}
	})
	if allocs != 0 {
		t.Fatalf("Get hit allocates %.1f times", allocs)
	}
}

func TestConcurrent(t *testing.T) {
	c := New(256 << 10)
	ids := []uint64{c.NewID(), c.NewID()}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for i := 0; i < 5000; i++ {
				id := ids[rng.IntN(len(ids))]
				fn := base.FileNum(rng.IntN(4))
				off := uint64(rng.IntN(64)) * 4096
				switch r := rng.IntN(100); {
				case r < 60:
					if b, ok := c.Get(id, fn, off); ok {
						checkBlock(t, b, id, fn, off)
					}
				case r < 98:
					c.Set(id, fn, off, makeBlock(id, fn, off, 24+rng.IntN(8192)))
				case r < 99:
					c.EvictFile(id, fn)
				default:
					if m := c.Metrics(); m.Size > m.Capacity {
						t.Errorf("size %d > capacity %d", m.Size, m.Capacity)
					}
				}
			}
		}(g)
	}
	wg.Wait()
	checkInvariants(t, c)
}

func BenchmarkGetParallel(b *testing.B) {
	for _, blocks := range []int{1 << 10, 1 << 14} {
		b.Run(fmt.Sprintf("blocks=%d", blocks), func(b *testing.B) {
			c := New(int64(blocks) * (4096 + EntryOverhead) * 2)
			for i := 0; i < blocks; i++ {
				c.Set(1, base.FileNum(i%16), uint64(i)*4096, make([]byte, 4096))
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
				for pb.Next() {
					i := rng.IntN(blocks)
					if _, ok := c.Get(1, base.FileNum(i%16), uint64(i)*4096); !ok {
						b.Fatal("miss")
					}
				}
			})
		})
	}
}

func BenchmarkSet(b *testing.B) {
	c := New(64 << 20)
	block := make([]byte, 4096)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.Set(1, base.FileNum(i%16), uint64(i)*4096, block)
	}
}

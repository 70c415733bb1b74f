package blob

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// cacheKey names one record of one cache user's blob file.
type cacheKey struct {
	id      uint64
	fileNum base.FileNum
	offset  uint64
}

// cacheEntry is one cached, verified record.
type cacheEntry struct {
	key cacheKey
	// hash is key's hash (shardFor); next links the entry's bucket chain
	// in its shard's table (see entryTable).
	hash uint64
	next atomic.Pointer[cacheEntry]
	buf  *buffer
	// value is the record's value: a view of buf.b.
	value []byte
	// charge is what the entry costs its shard: the buffer's chunk.
	charge int64
	// refs counts the cache (one, while the entry is in its shard) and
	// every Handle. The buffer is freed when it reaches zero; a lookup
	// takes a reference only while refs > 0, so a freed entry is never
	// handed out.
	refs atomic.Int32
	// visited is CLOCK's reference bit: set on a hit, cleared by the hand.
	visited atomic.Bool
	// ringIdx is the entry's position in its shard's ring.
	// Guarded by the shard's mu.
	ringIdx int
}

// entryTable is a shard's hash table: chains of entries whose heads and
// links are atomic pointers, so that a lookup reads it without a lock
// while the shard's mutex serializes every change. It replaced a sync.Map,
// whose lookup (an interface key hashed by the runtime, a trie walk) was
// 15% of seekrandom's CPU with key-value separation on.
//
// Changes keep every chain acyclic at every moment and never link an
// entry where another key's lookup would take it for its own (a lookup
// compares the whole key), so a concurrent lookup always ends and finds
// either the right entry or none; the only thing it can see is a miss of
// an entry being moved by a resize, which costs that read a record read
// and an Insert that finds the entry, never a wrong value.
type entryTable struct {
	buckets []atomic.Pointer[cacheEntry]
	mask    uint64
}

func newEntryTable(n int) *entryTable {
	size := 64
	for size < n {
		size *= 2
	}
	return &entryTable{buckets: make([]atomic.Pointer[cacheEntry], size), mask: uint64(size - 1)}
}

// get returns the entry of k, or nil. It takes no lock.
func (t *entryTable) get(k cacheKey, h uint64) *cacheEntry {
	for e := t.buckets[(h>>32)&t.mask].Load(); e != nil; e = e.next.Load() {
		if e.hash == h && e.key == k {
			return e
		}
	}
	return nil
}

type cacheShard struct {
	// table is read without mu (the hit path); changed with mu held.
	table atomic.Pointer[entryTable]

	mu sync.Mutex
	// The fields below are guarded by mu.

	// ring holds the shard's entries in CLOCK order (and is the table's
	// count); hand is the next to consider. Invariant: size <= capacity
	// whenever mu is not held.
	ring     []*cacheEntry
	hand     int
	size     int64
	capacity int64

	// locks counts acquisitions of mu, to prove the hit path takes none.
	locks atomic.Int64
	_     [64]byte
}

func (s *cacheShard) lock() {
	s.locks.Add(1)
	s.mu.Lock()
}

// Cache is the blob cache: a sharded, byte-bounded CLOCK cache of verified
// blob records whose memory is off the Go heap (see doc.go). It is safe for
// concurrent use. A nil *Cache caches nothing.
type Cache struct {
	shards   []cacheShard
	mask     uint64
	alloc    *allocator
	capacity int64
	nextID   atomic.Uint64

	hits, misses atomic.Int64
}

// CacheMetrics describe a blob cache at one moment.
type CacheMetrics struct {
	// Size is the total charge of cached records; Capacity the budget.
	Size, Capacity int64
	Count          int64
	Hits, Misses   int64
	// MappedBytes is the memory the cache's allocator holds from the
	// operating system; Outstanding counts buffers in use (cached or
	// held by a Handle).
	MappedBytes, Outstanding int64
	// Locks counts shard mutex acquisitions (inserts, evictions); hits
	// take none.
	Locks int64
}

// NewCache returns a blob cache of capacityBytes. A capacity <= 0 caches
// nothing (reads still go through the allocator and are released at once).
func NewCache(capacityBytes int64) *Cache {
	n := 16
	for n > 1 && capacityBytes/int64(n) < 4<<20 {
		n /= 2
	}
	c := &Cache{shards: make([]cacheShard, n), mask: uint64(n - 1), alloc: newAllocator(), capacity: max(capacityBytes, 0)}
	for i := range c.shards {
		c.shards[i].capacity = c.capacity / int64(n)
		c.shards[i].table.Store(newEntryTable(int(c.shards[i].capacity / (4 << 10))))
	}
	return c
}

// lookup returns the entry of k (hash h), or nil. It takes no lock.
func (s *cacheShard) lookup(k cacheKey, h uint64) *cacheEntry {
	return s.table.Load().get(k, h)
}

// insertLocked links e, whose key is not in the table, into it, doubling
// the table when it holds more entries than buckets.
// REQUIRES: s.mu held.
func (s *cacheShard) insertLocked(e *cacheEntry) {
	t := s.table.Load()
	if len(s.ring) >= len(t.buckets) {
		t = s.growLocked(t)
	}
	b := &t.buckets[(e.hash>>32)&t.mask]
	e.next.Store(b.Load())
	b.Store(e)
}

// growLocked moves every entry to a table twice t's size and publishes it.
// Entries are moved one at a time onto the new table's chains, which only
// ever point at entries already moved, so every chain stays acyclic; a
// lookup that still walks t may miss a moved entry (see entryTable).
// REQUIRES: s.mu held.
func (s *cacheShard) growLocked(t *entryTable) *entryTable {
	nt := newEntryTable(2 * len(t.buckets))
	for i := range t.buckets {
		e := t.buckets[i].Load()
		for e != nil {
			next := e.next.Load()
			b := &nt.buckets[(e.hash>>32)&nt.mask]
			e.next.Store(b.Load())
			b.Store(e)
			e = next
		}
	}
	s.table.Store(nt)
	return nt
}

// unlinkLocked takes x out of the table. x keeps its next link, so a
// lookup standing on it goes on down the chain.
// REQUIRES: s.mu held.
func (s *cacheShard) unlinkLocked(x *cacheEntry) {
	t := s.table.Load()
	p := &t.buckets[(x.hash>>32)&t.mask]
	for e := p.Load(); e != nil; e = e.next.Load() {
		if e == x {
			p.Store(x.next.Load())
			return
		}
		p = &e.next
	}
}

// NewID returns an id, unique within c, that a user puts in its keys.
func (c *Cache) NewID() uint64 { return c.nextID.Add(1) }

// hash returns k's hash: its low bits pick the shard, its high 32 the
// bucket in the shard's table.
func hash(k cacheKey) uint64 {
	h := k.id*0x9e3779b97f4a7c15 ^ uint64(k.fileNum)*0xc2b2ae3d27d4eb4f ^ k.offset*0x165667b19e3779f9
	h ^= h >> 31
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 29
	return h
}

// Handle is a reference to a verified value. Value is valid until Release;
// the memory is off the Go heap and is reused after the last release, so
// the caller must copy what it keeps. A zero Handle is empty.
//
// A Handle is a reference to a cache entry or (ViewHandle) a view of a
// verified record in memory the caller owns, with nothing to release.
type Handle struct {
	e     *cacheEntry
	alloc *allocator
	// rec and value are a ViewHandle's record and value.
	rec, value []byte
}

// ViewHandle returns a handle on the verified record rec whose value is
// rec[valStart:valStart+valLen], not cached: its memory stays the
// caller's, valid as long as the caller keeps it; Release does nothing.
// An iterator's readahead buffer hands out values this way.
func ViewHandle(rec []byte, valStart, valLen int) Handle {
	return Handle{rec: rec, value: rec[valStart : valStart+valLen : valStart+valLen]}
}

// Value returns the value, a view valid until Release.
func (h Handle) Value() []byte {
	if h.e == nil {
		return h.value
	}
	return h.e.value
}

// Record returns the whole verified record the value belongs to (lengths,
// key, value, CRC), or its decoded form if its file is compressed (see
// DecodeRecord), a view valid until Release. RecordKey and StoredLen work
// on either.
func (h Handle) Record() []byte {
	if h.e == nil {
		return h.rec
	}
	return h.e.buf.b
}

// Release drops the handle's reference. Call it exactly once.
func (h Handle) Release() {
	if h.e != nil && h.e.refs.Add(-1) == 0 {
		h.alloc.free(h.e.buf)
	}
}

// Get looks the record at (fileNum, offset) up. On a hit it takes no
// mutex: atomic loads down a chain of the shard's table, a
// compare-and-swap on the entry's reference count and an atomic store of
// its CLOCK bit.
func (c *Cache) Get(id uint64, fileNum base.FileNum, offset uint64) (Handle, bool) {
	if c == nil {
		return Handle{}, false
	}
	k := cacheKey{id, fileNum, offset}
	h := hash(k)
	if e := c.shards[h&c.mask].lookup(k, h); e != nil {
		for {
			r := e.refs.Load()
			if r <= 0 {
				break // being freed: a miss
			}
			if e.refs.CompareAndSwap(r, r+1) {
				if !e.visited.Load() {
					e.visited.Store(true)
				}
				c.hits.Add(1)
				return Handle{e: e, alloc: c.alloc}, true
			}
		}
	}
	c.misses.Add(1)
	return Handle{}, false
}

// Buffer is memory from the cache's allocator that a miss reads a record
// into before Insert takes it.
type Buffer struct{ buf *buffer }

// Bytes returns the buffer's memory (off the Go heap).
func (b Buffer) Bytes() []byte { return b.buf.b }

// Alloc returns a buffer of n bytes. The caller passes it to Insert or
// Free.
func (c *Cache) Alloc(n int) (Buffer, error) {
	buf, err := c.alloc.alloc(n)
	if err != nil {
		return Buffer{}, err
	}
	return Buffer{buf}, nil
}

// Free returns a buffer that will not be inserted.
func (c *Cache) Free(b Buffer) { c.alloc.free(b.buf) }

// Insert takes ownership of b, which holds a verified record whose value
// is b.Bytes()[valStart:valStart+valLen], caches it under (fileNum,
// offset) and returns a handle to it. If the key is cached already (a
// concurrent miss won), b is freed and the cached entry returned. A record
// larger than a shard is not cached; the handle still works.
func (c *Cache) Insert(id uint64, fileNum base.FileNum, offset uint64, b Buffer, valStart, valLen int) Handle {
	k := cacheKey{id, fileNum, offset}
	h := hash(k)
	e := &cacheEntry{
		key:    k,
		hash:   h,
		buf:    b.buf,
		value:  b.buf.b[valStart : valStart+valLen : valStart+valLen],
		charge: int64(cap(b.buf.b)) + 96,
	}
	e.refs.Store(2) // the cache's and the handle's
	s := &c.shards[h&c.mask]
	s.lock()
	if e.charge > s.capacity {
		s.mu.Unlock()
		e.refs.Store(1)
		return Handle{e: e, alloc: c.alloc}
	}
	if old := s.lookup(k, h); old != nil {
		old.refs.Add(1) // the cache holds one, so old is live
		s.mu.Unlock()
		c.alloc.free(b.buf)
		return Handle{e: old, alloc: c.alloc}
	}
	var victims []*cacheEntry
	for s.size+e.charge > s.capacity && len(s.ring) > 0 {
		if s.hand >= len(s.ring) {
			s.hand = 0
		}
		x := s.ring[s.hand]
		if x.visited.Load() {
			x.visited.Store(false)
			s.hand++
			continue
		}
		s.removeLocked(x)
		victims = append(victims, x)
	}
	s.insertLocked(e)
	e.ringIdx = len(s.ring)
	s.ring = append(s.ring, e)
	s.size += e.charge
	s.mu.Unlock()
	for _, x := range victims {
		c.release(x)
	}
	return Handle{e: e, alloc: c.alloc}
}

// removeLocked takes x out of the shard; the caller drops the cache's
// reference afterwards.
// REQUIRES: s.mu held.
func (s *cacheShard) removeLocked(x *cacheEntry) {
	s.unlinkLocked(x)
	last := len(s.ring) - 1
	s.ring[x.ringIdx] = s.ring[last]
	s.ring[x.ringIdx].ringIdx = x.ringIdx
	s.ring[last] = nil
	s.ring = s.ring[:last]
	s.size -= x.charge
}

func (c *Cache) release(e *cacheEntry) {
	if e.refs.Add(-1) == 0 {
		c.alloc.free(e.buf)
	}
}

// EvictFile drops every cached record of (id, fileNum): the engine calls
// it when it deletes the file. Handles still out stay valid.
func (c *Cache) EvictFile(id uint64, fileNum base.FileNum) {
	if c == nil {
		return
	}
	for i := range c.shards {
		s := &c.shards[i]
		var victims []*cacheEntry
		s.lock()
		for j := 0; j < len(s.ring); {
			x := s.ring[j]
			if x.key.id == id && x.key.fileNum == fileNum {
				s.removeLocked(x)
				victims = append(victims, x)
				continue
			}
			j++
		}
		s.mu.Unlock()
		for _, x := range victims {
			c.release(x)
		}
	}
}

// EvictAll drops every cached record of id (a DB closing that shares
// the cache).
func (c *Cache) EvictAll(id uint64) {
	if c == nil {
		return
	}
	for i := range c.shards {
		s := &c.shards[i]
		var victims []*cacheEntry
		s.lock()
		for j := 0; j < len(s.ring); {
			x := s.ring[j]
			if x.key.id == id {
				s.removeLocked(x)
				victims = append(victims, x)
				continue
			}
			j++
		}
		s.mu.Unlock()
		for _, x := range victims {
			c.release(x)
		}
	}
}

// Metrics returns the cache's counters.
func (c *Cache) Metrics() CacheMetrics {
	if c == nil {
		return CacheMetrics{}
	}
	m := CacheMetrics{Capacity: c.capacity, Hits: c.hits.Load(), Misses: c.misses.Load()}
	for i := range c.shards {
		s := &c.shards[i]
		m.Locks += s.locks.Load()
		s.mu.Lock()
		m.Size += s.size
		m.Count += int64(len(s.ring))
		s.mu.Unlock()
	}
	m.MappedBytes, m.Outstanding = c.alloc.stats()
	return m
}

// Locks returns the number of shard mutex acquisitions so far.
func (c *Cache) Locks() int64 {
	var n int64
	for i := range c.shards {
		n += c.shards[i].locks.Load()
	}
	return n
}

// Close empties the cache and unmaps its memory. It fails, unmapping
// nothing, if a Handle or Buffer is still outstanding.
func (c *Cache) Close() error {
	if c == nil {
		return nil
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.lock()
		victims := s.ring
		s.ring = nil
		s.size = 0
		s.hand = 0
		for _, x := range victims {
			s.unlinkLocked(x)
		}
		s.mu.Unlock()
		for _, x := range victims {
			c.release(x)
		}
	}
	if err := c.alloc.close(); err != nil {
		return fmt.Errorf("blob: closing cache: %w", err)
	}
	return nil
}

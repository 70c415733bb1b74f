package cache

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

// EntryOverhead is the fixed number of bytes charged for each cached block on
// top of its capacity: the entry struct and its share of the shard's maps.
const EntryOverhead = int64(unsafe.Sizeof(entry{})) + 48

const (
	// minShards is the smallest shard count of a cache big enough to use it.
	minShards = 16
	// maxShards bounds the shard count whatever GOMAXPROCS says.
	maxShards = 1024
	// minShardBytes is the smallest per-shard capacity New aims for: a
	// small cache gets fewer shards rather than shards too small to hold a
	// few 4 KiB blocks.
	minShardBytes = 64 << 10
)

// key names one block.
type key struct {
	id      uint64
	fileNum uint64
	offset  uint64
}

// fileKey names one file of one cache user.
type fileKey struct {
	id      uint64
	fileNum uint64
}

// entry is one cached block. It sits on two intrusive circular lists: the
// shard's LRU list and the list of its file's entries.
type entry struct {
	key    key
	block  []byte
	charge int64
	// LRU list links; the shard's lru sentinel closes the ring.
	prev, next *entry
	// Links of the file's ring; the shard's files map points at one member.
	filePrev, fileNext *entry
}

// shard is an independent LRU cache over a slice of the key space.
type shard struct {
	mu sync.Mutex
	// The fields below are guarded by mu.

	// capacity is the shard's byte budget. Invariant: size <= capacity
	// whenever mu is not held.
	capacity int64
	size     int64
	entries  map[key]*entry
	// files maps a file to one entry of its ring.
	files map[fileKey]*entry
	// lru is the sentinel of the LRU ring: lru.next is the most recently
	// used entry, lru.prev the least.
	lru          entry
	hits, misses int64

	// Keep neighbouring shards' mutexes off one cache line.
	_ [64]byte
}

// Cache is a sharded LRU block cache. It is safe for concurrent use.
type Cache struct {
	shards []shard
	// shift is 64 - log2(len(shards)): a key's shard is mix(key) >> shift.
	shift    uint
	capacity int64
	nextID   atomic.Uint64
}

// Metrics describe a cache at one moment.
type Metrics struct {
	// Size is the total charge of the cached blocks, in bytes.
	Size int64
	// Capacity is the byte budget given to New.
	Capacity int64
	// Count is the number of cached blocks.
	Count int64
	// Hits and Misses count Get calls since New.
	Hits, Misses int64
}

// New returns a cache holding at most capacityBytes bytes of blocks (each
// charged cap(block) + EntryOverhead). A capacity <= 0 caches nothing.
func New(capacityBytes int64) *Cache {
	n := minShards
	if want := 4 * runtime.GOMAXPROCS(0); want > n {
		n = 1 << bits.Len(uint(want-1)) // Round up to a power of two.
	}
	n = min(n, maxShards)
	for n > 1 && capacityBytes/int64(n) < minShardBytes {
		n /= 2
	}
	return newWithShards(capacityBytes, n)
}

// newWithShards returns a cache with n shards; n must be a power of two.
func newWithShards(capacityBytes int64, n int) *Cache {
	if n <= 0 || n&(n-1) != 0 {
		panic("cache: shard count must be a power of two")
	}
	capacityBytes = max(capacityBytes, 0)
	c := &Cache{
		shards:   make([]shard, n),
		shift:    uint(64 - bits.TrailingZeros(uint(n))),
		capacity: capacityBytes,
	}
	// Each shard gets an equal part; the parts add up to at most capacity.
	per := capacityBytes / int64(n)
	for i := range c.shards {
		s := &c.shards[i]
		s.capacity = per
		s.entries = make(map[key]*entry)
		s.files = make(map[fileKey]*entry)
		s.lru.next, s.lru.prev = &s.lru, &s.lru
	}
	return c
}

// NewID returns an id, unique within c, that a cache user (a DB, a set of
// tables) puts in its keys so that its blocks never collide with another
// user's. Ids start at 1.
func (c *Cache) NewID() uint64 {
	if c == nil {
		return 0
	}
	return c.nextID.Add(1)
}

// shardFor returns the shard of k. The three words are mixed by
// multiplication with odd constants; the high bits of the product depend on
// every input bit, including the high bits of block offsets whose low bits
// are mostly equal.
func (c *Cache) shardFor(k key) *shard {
	h := k.id*0x9e3779b97f4a7c15 ^ k.fileNum*0xc2b2ae3d27d4eb4f ^ k.offset*0x165667b19e3779f9
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	// With one shard the shift is 64 and Go's shift yields 0.
	return &c.shards[h>>c.shift]
}

// Get returns the block cached under (id, fileNum, offset). The block must not
// be modified. A hit does not allocate.
func (c *Cache) Get(id uint64, fileNum base.FileNum, offset uint64) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	k := key{id: id, fileNum: uint64(fileNum), offset: offset}
	s := c.shardFor(k)
	s.mu.Lock()
	e := s.entries[k]
	if e == nil {
		s.misses++
		s.mu.Unlock()
		return nil, false
	}
	s.hits++
	s.moveToFrontLocked(e)
	b := e.block
	s.mu.Unlock()
	return b, true
}

// Set caches block under (id, fileNum, offset), replacing any block cached
// there, and evicts least recently used blocks of the same shard to stay
// within capacity. The cache keeps block as given: the caller must not modify
// it afterwards. A block whose charge exceeds a shard's capacity is not
// cached.
func (c *Cache) Set(id uint64, fileNum base.FileNum, offset uint64, block []byte) {
	if c == nil {
		return
	}
	k := key{id: id, fileNum: uint64(fileNum), offset: offset}
	charge := int64(cap(block)) + EntryOverhead
	s := c.shardFor(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[k]; e != nil {
		s.removeLocked(e)
	}
	if charge > s.capacity {
		return
	}
	e := &entry{key: k, block: block, charge: charge}
	s.entries[k] = e
	s.size += charge
	s.pushFrontLocked(e)
	fk := fileKey{id: id, fileNum: uint64(fileNum)}
	if head := s.files[fk]; head != nil {
		e.filePrev, e.fileNext = head.filePrev, head
		head.filePrev.fileNext = e
		head.filePrev = e
	} else {
		e.filePrev, e.fileNext = e, e
		s.files[fk] = e
	}
	for s.size > s.capacity {
		s.removeLocked(s.lru.prev)
	}
}

// EvictFile drops every block of (id, fileNum). Readers still holding one of
// them keep a valid slice.
func (c *Cache) EvictFile(id uint64, fileNum base.FileNum) {
	if c == nil {
		return
	}
	fk := fileKey{id: id, fileNum: uint64(fileNum)}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for e := s.files[fk]; e != nil; e = s.files[fk] {
			s.removeLocked(e)
		}
		s.mu.Unlock()
	}
}

// Metrics returns the cache's size and counters. Shards are read one at a
// time, so under concurrent use the sums are not one atomic snapshot.
func (c *Cache) Metrics() Metrics {
	if c == nil {
		return Metrics{}
	}
	m := Metrics{Capacity: c.capacity}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		m.Size += s.size
		m.Count += int64(len(s.entries))
		m.Hits += s.hits
		m.Misses += s.misses
		s.mu.Unlock()
	}
	return m
}

// pushFrontLocked links e at the front of the LRU ring.
// REQUIRES: s.mu held; e is not linked.
func (s *shard) pushFrontLocked(e *entry) {
	e.prev, e.next = &s.lru, s.lru.next
	e.next.prev = e
	s.lru.next = e
}

// moveToFrontLocked marks e as the most recently used entry.
// REQUIRES: s.mu held; e is in the shard.
func (s *shard) moveToFrontLocked(e *entry) {
	if s.lru.next == e {
		return
	}
	e.prev.next, e.next.prev = e.next, e.prev
	s.pushFrontLocked(e)
}

// removeLocked unlinks e from the LRU ring, its file's ring and the maps.
// REQUIRES: s.mu held; e is in the shard.
func (s *shard) removeLocked(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil

	fk := fileKey{id: e.key.id, fileNum: e.key.fileNum}
	if e.fileNext == e {
		delete(s.files, fk)
	} else {
		e.filePrev.fileNext, e.fileNext.filePrev = e.fileNext, e.filePrev
		if s.files[fk] == e {
			s.files[fk] = e.fileNext
		}
	}
	e.filePrev, e.fileNext = nil, nil

	delete(s.entries, e.key)
	s.size -= e.charge
}

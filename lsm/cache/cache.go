package cache

import (
	"fmt"
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
	key key
	// buf holds the block (buf.b); a is the allocator it came from.
	buf    *buffer
	a      *allocator
	charge int64
	// refs counts the cache's reference (one, while the entry is in its
	// shard) and every Handle's. buf is freed when it drops to zero.
	// Invariant: an entry in a shard has refs >= 1, and a reference is
	// only taken on an entry found in its shard with the shard's mu held,
	// so a count never rises from zero: freed memory is never handed out.
	refs atomic.Int32
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

// Cache is a sharded LRU block cache whose blocks live off the Go heap,
// reference counted (see doc.go). It is safe for concurrent use.
type Cache struct {
	shards []shard
	// shift is 64 - log2(len(shards)): a key's shard is mix(key) >> shift.
	shift    uint
	capacity int64
	nextID   atomic.Uint64
	// alloc holds the blocks' memory, off the Go heap.
	alloc *allocator
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
	// MappedBytes is the memory the cache holds from the operating system
	// (off the Go heap); LiveBytes the part of it holding blocks, cached
	// or pinned by handles after their eviction; Buffers counts those
	// blocks.
	MappedBytes, LiveBytes, Buffers int64
	// Pinned counts the references handles hold on cached blocks, plus
	// the blocks outside the cache still held (by handles after their
	// eviction, or as Buffers not yet inserted), each once. It is zero
	// if and only if no Handle or Buffer is outstanding.
	Pinned int64
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
		alloc:    newAllocator(),
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

// Handle is a reference to a block: Value is valid until Release, which the
// holder calls exactly once. The block's memory is off the Go heap and is
// reused after the last reference goes (the cache's, dropped when it
// evicts the block, or a Handle's), so a view of it must not outlive the
// Handle. A zero Handle is empty; a Handle of a block that is not in a
// cache's memory (Unmanaged) has nothing to release.
type Handle struct {
	e *entry
	b []byte
}

// Unmanaged returns a Handle on b, memory the Go heap owns (a block read
// with no cache). Release does nothing.
func Unmanaged(b []byte) Handle { return Handle{b: b} }

// Value returns the block, a view valid until Release. It must not be
// modified.
func (h Handle) Value() []byte { return h.b }

// Release drops the handle's reference. Call it exactly once per Handle
// (copies included); releasing a zero Handle does nothing.
func (h Handle) Release() {
	if h.e != nil {
		h.e.release()
	}
}

// release drops one reference to e and frees its block with the last.
func (e *entry) release() {
	switch n := e.refs.Add(-1); {
	case n == 0:
		e.a.free(e.buf)
	case n < 0:
		panic("cache: block released more often than referenced") // a broken invariant, not disk bytes
	}
}

// Buffer is memory for a block read on a miss, before Insert takes it:
// off the Go heap for a cache, on it for a nil cache. A zero Buffer is
// empty.
type Buffer struct {
	buf *buffer
	b   []byte
}

// Bytes returns the buffer's memory: len is the size asked of Alloc.
func (b Buffer) Bytes() []byte { return b.b }

// Alloc returns a buffer of n > 0 bytes. The caller fills it and passes it
// to Insert, or to Free. A nil cache returns memory of the Go heap.
func (c *Cache) Alloc(n int) (Buffer, error) {
	if c == nil {
		b := make([]byte, n)
		return Buffer{b: b}, nil
	}
	buf, err := c.alloc.alloc(n)
	if err != nil {
		return Buffer{}, err
	}
	return Buffer{buf: buf, b: buf.b}, nil
}

// Free returns a buffer that will not be inserted.
func (c *Cache) Free(b Buffer) {
	if b.buf != nil {
		c.alloc.free(b.buf)
	}
}

// Get returns a handle on the block cached under (id, fileNum, offset). The
// block must not be modified. A hit does not allocate.
func (c *Cache) Get(id uint64, fileNum base.FileNum, offset uint64) (Handle, bool) {
	if c == nil {
		return Handle{}, false
	}
	k := key{id: id, fileNum: uint64(fileNum), offset: offset}
	s := c.shardFor(k)
	s.mu.Lock()
	e := s.entries[k]
	if e == nil {
		s.misses++
		s.mu.Unlock()
		return Handle{}, false
	}
	s.hits++
	e.refs.Add(1) // e is in the shard: refs >= 1 (see entry.refs)
	s.moveToFrontLocked(e)
	s.mu.Unlock()
	return Handle{e: e, b: e.buf.b}, true
}

// Insert takes ownership of b, which holds the block of (id, fileNum,
// offset), caches it, evicting least recently used blocks of the same shard
// to stay within capacity, and returns a handle on it. If the key is cached
// already (a concurrent miss read the same block first), b is freed and
// the cached block returned: a table's blocks never change. A block whose
// charge (cap(b.Bytes()) + EntryOverhead) exceeds a shard's capacity is not
// cached; its handle works the same and frees it on Release. The caller
// must not modify the block afterwards.
func (c *Cache) Insert(id uint64, fileNum base.FileNum, offset uint64, b Buffer) Handle {
	if b.buf == nil {
		return Handle{b: b.b} // The Go heap's (a nil cache).
	}
	k := key{id: id, fileNum: uint64(fileNum), offset: offset}
	e := &entry{key: k, buf: b.buf, a: c.alloc, charge: int64(cap(b.buf.b)) + EntryOverhead}
	s := c.shardFor(k)
	s.mu.Lock()
	if old := s.entries[k]; old != nil {
		old.refs.Add(1)
		s.moveToFrontLocked(old)
		s.mu.Unlock()
		c.alloc.free(b.buf)
		return Handle{e: old, b: old.buf.b}
	}
	if e.charge > s.capacity {
		s.mu.Unlock()
		e.refs.Store(1) // The handle's only.
		return Handle{e: e, b: e.buf.b}
	}
	e.refs.Store(2) // The cache's and the handle's.
	s.entries[k] = e
	s.size += e.charge
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
	var stack [8]*entry
	victims := stack[:0]
	for s.size > s.capacity {
		x := s.lru.prev
		s.removeLocked(x)
		victims = append(victims, x)
	}
	s.mu.Unlock()
	for _, x := range victims {
		x.release()
	}
	return Handle{e: e, b: e.buf.b}
}

// EvictFile drops every block of (id, fileNum). Handles still out keep
// their block until they are released.
func (c *Cache) EvictFile(id uint64, fileNum base.FileNum) {
	if c == nil {
		return
	}
	fk := fileKey{id: id, fileNum: uint64(fileNum)}
	for i := range c.shards {
		s := &c.shards[i]
		var victims []*entry
		s.mu.Lock()
		for e := s.files[fk]; e != nil; e = s.files[fk] {
			s.removeLocked(e)
			victims = append(victims, e)
		}
		s.mu.Unlock()
		for _, x := range victims {
			x.release()
		}
	}
}

// EvictAll drops every block of id, all (id 0) blocks: a DB that shares
// the cache calls it when it closes. Handles still out keep their block
// until they are released.
func (c *Cache) EvictAll(id uint64) {
	if c == nil {
		return
	}
	for i := range c.shards {
		s := &c.shards[i]
		var victims []*entry
		s.mu.Lock()
		for e := s.lru.next; e != &s.lru; {
			next := e.next
			if id == 0 || e.key.id == id {
				s.removeLocked(e)
				victims = append(victims, e)
			}
			e = next
		}
		s.mu.Unlock()
		for _, x := range victims {
			x.release()
		}
	}
}

// Close empties the cache and unmaps its memory. Only the cache's creator
// calls it, once every user (every DB given it as Options.Cache) is
// closed. It fails with a *LeakError, unmapping nothing, if a Handle or a
// Buffer is still outstanding: unmapping memory a reader still views would
// turn a leak into a crash. After Close every Get misses and Alloc fails.
func (c *Cache) Close() error {
	if c == nil {
		return nil
	}
	c.EvictAll(0)
	if err := c.alloc.close(); err != nil {
		return fmt.Errorf("cache: closing the block cache: %w", err)
	}
	return nil
}

// LeakError reports the blocks still referenced when a cache is closed.
type LeakError struct {
	// Buffers is the number of blocks still referenced, Bytes their
	// memory.
	Buffers, Bytes int64
}

func (e *LeakError) Error() string {
	return fmt.Sprintf("%d blocks (%d bytes) still referenced: leaked handles", e.Buffers, e.Bytes)
}

// Metrics returns the cache's size and counters. Shards are read one at a
// time, so under concurrent use the sums are not one atomic snapshot. It
// walks every cached entry (for Pinned): O(blocks), for monitoring, not
// for a hot path.
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
		for e := s.lru.next; e != &s.lru; e = e.next {
			m.Pinned += int64(e.refs.Load() - 1)
		}
		s.mu.Unlock()
	}
	st := c.alloc.stats()
	m.MappedBytes, m.LiveBytes, m.Buffers = st.mappedBytes, st.liveBytes, st.outstanding
	// Buffers not in the cache are held by handles (or not yet inserted).
	m.Pinned += m.Buffers - m.Count
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

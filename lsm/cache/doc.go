// Package cache is the engine's block cache: one byte budget shared by every
// SST reader of every DB that holds the same *Cache.
//
// # Keys
//
// A block is named by (id, file number, offset). The id comes from
// Cache.NewID and tells apart the users of one cache: each DB (or each
// independent set of tables) takes its own id, so two DBs whose file numbers
// collide never see each other's blocks. The file number and the offset of
// the block's handle within its file complete the key.
//
// # Structure
//
// The cache is split into a power-of-two number of shards (at least 16 and at
// least 4·GOMAXPROCS, fewer for very small caches so that a shard still holds
// several 4 KiB blocks). A key's shard is chosen from the high bits of a
// multiplicative mix of its three words, so that neighbouring offsets of one
// file spread over all shards. Each shard owns capacity/numShards bytes, its
// own mutex, a map from key to entry, an LRU list (most recently used at the
// front) and, per (id, file number), a list of that file's entries so that
// EvictFile costs O(entries of the file), not O(cache).
//
// An entry is charged cap(block) + EntryOverhead bytes: the memory it really
// pins. A shard evicts from the back of its LRU list until it is within its
// capacity; a block whose charge alone exceeds the shard's capacity is not
// cached at all.
//
// # Memory and lifetimes
//
// Block memory lives off the Go heap: the allocator (alloc.go) carves
// chunks of size classes 1/16 apart out of 2 MiB slabs mapped with mmap
// (huge pages where Linux has them; the Go heap on systems without mmap).
// The cache's bytes are therefore neither doubled by the garbage
// collector's headroom (GOGC) nor scanned, and an evicted block is not
// garbage: its chunk is reused by the next miss. An entry is charged
// cap(block) + EntryOverhead, where cap is the chunk: the memory it really
// pins.
//
// Blocks are reference counted. A miss asks Alloc for a Buffer, reads and
// verifies the block into it, and Insert caches it and returns a Handle; a
// hit's Get returns a Handle. Either pins the block until Release, however
// the cache evicts it meanwhile (LRU, EvictFile, EvictAll): eviction only
// unlinks the entry and drops the cache's own reference, and the chunk is
// freed with the last reference. A Handle is taken only on an entry found
// in its shard under the shard's mutex, where the cache's reference keeps
// the count at one or more, so freed memory is never handed out. A view of
// a block must not outlive its Handle's Release: sst iterators hold the
// handle of their current block until they move off it or close, point
// lookups return the handle with the value (the engine releases it once it
// has copied or used the value). Builds with the invariants or race tags
// fill freed chunks with 0xdb, so that a view kept too long reads garbage
// that fails loudly rather than a plausible stale block; releasing a
// handle twice panics when the count goes negative.
//
// # Ownership and leaks
//
// Whoever calls New owns the cache and calls Close once every user is
// done: a DB that made its own cache (lsm.Options.Cache nil) closes it
// when it closes; a DB given a shared cache only evicts its own blocks
// (EvictAll of its id) and leaves the cache to its creator. Close unmaps
// the memory, or, if any Handle or Buffer is still outstanding, unmaps
// nothing and returns a *LeakError; Metrics reports the off-heap bytes
// (MappedBytes, LiveBytes) and the references outside the cache (Pinned)
// at any time. A cache dropped without Close has its memory unmapped by a
// cleanup once its allocator is unreachable, which every entry and Handle
// references.
//
// # Cost
//
// Get takes one shard mutex, does one map lookup with a fixed-size struct key,
// adds one to the entry's atomic reference count and moves the entry to the
// front of the LRU list; a hit does not allocate. Release is one atomic add
// (and the allocator's mutex when it frees).
// Hit and miss counters live in the shards (under their mutex), so parallel
// readers do not contend on a shared counter.
//
// A nil *Cache is valid and caches nothing.
package cache

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
// # Lifetimes
//
// Blocks are immutable []byte. The cache hands out the slice itself, not a
// copy and not a handle: a reader may keep using a block after the cache has
// evicted it (or after EvictFile), and the Go garbage collector keeps the
// bytes alive until the last reader drops them. There are therefore no
// reference counts and no Release call; the price is that memory pinned by
// readers of evicted blocks is not counted against the capacity. Callers must
// never modify a block they passed to Set or got from Get.
//
// # Cost
//
// Get takes one shard mutex, does one map lookup with a fixed-size struct key
// and moves the entry to the front of the LRU list; a hit does not allocate.
// Hit and miss counters live in the shards (under their mutex), so parallel
// readers do not contend on a shared counter.
//
// A nil *Cache is valid and caches nothing.
package cache

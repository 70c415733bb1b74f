// Package analyze reads a block-cache trace (package trace) and answers two
// questions: what did the workload access, and how would caches of other
// sizes and policies have done on it.
//
// # One pass
//
// Run reads the trace once, record by record, and never holds it: each
// record updates the statistics and is fed to every simulated cache (every
// policy at every size) before the next is read. Block keys are interned to
// dense 32-bit ids on first sight, so the memory is per distinct block, not
// per access: the interned key and a few words of statistics, plus, per
// simulated cache, 16 to 24 bytes (the simulators keep their per-block state
// in slices indexed by id, which is faster than maps and costs nothing per
// access). The reuse-distance tracker keeps a Fenwick tree over access
// positions that it compacts whenever it grows past twice the number of
// distinct blocks, so it too is O(distinct blocks).
//
// # Statistics
//
// Accesses and misses per block type, per caller and per level are the live
// cache's: a record with CacheHit false is a miss. The reuse distance of an
// access to a block seen before is given twice: in distinct blocks (the
// number of other distinct blocks accessed since the previous access to this
// one, the classic stack distance) and in bytes (the charge of those blocks
// plus this block's own: the smallest byte-bounded LRU cache, unsharded, that
// would have hit). Both are bucketed on a log2 scale.
//
// # Simulated caches
//
// Every cache is byte-bounded: a block costs Record.BlockSize plus
// Options.EntryOverhead (the engine's cache charges each block its bytes plus
// lsm/cache.EntryOverhead), and the key is Record.BlockKey. Policies:
//
//   - lru: evicts the least recently used block.
//   - clock: second chance (CLOCK) over a FIFO: a hit sets the block's
//     reference bit; eviction takes the oldest block, and one with its bit
//     set gets the bit cleared and goes back to the tail instead.
//   - s3fifo: S3-FIFO (Yang et al., SOSP 2023): a small FIFO of 10% of the
//     bytes admits new blocks; a block hit while in it moves to the main
//     FIFO (90%) when it leaves it, others leave a ghost entry behind (the
//     ghost queue remembers as many bytes as the main FIFO holds) and go
//     straight to the main FIFO if accessed again soon. The main FIFO gives
//     blocks with a hit count (0..3) one more round per hit.
//
// The simulators decide hits themselves: the live record's CacheHit flag is
// not used (the simulated cache of the live size is expected to agree with
// it, which is the accuracy check of this package's tests). A record with
// NoInsert set is a lookup that does not fill the cache on a miss (RocksDB's
// fill_cache=false); it still counts as an access and a hit refreshes the
// block as any hit does. A block whose size differs from the cached copy's
// is a hit, and its charge becomes the new size (evicting others if the
// cache is now over its budget). A block whose charge exceeds the whole
// cache is never cached, as in the engine. Options.Warmup accesses at the
// start of the trace go through the caches without being counted, to start
// the measurement with warm caches.
//
// The engine's cache is sharded (each of its 16 or more shards is an LRU of
// capacity/shards bytes); the simulators are not, which makes them slightly
// better than the engine on small caches.
package analyze

// Package trace records block-cache accesses of the engine (lsm) and
// replays them through simulated caches: RocksDB's block-cache tracer and
// analyzer, in Go.
package trace

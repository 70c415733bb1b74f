// Package trace records block-cache accesses of the engine (lsm) and
// replays them through simulated caches: RocksDB's block-cache tracer and
// analyzer, in Go.
//
// A Tracer (tracer.go) writes a trace between StartTrace and EndTrace: a
// header (engine version, start time) and one Record per block access the
// engine reports. Two formats read back through RecordReader: the binary
// one (format.go: length-prefixed, checksummed records; Writer, Reader) and
// a human-readable CSV one (human.go: HumanWriter, HumanReader). OpenFile
// tells them apart. A block key (blockkey.go) is the engine's cache key:
// (cache id, file number, offset).
//
// # What the engine records
//
// lsm reports, while a trace runs:
//
//   - every lookup of a data block in the block cache (sst.Reader), hit or
//     miss, by Get (with the get id, the user key, whether the key is in
//     the block, the block's key count and the referenced entry's size),
//     and by iterators (compactions read their inputs through read-ahead
//     readers of their own, outside the block cache, and make no record);
//   - every lookup of a blob record in the blob cache (BlockBlob, level
//     -1; cairn's blob cache caches records, so "block" is one record);
//   - the index, filter and range-deletion blocks of a table when the
//     table is opened: cairn pins them in the table reader and never puts
//     them in the block cache, so they are read once, at open (a miss,
//     Pinned, NoInsert, caller Flush: RocksDB's prefetch), and later uses
//     are memory reads that make no record. A cache simulator skips
//     Pinned records: they are not block-cache traffic.
//
// cairn has one keyspace: records carry column family 0, "default".
package trace

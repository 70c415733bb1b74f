// Package sst implements the engine's sorted string tables: an immutable file
// of point entries (internal key → value) and range tombstones, in the
// lineage of LevelDB's and RocksDB's block-based tables.
//
// # File layout
//
// All integers are little-endian; "uvarint" is encoding/binary's unsigned
// varint. A table is a sequence of blocks, each followed by its trailer, and
// a fixed-size footer:
//
//	+--------------------+  offset 0
//	| data block 0       |  point entries, ~BlockSize bytes before compression
//	| trailer            |
//	| data block 1       |
//	| trailer            |
//	| ...                |  data blocks are back to back from offset 0
//	| filter block       |  optional: blocked Bloom filter over point user keys
//	| trailer            |
//	| range-del block    |  optional: range tombstone fragments
//	| trailer            |
//	| index block        |  one entry per data block
//	| trailer            |
//	| properties block   |
//	| trailer            |
//	| metaindex block    |  names → handles of the meta blocks
//	| trailer            |
//	| footer (56 bytes)  |
//	+--------------------+  end of file
//
// A block handle is two uvarints, offset then length; the length counts the
// block's stored contents, not its 5-byte trailer:
//
//	+-----------------+-----------------+
//	| offset: uvarint | length: uvarint |   at most 20 bytes
//	+-----------------+-----------------+
//
// # Block trailer and compression
//
//	+-------------------------+-----------+------------------------------+
//	| contents (length bytes) | type (1B) | CRC32C(contents ‖ type) (4B) |
//	+-------------------------+-----------+------------------------------+
//
// type 0 stores the block as is. Types 1 (Snappy block format) and 2 (a
// Zstandard frame) store
//
//	+-------------------------------+-----------------------------+
//	| uncompressed length: uvarint  | codec output                |
//	+-------------------------------+-----------------------------+
//
// The CRC (Castagnoli, unmasked) covers the stored bytes, so damage is caught
// before decompression. A block is stored compressed only if that saves at
// least 1/8 of its size. Data, range-deletion, index and properties blocks
// are compressed with the table's algorithm; the filter and the metaindex
// never are.
//
// # Blocks
//
// Data, index, range-deletion, properties and metaindex blocks share one
// format: prefix-compressed entries, then an array of restart points.
//
//	+---------+---------+-----+-----------+-----------+-----+---------------+
//	| entry 0 | entry 1 | ... | restart 0 | restart 1 | ... | num restarts  |
//	+---------+---------+-----+-----------+-----------+-----+---------------+
//	                           uint32 each: offset of an entry   uint32
//
//	entry:
//	+-----------------+-------------------+------------------+--------------------+-------+
//	| shared: uvarint | unshared: uvarint | value len:uvarint| key[shared:]       | value |
//	+-----------------+-------------------+------------------+--------------------+-------+
//
// An entry's key is the previous entry's first shared bytes followed by
// its unshared bytes. Every BlockRestartInterval-th entry (default 16; 1 in
// index and meta blocks) is a restart point: it has shared = 0 and its
// offset is in the restart array, so a seek binary-searches the restart
// points and scans one interval. Keys strictly increase: by
// base.InternalCompare in data, index and range-deletion blocks, bytewise in
// the properties and metaindex blocks. An empty block is the four bytes of a
// zero restart count.
//
//   - Data block: key = encoded internal key of a SET, DEL or BLOBIDX entry
//     (user key ‖ seq<<8|kind as uint64 LE), value = the value.
//   - Index block: one entry per data block, in order, every entry a
//     restart point (interval 1; readers require it). key = a separator S
//     with last key of block i <= S < first key of block i+1 (the last
//     block's S is >= its last key), value = the block's handle. When it
//     can, the writer shortens S to a user key strictly between the two
//     blocks' user keys with the trailer (SeqNumMax, KindMax), as LevelDB's
//     FindShortestSeparator / FindShortSuccessor.
//   - Range-deletion block: key = start#seq,RANGEDEL, value = end, one entry
//     per fragment [start, end)@seq. Fragments are sorted by start then
//     seq descending and do not overlap unless they share start and end.
//   - Properties block: key = property name ("cairn.num.entries", ...; see
//     properties.go), value = a uvarint (the creation time: a zigzag varint;
//     the compression: its type byte). Readers ignore unknown names.
//   - Metaindex block: key = "filter", "properties" or "rangedel", value =
//     that block's handle. "properties" is required; readers ignore unknown
//     names.
//
// The filter block holds a lsm/filter blocked Bloom filter
// (filter.NewBlockedBuilder(FilterBitsPerKey)) over the distinct user keys of
// the point entries, hashed with filter.Hash; range tombstones are not in it.
// A table without point entries, or written with FilterBitsPerKey 0, has no
// filter block.
//
// # Footer
//
//	 0                                   40        44        48               56
//	+------------------------------------+---------+---------+----------------+
//	| metaindex handle, index handle,    | format  | CRC32C  | magic          |
//	| zero padding to 40 bytes           | version | of 0..44| "cairnSST"     |
//	+------------------------------------+---------+---------+----------------+
//
// Every format version keeps this 56-byte size and the last 16 bytes'
// meaning. A reader checks the magic first (a mismatch is a corruption: not
// a table, or truncated), then the footer CRC (corruption), then the version:
// an intact footer with a version other than FormatVersion (1) returns an
// error wrapping ErrUnknownFormatVersion that names the version, which is not
// a corruption.
//
// # Reading
//
// NewReader reads the footer and then the metaindex, properties, index,
// filter and range-deletion blocks; these are PINNED in the Reader's memory
// for its lifetime and never go through the block cache. Data blocks are
// read on demand through the block cache (lsm/cache), keyed by (cache id,
// file number, block offset): on a miss the block is read into a pooled
// scratch buffer, its CRC checked, decompressed (or copied) into a buffer
// of the cache's off-heap memory and verified, then inserted; the cache
// holds the decompressed contents.
//
// A cached block is reference counted (cache.Handle) and its memory is
// reused once the last reference goes, so every view of a data block is
// tied to a handle: a table iterator holds the handle of its current block
// until it moves to another block or closes (its keys and values are valid
// until its next positioning call, as base.InternalIterator says, and no
// longer), and Get returns the handle with the value for the caller to
// release once it has copied or used it. A Reader with no cache (a
// compaction's private reader) reads blocks onto the Go heap behind
// cache.Unmanaged handles that the garbage collector frees.
//
// Every block read from the file is verified whole before use
// (verifyBlock): checksum, restart array, entry bounds, restart points on
// entry boundaries with no shared prefix, valid keys of the block's kind,
// strictly increasing keys. A data block's keys must also lie above the
// previous block's separator and not above its own, so that keys increase
// across blocks too. The index's handles must tile the data region from
// offset 0 and agree with the properties. Any malformed byte therefore
// surfaces as an error for which base.IsCorruption is true, never as a wrong
// key or value and never as a panic; block iterators still bounds-check every
// decode. An iterator that meets an error becomes invalid with Error set,
// and stays so.
//
// Reader.Get probes the filter (if any) before touching the index, so a
// negative answer costs one cache line and no data block read. Get positions
// stack-allocated block iterators with a 256-byte inline key buffer, and so
// does not allocate when its data block is cached. The Reader keeps no
// filter counters (concurrent readers of a hot table would contend on them):
// a caller that counts filter usefulness calls MayContain itself.
//
// # Writing
//
// A Writer takes point entries in strictly increasing internal key order and
// range tombstone fragments in their own order, interleaved at will. A data
// block is cut once its uncompressed size reaches BlockSize; its index entry
// waits for the next key to choose a short separator. Finish writes the rest
// and the footer and reports the table's Metadata; it neither syncs nor
// closes the file.
package sst

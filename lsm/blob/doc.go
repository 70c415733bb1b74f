// Package blob implements key-value separation's storage: blob files that
// hold large values out of the LSM, the blob index that the LSM keeps in
// their place, a blob cache whose memory lives off the Go heap, and a
// bounded cache of open blob file readers.
//
// # Blob file layout
//
// All integers are little-endian. A blob file is a header, records back to
// back, and a fixed-size footer:
//
//	+-------------------------+  offset 0
//	| header (16 bytes)       |
//	+-------------------------+  offset 16
//	| record 0                |
//	| record 1                |
//	| ...                     |
//	+-------------------------+  offset DataEnd
//	| footer (32 bytes)       |
//	+-------------------------+  end of file
//
// Header:
//
//	+----------------------+-------------+-----------------+--------------+---------------------------+
//	| magic "cairnblb" (8) | version (1) | compression (1) | reserved (2) | CRC32C of bytes 0..11 (4) |
//	+----------------------+-------------+-----------------+--------------+---------------------------+
//
// version is 2 (written since records of a compressed file may be stored
// raw, see the record's flag below); a reader reads versions 1 and 2 the
// same way (no version 1 file sets the flag) and refuses any other, so a
// reader older than the flag refuses a file that may hold one instead of
// misreading it. compression is the algorithm of the file's values (one
// per file, chosen by lsm.Options.BlobCompression when the file is
// written):
//
//	0  none:   the stored value is the value.
//	1  snappy: the stored value is the value in the Snappy block format
//	           (a uvarint of the value's length, then Snappy elements), as
//	           the tables' Snappy blocks hold it, without their length
//	           prefix, unless the record is flagged raw.
//
// A reader refuses a file that names any other value (it reports
// corruption rather than guess).
//
// Record, at the offset its blob index names:
//
//	+-----------------+-------------------+-----------------+---------------------+------------------------+
//	| key length (4)  | value length (4)  | key (key length)| stored value (value | CRC32C of all before(4)|
//	|                 |                   |                 | length)             |                        |
//	+-----------------+-------------------+-----------------+---------------------+------------------------+
//
// value length's bit 31 is the raw flag; its bits 0..30 are the stored
// value's length: compressed, in a compressed file, unless the flag is
// set. The flag says that the stored value is the value itself in a file
// whose compression is not none: the writer compresses each value and
// keeps the result only if it saves at least an eighth of the value
// (compressed < raw - raw/8, the rule RocksDB and Pebble apply to their
// blocks), else stores the value raw, so that a read of a value that does
// not compress (random, encrypted or already compressed data) decodes
// nothing. A record of a file of compression none never sets the flag (a
// reader reports one that does as corruption); no record of a version 1
// file sets it (lengths are below 2^30). The CRC (Castagnoli, unmasked)
// covers the two length fields (the flag with them), the key and
// the stored value, so damage is caught before anything is decoded; a
// stored value that passes the CRC and does not decode (to exactly the
// length its header promises, at most 22 times its own length, Snappy's
// densest) is corruption too. The key is the user key the value was
// written under: a read checks it against the key it looked up, so an
// index pointing at the wrong record is caught as corruption rather than
// returned as a wrong value, and blob GC can walk a file and learn each
// record's key without the LSM.
//
// Footer:
//
//	+------------------+-----------------+----------------------+---------------------------+---------------------+
//	| record count (8) | DataEnd (8)     | record bytes (8)     | CRC32C of bytes 0..23 (4) | magic "BLBF" (4)    |
//	+------------------+-----------------+----------------------+---------------------------+---------------------+
//
// DataEnd is the offset at which the footer begins (16 + record bytes). A
// file without a valid footer was not finished: the engine never references
// such a file (a blob file is synced, with its directory entry, before the
// manifest edit that adds it), so a reader refuses it as corrupt.
//
// # Blob index
//
// In the LSM, a separated value is replaced by an entry of kind
// base.KindBlobIndex whose value is
//
//	+-----------------+--------------------+------------------+-----------------------+
//	| compression (1) | file number uvarint| offset uvarint   | record length uvarint |
//	+-----------------+--------------------+------------------+-----------------------+
//
// compression is the record's: the file's, or none for a record flagged
// raw (a read checks that index, record and file agree, since a record
// decoded with the wrong algorithm would be a wrong value). offset
// is the record's offset in the blob file and record length its full
// stored length (lengths, key, stored value and CRC), so a read is one
// positioned read of exactly that many bytes.
//
// # Blob cache
//
// The cache maps (cache id, file number, offset) to the verified record,
// so a read that meets a blob index asks the cache before anything else:
// on a hit it takes no mutex (the lookup is atomic loads down a chain of
// the shard's hash table, a reference is taken with a compare-and-swap,
// CLOCK eviction is told of the use with an atomic store) and touches
// neither the blob file's metadata nor the
// reader cache. This is Titan's "blob cache first" order (TiKV
// titan#112, measured there at +6% read throughput), done for iterators too.
//
// A record enters the cache only after its CRC and key are checked, so a
// hit never returns unverified bytes. A compressed record enters
// it decoded (its lengths and key as stored, then the value, no CRC; see
// DecodeRecord), so that a hit decodes nothing; the hit path checks the
// stored lengths and the key against the index either way. Cache memory comes from the cache's
// own allocator: slabs mapped with mmap outside the Go heap (2 MiB huge
// pages where Linux has them, so that filling the cache faults once per
// slab rather than once per 4 KiB), carved into
// size classes 1/8 apart, so the cache's bytes are not doubled by the
// garbage collector's headroom (GOGC) and are not scanned. A cache entry is
// the raw buffer the record was read into, with a reference count: a hit
// hands the caller a Handle (a view of the value and Release), with no copy
// on the way in and none on the way out; the engine copies once into the
// caller's result. The memory returns to its slab when the last of the
// cache and the handles lets go. Close unmaps everything and reports any
// handle still outstanding.
//
// The cache has its own capacity, separate from the block cache: values
// are large, read once per Get, and would otherwise push out the index and
// data blocks that every read needs (see lsm.Options.BlobCacheSize).
package blob

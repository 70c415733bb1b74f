// Package record implements the log format shared by the write-ahead log and
// the manifest: a stream of records, each an arbitrary byte string, cut into
// checksummed fragments laid out in 32 KiB blocks. It is LevelDB's log
// format (doc/log_format.md), with a reader that tells a torn tail from
// corruption.
//
// # Layout
//
// The stream is a sequence of blocks of BlockSize (32768) bytes; only the
// last block may be shorter. A fragment never crosses a block boundary.
//
//	0                                   32768                      65536
//	+----------+----------+------+-------+------------------+--+-----
//	| fragment | fragment | ...  | pad   | fragment         |  | ...
//	+----------+----------+------+-------+------------------+--+-----
//	|<---------------- block 0 --------->|<--- block 1 ------->|
//
// A fragment is a 7-byte header followed by its payload:
//
//	0       4       6      7                        7+length
//	+-------+-------+------+---------- ... ---------+
//	|  CRC  |length | type |        payload          |
//	+-------+-------+------+---------- ... ---------+
//	 uint32  uint16  uint8
//	 (little-endian)
//
// The header's fields:
//
//   - CRC: CRC-32C (Castagnoli) of the type byte followed by the payload,
//     masked as LevelDB does: ((c >> 15) | (c << 17)) + 0xa282ead8, so that
//     the checksum of data that embeds checksums is not itself trivially
//     predictable.
//   - length: the payload's length; 7+length never exceeds what is left of
//     the block.
//   - type: 1 FULL (the whole record), 2 FIRST, 3 MIDDLE, 4 LAST (the
//     pieces of a record cut at block boundaries, in this order: FIRST,
//     zero or more MIDDLE, LAST). Type 0 is reserved: seven zero bytes
//     where a header is expected mean "no more data" (a preallocated or
//     zero-filled tail).
//
// When fewer than 7 bytes remain in a block, the writer fills them with
// zeros (pad) and starts the next fragment in the next block. An empty
// record is one FULL fragment of length 0. For example, a 40000-byte
// record written at offset 0 is a FIRST fragment at offset 0 carrying 32761
// bytes, which fills block 0, and a LAST fragment at offset 32768 carrying
// the other 7239; the next record starts at offset 40014. Record offsets
// (Writer.WriteRecord's result, Reader.LastRecordOffset) are the offsets of
// first fragments.
//
// # Torn tails and corruption
//
// A crash can leave the end of a log incomplete: a record whose last
// fragments are missing, truncated or garbage. That is a torn tail, and the
// Reader ends the log at the last complete record: Next returns io.EOF and
// TornTail reports where the dropped tail starts.
//
// Damage anywhere else is corruption. When the Reader meets a bad fragment
// (checksum mismatch, impossible length or type, a broken FIRST..LAST
// sequence, a truncated header or payload), it scans the rest of the input,
// byte by byte, for a fragment that starts a record (FULL or FIRST) and
// whose length fits its block and whose checksum matches. If there is one,
// records were written after the damage and dropping them would lose
// acknowledged writes: Next returns an error for which base.IsCorruption is
// true, naming the offsets (see CorruptionError). If there is none, the
// damage is a torn tail. Only record starts count as evidence: the later
// fragments of the damaged record itself may have reached the disk before
// its first one. Zero bytes where a header is expected are treated the same
// way: zeros up to the end are a clean end (or a torn tail if a record was
// incomplete), zeros followed by a valid record are a hole, i.e. corruption.
//
// WithPointInTimeRecovery lets an operator choose to stop at the first
// damage instead, accepting the loss of whatever follows.
//
// The scan can be fooled in one direction only: a record payload that itself
// contains bytes forming a valid record-format fragment (a log stored as a
// value) and is torn may be reported as corruption instead of a torn tail.
// It never turns corruption into a silent truncation. The scan computes a
// checksum only where a plausible header appears, so it reads damaged logs
// at close to checksum speed; adversarial input crafted to look like a
// header every few bytes costs about 150 ms per MiB.
package record

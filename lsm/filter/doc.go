// Package filter holds the engine's two Bloom filters: DynamicBloom, the
// in-memory filter of a memtable, and the blocked filter written into every
// SST (BlockedBuilder, BlockedFilter). Both take the same 64-bit key hash,
// Hash (XXH64), which a lookup computes once and hands to every filter it
// consults. The upper 32 bits of the hash pick where a key lives in a filter
// (fastrange: (hi32·n)>>32, a multiply instead of a division); the lower 32
// bits, re-mixed by multiplying with the golden ratio, pick its bits. Both
// halves are independent, so the filters use all 64 bits of entropy.
//
// # Memtable filter: DynamicBloom
//
// After RocksDB's DynamicBloom (util/dynamic_bloom.h, 2019). Probes come in
// pairs: one 64-bit word per pair, two bits set or tested in it. The word of
// the first pair is a = fastrange(hi32, numWords); the following pairs use
// words a^1, a^2, ..., which stay inside a's 64-byte aligned cache line. The
// bit positions are six-bit fields of x = lo32 · 0x9e3779b97f4a7c13, rotated
// right by 12 between pairs (five pairs per remix, hence at most 10 probes):
//
//	one cache line (8 words, 64-byte aligned)
//	+------+------+------+------+------+------+------+------+
//	|  w0  |  w1  |  w2  |  w3  |  w4  |  w5  |  w6  |  w7  |
//	+------+------+------+------+------+------+------+------+
//	          a^2    a^1     a              6 probes, a = 3:
//	                                        words 3, 2, 1; in each the
//	                                        bits x&63 and (x>>6)&63
//
// Add is lock-free: atomic loads and, where a bit is missing, atomic OR.
// MayContain uses atomic loads only. The array is allocated 64-byte aligned
// and rounded to whole lines.
//
// # SST filter: blocked (cache-local) Bloom
//
// After RocksDB's FastLocalBloom (util/bloom_impl.h, the format_version=5
// full filter). A key's line is fastrange(hi32, numLines); its k probes are
// the top 9 bits of h2, h2·0x9e3779b9, h2·0x9e3779b9², ... (32-bit products,
// h2 = lo32), each addressing one of the line's 512 bits: bit b is bit b%8
// of byte b/8 of the line. k follows RocksDB's table for the bits/key
// setting (6 at 10 bits/key). A query reads exactly one cache line and does
// not allocate.
//
// The encoding, as BlockedBuilder.Finish appends it and ParseBlocked reads
// it (n = ceil(keys · bitsPerKey / 512) lines, 0 when there are no keys):
//
//	0          64         128            64·(n-1)      64·n    64·n+1   64·n+2
//	+----------+----------+---- ... ----+-------------+--------+--------+
//	|  line 0  |  line 1  |             |  line n-1   | probes | format |
//	+----------+----------+---- ... ----+-------------+--------+--------+
//	 512 bits each                                      k: 1..30   1
//
// The trailer is read from the end: format (1 is the only one) then the
// probe count. ParseBlocked returns a corruption error when the input is
// shorter than the trailer, the format is unknown, the probe count is 0 or
// above 30, the body is not whole lines, or there are 2^32 lines or more (a
// 32-bit fastrange could not address them). A filter with no lines is the
// two trailer bytes alone; it, and the zero BlockedFilter, contain nothing.
// The encoding carries no checksum: the SST block holding it has one.
//
// # Accuracy against speed
//
// A standard Bloom filter at 10 bits/key and its best 7 probes has an FP
// rate of about 0.82%, but each probe is a random memory access. Confining
// all probes to one 512-bit cache line costs about 1.15x in FP rate (RocksDB
// measures 0.84% to 0.97%); our blocked SST filter measures 0.95-0.97% with 6
// probes. Setting two probes per 64-bit word costs another ~1.12x (0.97% to
// 1.09%); DynamicBloom measures 1.09% with 6 probes. In exchange a query
// costs one cache line and, for DynamicBloom, three word loads whose
// addresses are known right after one multiply, and 3% more memory (10.3
// bits/key) buys the FP rate back. The trade is right for the memtable, where
// a false positive costs a skiplist search (~50x a filter probe), and the
// more accurate blocked layout is used for SSTs, where a false positive can
// cost a block read from disk.
//
// For DynamicBloom the textbook probe count round(bitsPerKey·ln 2) is a poor
// choice: with 8 probes the four words a^0..a^3 fill an aligned 256-bit group
// with exactly two bits per word, and at 10 bits/key the FP rate rises from
// 1.09% (6 probes) to 1.24%. NewDynamicBloomBitsPerKey therefore picks the
// even count measured best (see chooseDynamicProbes), and NewDynamicBloom
// rounds an odd count down, as RocksDB does.
package filter

package filter

import (
	"math"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// Hash returns the 64-bit hash of key that both filters consume. The engine
// computes it once per lookup and hands it to every filter it consults (the
// memtables' DynamicBlooms and each SST's BlockedFilter).
func Hash(key []byte) uint64 { return xxhash.Sum64(key) }

const (
	// golden64 is 2^64 divided by the golden ratio: multiplying by it
	// spreads the entropy of the low bits of a word over all 64 bits.
	golden64 = 0x9e3779b97f4a7c13

	// cacheLineBytes is the unit of locality of both filters.
	cacheLineBytes = 64
	// wordsPerLine is the number of 64-bit words in a cache line.
	wordsPerLine = cacheLineBytes / 8

	// dynMaxProbes is the largest probe count of a DynamicBloom: one 64-bit
	// remix yields five 12-bit pairs of bit positions (see DoubleProbe in
	// RocksDB's util/dynamic_bloom.h, which has the same limit).
	dynMaxProbes = 10
	// dynMaxWords bounds the array so that a 32-bit fastrange can address
	// every word: 2^32 words, 32 GiB.
	dynMaxWords = 1 << 32
)

// DynamicBloom is the memtable's Bloom filter, after RocksDB's DynamicBloom
// (util/dynamic_bloom.h, 2019 rewrite). It lives only in memory, has a fixed
// size, and supports lock-free concurrent Add and MayContain.
//
// A key's probes are made in pairs: every pair sets (or tests) two bits of
// one 64-bit word, so k probes touch k/2 words. The first word is chosen by
// fastrange of the upper 32 bits of the hash; the others are its neighbours
// a^1, a^2, ... which lie in the same 64-byte aligned cache line. The bit
// positions come from the lower 32 bits of the hash, expanded to 64 bits by
// one multiplication with the golden ratio and rotated by 12 bits between
// pairs (6 bits per position).
//
// All accesses to the bit array are atomic: Add ORs bits in with atomic.OrUint64 and
// MayContain reads words with atomic.LoadUint64. A MayContain concurrent with
// the Add of the same key may answer either way; the happens-before edge
// between a writer's Add and a reader that must see it is the caller's (the
// memtable publishes it with its sequence number). Once Add(h) has returned,
// MayContain(h) is true for every caller that observes that return.
type DynamicBloom struct {
	// lines is the bit array, one element per cache line. Invariant:
	// 1 <= len(lines) <= dynMaxWords/wordsPerLine and &lines[0] is 64-byte
	// aligned. Every word is accessed atomically.
	lines []line
	// numWords is 8·len(lines), the fastrange multiplier.
	numWords uint64
	// numDoubleProbes is numProbes/2, the number of words probed per key;
	// 1 <= numDoubleProbes <= dynMaxProbes/2.
	numDoubleProbes int
}

// NewDynamicBloom returns an empty filter of at least totalBits bits (rounded
// up to whole 64-byte cache lines, at least one, at most 2^38 bits) making
// numProbes probes per key.
//
// The probes are made in pairs, so numProbes is normalised as RocksDB does:
// an odd count is rounded down, except that 1 becomes 2, and counts above 10
// become 10. Rounding down is also the better choice where it matters most:
// at 10 bits/key, 6 probes give a 1.09% FP rate and 8 give 1.24% (see
// chooseDynamicProbes). NumProbes reports the count in use.
func NewDynamicBloom(totalBits uint64, numProbes int) *DynamicBloom {
	numProbes = min(max(numProbes, 2), dynMaxProbes) &^ 1

	// RocksDB rounds the array to blocks of roundUpToPow2(numProbes/2) words
	// so that a^i stays in range for every probed i. We round to whole cache
	// lines instead (at most 511 extra bits): it covers every legal probe
	// count, and a fixed-size line lets the compiler drop the bounds checks
	// inside the probe loop.
	const lineBits = cacheLineBytes * 8
	numLines := totalBits/lineBits + min(totalBits%lineBits, 1)
	numLines = min(max(numLines, 1), dynMaxWords/wordsPerLine)
	numWords := numLines * wordsPerLine

	return &DynamicBloom{
		lines:           makeAlignedLines(int(numLines)),
		numWords:        numWords,
		numDoubleProbes: numProbes / 2,
	}
}

// NewDynamicBloomBitsPerKey returns a filter sized for expectedKeys keys at
// bitsPerKey bits each (at least one cache line), with the probe count that
// chooseDynamicProbes picks for bitsPerKey.
func NewDynamicBloomBitsPerKey(expectedKeys int, bitsPerKey float64) *DynamicBloom {
	if !(bitsPerKey > 0) { // Also catches NaN.
		bitsPerKey = 1
	}
	totalBits := math.Ceil(float64(max(expectedKeys, 1)) * bitsPerKey)
	totalBits = min(totalBits, dynMaxWords*64)
	return NewDynamicBloom(uint64(totalBits), chooseDynamicProbes(bitsPerKey))
}

// chooseDynamicProbes returns the even probe count with the lowest measured
// FP rate for bitsPerKey. The textbook optimum round(bitsPerKey·ln 2) is
// wrong for this layout: the k/2 probed words a, a^1, ... are confined to an
// aligned group of roundUpToPow2(k/2) words, so 8 probes fill a 256-bit group
// with exactly two bits per word and lose to both 6 and 10. Measured over
// 2^19 keys and 2^21 non-members (FP rate by probe count):
//
//	bits/key     2       4       6       8       10
//	   4       15.9%   16.8%   22.7%   32.2%   42.8%
//	   6        8.5%    6.3%    7.0%    9.7%   13.2%
//	   8        5.3%    2.89%   2.57%   3.25%   3.98%
//	  10        3.7%    1.55%   1.09%   1.24%   1.32%
//	  12        2.7%    0.89%   0.52%   0.53%   0.49%
//	  14        2.1%    0.57%   0.27%   0.25%   0.20%
//
// so 10 bits/key (≈6.9 by the textbook) gets 6 probes, as in RocksDB's
// memtable default.
func chooseDynamicProbes(bitsPerKey float64) int {
	switch {
	case bitsPerKey < 4.5:
		return 2
	case bitsPerKey < 7:
		return 4
	case bitsPerKey < 11.5:
		return 6
	default:
		return 10
	}
}

// line is one 64-byte cache line of a DynamicBloom.
type line [wordsPerLine]uint64

// makeAlignedLines returns n zeroed lines, the first 64-byte aligned. Go
// never moves heap objects, so the alignment holds for the slice's life.
func makeAlignedLines(n int) []line {
	buf := make([]uint64, (n+1)*wordsPerLine-1)
	mis := uintptr(unsafe.Pointer(&buf[0])) % cacheLineBytes // multiple of 8
	skip := int((cacheLineBytes-mis)%cacheLineBytes) / 8
	return unsafe.Slice((*line)(unsafe.Pointer(&buf[skip])), n)
}

// fastrange32 maps x uniformly onto [0, n) for n <= 2^32 with a multiply
// and a shift instead of a division (Lemire's "fastrange").
func fastrange32(x uint32, n uint64) uint64 { return (uint64(x) * n) >> 32 }

// locate returns the cache line holding the key's first word and that word's
// index within the line.
func (d *DynamicBloom) locate(h uint64) (*line, uint64) {
	a := fastrange32(uint32(h>>32), d.numWords)
	return &d.lines[a/wordsPerLine], a % wordsPerLine
}

// pairMask returns the two bits of one probe pair: bit positions from the low
// twelve bits of x, six each.
func pairMask(x uint64) uint64 { return 1<<(x&63) | 1<<((x>>6)&63) }

// Add inserts the key with hash h. It is safe to call concurrently with Add
// and MayContain from any number of goroutines.
func (d *DynamicBloom) Add(h uint64) {
	ln, off := d.locate(h)
	n := d.numDoubleProbes
	x := uint64(uint32(h)) * golden64
	for i := 0; ; {
		mask := pairMask(x)
		w := &ln[(off^uint64(i))%wordsPerLine]
		// Read before writing, as RocksDB's AddHashConcurrently does: once
		// the filter fills up most pairs are already set, and a plain load
		// keeps the cache line shared instead of taking it exclusive.
		if atomic.LoadUint64(w)&mask != mask {
			atomic.OrUint64(w, mask)
		}
		if i++; i == n {
			return
		}
		x = bits.RotateLeft64(x, -12)
	}
}

// MayContain reports whether the key with hash h may have been added: false
// means it certainly was not. Safe for concurrent use with Add.
func (d *DynamicBloom) MayContain(h uint64) bool {
	ln, off := d.locate(h)
	n := d.numDoubleProbes
	x := uint64(uint32(h)) * golden64
	for i := 0; ; {
		mask := pairMask(x)
		if atomic.LoadUint64(&ln[(off^uint64(i))%wordsPerLine])&mask != mask {
			return false
		}
		if i++; i == n {
			return true
		}
		x = bits.RotateLeft64(x, -12)
	}
}

// AddKey inserts key; it is Add(Hash(key)).
func (d *DynamicBloom) AddKey(key []byte) { d.Add(Hash(key)) }

// MayContainKey is MayContain(Hash(key)).
func (d *DynamicBloom) MayContainKey(key []byte) bool { return d.MayContain(Hash(key)) }

// SizeBytes returns the size of the bit array in bytes.
func (d *DynamicBloom) SizeBytes() int { return len(d.lines) * cacheLineBytes }

// NumProbes returns the number of bits set per key (always even).
func (d *DynamicBloom) NumProbes() int { return 2 * d.numDoubleProbes }

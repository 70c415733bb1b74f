package filter

import (
	"math"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

const (
	// golden32 is 2^32 divided by the golden ratio; multiplying by it
	// re-mixes a 32-bit hash so that its top bits give a fresh probe.
	golden32 = 0x9e3779b9

	// blockedFormatV1 is the format byte of the 512-bit cache-local filter.
	blockedFormatV1 = 1
	// blockedTrailerLen is the size of the trailer: numProbes, format.
	blockedTrailerLen = 2
	// blockedMaxProbes is the largest probe count ParseBlocked accepts. The
	// builder never writes more than 24.
	blockedMaxProbes = 30

	// Bits-per-key bounds of the builder, in millibits as RocksDB counts.
	minMillibitsPerKey = 1000
	maxMillibitsPerKey = 100000
)

// BlockedBuilder accumulates the hashes of an SST's keys and serialises a
// cache-local blocked Bloom filter over them (see the package comment for the
// design and the format). It holds 8 bytes per distinct key until Finish. A
// BlockedBuilder is not safe for concurrent use.
type BlockedBuilder struct {
	millibitsPerKey uint64
	numProbes       int
	// hashes of the keys added since the last Finish, consecutive
	// duplicates removed.
	hashes []uint64
}

// NewBlockedBuilder returns a builder spending bitsPerKey bits per distinct
// key. bitsPerKey is clamped to [1, 100]; NaN counts as 1. The probe count
// follows RocksDB's FastLocalBloom (format_version 5) choice, the most
// accurate count for each setting: 6 probes at 10 bits/key.
func NewBlockedBuilder(bitsPerKey float64) *BlockedBuilder {
	millibits := uint64(minMillibitsPerKey)
	if bitsPerKey > 1 { // False for NaN.
		millibits = uint64(math.Round(min(bitsPerKey, maxMillibitsPerKey/1000) * 1000))
	}
	return &BlockedBuilder{
		millibitsPerKey: millibits,
		numProbes:       chooseBlockedProbes(millibits),
	}
}

// chooseBlockedProbes returns the probe count for a 512-bit cache-local Bloom
// filter at millibitsPerKey. The thresholds are those of RocksDB's
// FastLocalBloomImpl::ChooseNumProbes, found by measurement; for high bits/key
// the best count is well below the textbook bitsPerKey·ln 2 because all probes
// share one line.
func chooseBlockedProbes(millibitsPerKey uint64) int {
	thresholds := [...]uint64{2080, 3580, 5100, 6640, 8300, 10070, 11720, 14001, 16050, 18300, 22001, 25501}
	for i, t := range thresholds {
		if millibitsPerKey <= t {
			return i + 1
		}
	}
	if millibitsPerKey > 50000 {
		return 24
	}
	return int((millibitsPerKey-1)/2000 - 1)
}

// AddHash adds a key by its Hash. A hash equal to the previous one is dropped,
// so the repeated versions of one user key in a sorted SST count once.
func (b *BlockedBuilder) AddHash(h uint64) {
	if n := len(b.hashes); n > 0 && b.hashes[n-1] == h {
		return
	}
	b.hashes = append(b.hashes, h)
}

// AddKey adds key; it is AddHash(Hash(key)).
func (b *BlockedBuilder) AddKey(key []byte) { b.AddHash(Hash(key)) }

// NumKeys returns the number of distinct hashes added since the last Finish.
func (b *BlockedBuilder) NumKeys() int { return len(b.hashes) }

// Finish appends the serialised filter over the keys added since the last
// Finish to dst and returns the extended slice. The builder is then empty and
// can be reused. With no keys the filter has no lines: its encoding is the
// two-byte trailer alone, and it answers false to every query.
func (b *BlockedBuilder) Finish(dst []byte) []byte {
	numLines := b.numLines()
	n := int(numLines)*cacheLineBytes + blockedTrailerLen
	start := len(dst)
	dst = slices.Grow(dst, n)[:start+n]
	clear(dst[start:])
	lines := dst[start : start+int(numLines)*cacheLineBytes]
	for _, h := range b.hashes {
		off := fastrange32(uint32(h>>32), numLines) * cacheLineBytes
		line := (*[cacheLineBytes]byte)(lines[off:])
		h2 := uint32(h)
		for i := 0; i < b.numProbes; i++ {
			// The top 9 bits address one of the line's 512 bits.
			bit := h2 >> (32 - 9)
			line[bit>>3] |= 1 << (bit & 7)
			h2 *= golden32
		}
	}
	dst[len(dst)-2] = byte(b.numProbes)
	dst[len(dst)-1] = blockedFormatV1
	b.hashes = b.hashes[:0]
	return dst
}

// numLines returns the number of 64-byte lines for the pending keys:
// ceil(keys·bitsPerKey/512), at least one if there is a key.
func (b *BlockedBuilder) numLines() uint64 {
	const lineMillibits = cacheLineBytes * 8 * 1000
	hi, millibits := bits.Mul64(uint64(len(b.hashes)), b.millibitsPerKey)
	if hi != 0 || millibits > math.MaxUint32*lineMillibits {
		// Beyond 256 GiB the 32-bit fastrange cannot address more lines.
		return math.MaxUint32
	}
	return (millibits + lineMillibits - 1) / lineMillibits
}

// blockedLine is one 64-byte line of a BlockedFilter: bit i of the line is
// bit i%8 of byte i/8.
type blockedLine [cacheLineBytes]byte

// BlockedFilter is a parsed, immutable cache-local blocked Bloom filter. It
// aliases the bytes it was parsed from. The zero value is the empty filter,
// which contains nothing. Safe for concurrent use.
type BlockedFilter struct {
	// lines is the bit array, aliasing the parsed bytes. Invariant:
	// len(lines) == numLines.
	lines []blockedLine
	// numLines is the number of 64-byte lines, at most 2^32-1; 0 for the
	// empty filter.
	numLines uint64
	// numProbes is in [1, blockedMaxProbes] unless numLines == 0.
	numProbes int
}

// ParseBlocked parses a filter written by BlockedBuilder.Finish. The result
// aliases data, which must stay unchanged while the filter is in use. A
// malformed encoding (too short, a body that is not whole lines, an unknown
// format, a probe count of 0 or above 30) returns an error for which
// base.IsCorruption is true.
func ParseBlocked(data []byte) (BlockedFilter, error) {
	if len(data) < blockedTrailerLen {
		return BlockedFilter{}, base.CorruptionErrorf("filter: blocked filter of %d bytes is shorter than its trailer", len(data))
	}
	body := len(data) - blockedTrailerLen
	if format := data[body+1]; format != blockedFormatV1 {
		return BlockedFilter{}, base.CorruptionErrorf("filter: unknown blocked filter format %d", format)
	}
	numProbes := int(data[body])
	if numProbes == 0 || numProbes > blockedMaxProbes {
		return BlockedFilter{}, base.CorruptionErrorf("filter: blocked filter has %d probes", numProbes)
	}
	if body%cacheLineBytes != 0 {
		return BlockedFilter{}, base.CorruptionErrorf("filter: blocked filter body of %d bytes is not a whole number of %d-byte lines", body, cacheLineBytes)
	}
	numLines := uint64(body / cacheLineBytes)
	if numLines > math.MaxUint32 {
		return BlockedFilter{}, base.CorruptionErrorf("filter: blocked filter has %d lines", numLines)
	}
	f := BlockedFilter{numLines: numLines, numProbes: numProbes}
	if numLines > 0 {
		f.lines = unsafe.Slice((*blockedLine)(unsafe.Pointer(&data[0])), numLines)
	}
	return f, nil
}

// MayContain reports whether the key with hash h may be in the set: false
// means it certainly is not. It reads one 64-byte line and does not allocate.
func (f BlockedFilter) MayContain(h uint64) bool {
	if f.numLines == 0 {
		return false
	}
	line := &f.lines[fastrange32(uint32(h>>32), f.numLines)]
	h2 := uint32(h)
	for i := f.numProbes; i > 0; i-- {
		bit := h2 >> (32 - 9)
		if line[bit>>3]&(1<<(bit&7)) == 0 {
			return false
		}
		h2 *= golden32
	}
	return true
}

// MayContainKey is MayContain(Hash(key)).
func (f BlockedFilter) MayContainKey(key []byte) bool { return f.MayContain(Hash(key)) }

// NumProbes returns the number of bits tested per query.
func (f BlockedFilter) NumProbes() int { return f.numProbes }

// SizeBytes returns the size of the bit array in bytes (without the trailer).
func (f BlockedFilter) SizeBytes() int { return len(f.lines) * cacheLineBytes }
